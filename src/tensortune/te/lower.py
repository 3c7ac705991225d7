"""Lowering a schedule to a loop-nest program (`ir.LoweredFunc`).

Each stage becomes a loop nest over its leaf loops; a stage computed at a loop of its
consumer is emitted (with its buffer) at the start of that loop's body; reductions get
an initialization nest just before their first reduction loop; non-dividing splits and
regions that may leave the tensor are guarded by conditions placed at the innermost
loop they depend on. A sum written straight into a bfloat16 output accumulates in a
float32 root buffer (`C.acc`) that a last nest rounds into the output, so every
bfloat16 sum accumulates in float32 (temporaries and tiles are float32 already:
`te.dtype.stored_dtype`).

Example:
    >>> from tensortune import te
    >>> A = te.placeholder((6,), name="A")
    >>> B = te.compute((6,), lambda i: A[i] * 2.0, name="B")
    >>> s = te.create_schedule(B)
    >>> _ = s[B].split("i", 4)
    >>> print(s.lower())
    kernel(A: float32[6], B: float32[6]):
      for i.0 in 0..2:
        for i.1 in 0..4:
          if ((i.0 * 4) + i.1) < 6:
            B[((i.0 * 4) + i.1)] = (A[((i.0 * 4) + i.1)] * 2.0)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .affine import Affine
from .bound import root_values
from .dtype import TEError
from .expr import Binary, Buffer, BufferLoad, Expr, Logical, Reduce, TensorRead, Var, compare
from .ir import Allocate, For, IfThenElse, LoweredFunc, Stmt, Store, seq
from .state import StageState
from .tensor import Tensor
from .visit import map_expr, substitute, variables

if TYPE_CHECKING:
    from .schedule import Schedule

_KIND = {"parallel": "parallel", "vectorize": "vectorize", "unroll": "unroll"}


def normalize_index(e: Expr) -> Expr:
    return Affine.of(e).to_expr() if e.dtype == "int32" else e


def lower(sch: Schedule, args: Sequence[Tensor] | None = None, name: str = "kernel") -> LoweredFunc:
    """The loop-nest program of a schedule; `args` orders the arguments (default: inputs,
    then outputs)."""
    return _Lowering(sch, args, name).run()


class _Lowering:
    def __init__(self, sch: Schedule, args: Sequence[Tensor] | None, name: str) -> None:
        self.sch, self.name = sch, name
        self.bounds = sch.bounds()
        self.bodies = sch.bodies()
        self.stages = [st for st in (sch.state(s.name) for s in sch.stages) if not st.inlined]
        self.args = _check_args(sch, args)
        self.buffers: dict[str, Buffer] = {t.name: Buffer(t.name, t.shape, t.dtype) for t in self.args}
        self.bases: dict[str, tuple[Affine, ...]] = {}
        self.perms: dict[str, tuple[int, ...]] = {}  # buffers laid out in another order (reorder_storage)
        for st in self.stages:
            b = self.bounds[st.name]
            if st.name not in self.buffers:
                scope = "global" if st.attach is None else "local"
                perm = st.storage_perm
                region = b.region if perm is None else tuple(b.region[d] for d in perm)
                self.buffers[st.name] = Buffer(st.name, region, st.tensor.dtype, scope)
                self.bases[st.name] = b.base
                if perm is not None:
                    self.perms[st.name] = perm
        self.accumulators = {st.name: Buffer(f"{st.name}.acc", st.tensor.shape, "float32")
                             for st in self.stages if _needs_accumulator(st)}
        self.attached: dict[tuple[str, str], list[StageState]] = {}
        for st in self.stages:
            if st.attach is not None:
                self.attached.setdefault(st.attach, []).append(st)

    def run(self) -> LoweredFunc:
        body = seq([self.stage(st) for st in self.stages if st.attach is None])
        for st in reversed(self.stages):
            buf = self.buffers[st.name]
            if st.attach is None and buf.scope == "global" and not st.is_output:
                body = Allocate(buf, body)
            if st.name in self.accumulators:
                body = Allocate(self.accumulators[st.name], body)
        return LoweredFunc(self.name, tuple(self.buffers[t.name] for t in self.args), body)

    def load(self, r: TensorRead) -> Expr:
        base = self.bases.get(r.tensor.name)
        idx = r.indices if base is None else tuple(Binary("sub", ix, b.to_expr()) for ix, b in zip(r.indices, base))
        return BufferLoad(self.buffers[r.tensor.name], self.layout(r.tensor.name, idx))

    def layout(self, name: str, indices: Sequence[Expr]) -> tuple[Expr, ...]:
        """Indices in axis order -> the buffer's (normalized, in its storage order)."""
        idx = tuple(normalize_index(i) for i in indices)
        perm = self.perms.get(name)
        return idx if perm is None else tuple(idx[d] for d in perm)

    def stage(self, st: StageState) -> Stmt:
        b = self.bounds[st.name]
        vals, guards = st.loop_values(b.extents)
        root = root_values(st, b)
        for d, ax in enumerate(st.axes):
            if b.lower_guard[d]:
                guards.append(compare("ge", root[ax], 0))
            if b.upper_guard[d]:
                guards.append(compare("lt", root[ax], st.tensor.shape[d]))
        body = self.bodies[st.name]
        body = map_expr(substitute(body, root), lambda x: self.load(x) if isinstance(x, TensorRead) else None)
        buf = self.buffers[st.name]
        index = self.layout(st.name, [vals[a.name] for a in st.axes])  # relative to the region's base
        leaves = st.leaves
        own = {st.loop_var(x): k for k, x in enumerate(leaves)}
        guard_at: dict[int, list[Expr]] = {}
        for g in guards:
            pos = max((own[v] for v in variables(g) if v in own), default=-1)
            guard_at.setdefault(pos, []).append(g)
        if not st.reduce_axes:
            return self.nest(st, list(range(len(leaves))), guard_at,
                             lambda: Store(buf, index, body, st.name), attach=True, top_guards=guard_at.get(-1, []))
        assert isinstance(body, Reduce)
        out = buf
        buf = self.accumulators.get(st.name, buf)
        current = BufferLoad(buf, index)
        update = {"sum": lambda: Binary("add", current, body.source),
                  "max": lambda: Binary("max", current, body.source),
                  "min": lambda: Binary("min", current, body.source)}[body.combiner]()
        first = next(k for k, x in enumerate(leaves) if st.kinds[x] == "reduce")
        init_loops = [k for k in range(first, len(leaves)) if st.kinds[leaves[k]] == "spatial"]
        init_guards = {k: g for k, g in guard_at.items() if k in init_loops}
        outer_guards = {k: g for k, g in guard_at.items() if k < first}

        def init() -> Stmt:
            return self.nest(st, init_loops, init_guards, lambda: Store(buf, index, body.init, st.name, "init"),
                             attach=False)

        main = self.nest(st, list(range(first, len(leaves))), {k: g for k, g in guard_at.items() if k >= first},
                         lambda: Store(buf, index, update, st.name, "update"), attach=True)
        nest = self.nest(st, list(range(first)), outer_guards, lambda: seq([init(), main]), attach=True,
                         top_guards=guard_at.get(-1, []))
        return nest if buf is out else seq([nest, _copy_out(st, buf, out)])

    def nest(self, st: StageState, positions: list[int], guard_at: dict[int, list[Expr]],
             make_body: Callable[[], Stmt], attach: bool, top_guards: Sequence[Expr] = ()) -> Stmt:
        b = self.bounds[st.name]

        def go(k: int) -> Stmt:
            if k == len(positions):
                return make_body()
            pos = positions[k]
            loop = st.leaves[pos]
            inner = go(k + 1)
            if attach:
                for p in reversed(self.attached.get((st.name, loop), [])):
                    inner = Allocate(self.buffers[p.name], seq([self.stage(p), inner]))
            inner = guarded(guard_at.get(pos, []), inner)
            kind = _KIND.get(st.annotations.get(loop, ""), "serial")
            return For(st.loop_var(loop), b.extents[loop], kind, inner, st.name, loop, st.kinds[loop])

        return guarded(list(top_guards), go(0))


def _needs_accumulator(st: StageState) -> bool:
    return (st.is_output and st.tensor.dtype == "bfloat16" and isinstance(st.body, Reduce)
            and st.body.combiner == "sum")  # (max and min round alike step by step or at the end)


def _copy_out(st: StageState, acc: Buffer, out: Buffer) -> Stmt:
    """`out = acc` (rounded by the store) over the whole output: the outer loop parallel
    when the stage runs in parallel, the inner one vectorized."""
    idx = tuple(Var(f"{st.name}.{a.name}.out") for a in st.axes)
    body: Stmt = Store(out, idx, BufferLoad(acc, idx), st.name)
    parallel = "parallel" in st.annotations.values()
    for d in reversed(range(len(st.axes))):
        kind = "vectorize" if d == len(st.axes) - 1 else "parallel" if d == 0 and parallel else "serial"
        body = For(idx[d], st.axes[d].extent, kind, body, st.name, f"{st.axes[d].name}.out", "spatial")
    return body


def guarded(conds: Sequence[Expr], body: Stmt) -> Stmt:
    """`body` under the conjunction of `conds` (`body` itself when there are none)."""
    if not conds:
        return body
    cond = conds[0]
    for c in conds[1:]:
        cond = Logical("and", cond, c)
    return IfThenElse(cond, body)


def _check_args(sch: Schedule, args: Sequence[Tensor] | None) -> list[Tensor]:
    if args is None:
        return list(sch.inputs) + list(sch.outputs)
    args = list(args)
    names = [t.name for t in args]
    for t in list(sch.inputs) + list(sch.outputs):
        if not any(a is t for a in args):
            role = "input" if t.is_placeholder else "output"
            raise TEError(f"args must list every input and output; {role} {t.name!r} is missing (args: {names})")
    for a in args:
        if not any(a is t for t in list(sch.inputs) + list(sch.outputs)):
            raise TEError(f"argument {a.name!r} is neither an input nor an output of the schedule")
    if len(set(names)) != len(names):
        raise TEError(f"repeated argument in {names}")
    return args

