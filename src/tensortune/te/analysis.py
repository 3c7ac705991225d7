"""Facts about a lowered loop nest, per store: the loops around it, the operations it
does, and how each memory access moves with each loop. Cost-model features (Ansor's
per-store features, AutoTVM's itervar features) are computed from these.

Example:
    >>> from tensortune import te
    >>> from tensortune.te.workloads import matmul
    >>> w = matmul(64, 64, 64)
    >>> s = te.create_schedule(w.outputs)
    >>> update = [x for x in loop_nest_info(s) if x.role == "update"][0]
    >>> [(l.name, l.extent) for l in update.loops]
    [('i', 64), ('j', 64), ('k', 64)]
    >>> [(a.buffer, a.strides) for a in update.accesses if not a.is_write]
    [('C', (64, 1, 0)), ('A', (64, 0, 1)), ('B', (0, 1, 64))]
    >>> update.ops["float_fma"], update.iterations
    (1, 262144)
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

from .affine import Affine
from .dtype import is_float, itemsize, stored_dtype
from .expr import Binary, Buffer, BufferLoad, Call, Cast, Compare, Expr, Logical, Not, Select, Var, const
from .ir import For, IfThenElse, LoweredFunc, Stmt, Store, stmt_children
from .visit import children, walk


@dataclass(frozen=True)
class LoopInfo:
    name: str  # the schedule's loop name
    stage: str
    extent: int
    kind: str  # "serial", "parallel", "vectorize" or "unroll"
    axis_kind: str  # "spatial" or "reduce"


@dataclass(frozen=True)
class AccessInfo:
    buffer: str
    scope: str  # "global" (argument or root temporary) or "local" (a tile)
    dtype: str
    is_write: bool
    strides: tuple[int | None, ...]  # elements moved per step of each enclosing loop; None: not affine
    buffer_elements: int
    itemsize: int  # bytes per element as stored (bfloat16 temporaries hold float32: te.dtype.stored_dtype)

    def footprint(self, loops: tuple[LoopInfo, ...], level: int) -> int:
        """Distinct elements touched by the loops at `level` and inside (an upper bound for
        affine accesses, capped by the buffer's size)."""
        n = 1
        for lp, st in zip(loops[level:], self.strides[level:]):
            if st != 0:
                n *= lp.extent
        return min(n, self.buffer_elements)

    def bytes(self, loops: tuple[LoopInfo, ...], level: int) -> int:
        return self.footprint(loops, level) * self.itemsize


@dataclass(frozen=True)
class StoreInfo:
    stage: str
    role: str  # "compute", "init" or "update"
    loops: tuple[LoopInfo, ...]  # outermost first
    accesses: tuple[AccessInfo, ...]  # the write first
    ops: dict[str, int]  # per execution: float_add, float_mul, float_fma, float_div, float_math, int, compare, select
    guarded: bool  # under a condition (tails, padding regions)

    @property
    def iterations(self) -> int:
        return math.prod(lp.extent for lp in self.loops)

    @property
    def flops(self) -> int:
        per = sum(self.ops.get(k, 0) for k in ("float_add", "float_mul", "float_div", "float_math"))
        return self.iterations * (per + 2 * self.ops.get("float_fma", 0))


def loop_nest_info(program: Any) -> list[StoreInfo]:
    """One record per store of a schedule (or of a `LoweredFunc`), in program order."""
    func: LoweredFunc = program if isinstance(program, LoweredFunc) else program.lower()
    out: list[StoreInfo] = []
    _visit(func.body, (), False, out, frozenset(func.args))
    return out


def _visit(s: Stmt, loops: tuple[For, ...], guarded: bool, out: list[StoreInfo], args: frozenset[Buffer]) -> None:
    if isinstance(s, Store):
        out.append(_store_info(s, loops, guarded, args))
        return
    inner = loops + (s,) if isinstance(s, For) else loops
    for c in stmt_children(s):
        _visit(c, inner, guarded or isinstance(s, IfThenElse), out, args)


def _store_info(s: Store, loops: tuple[For, ...], guarded: bool, args: frozenset[Buffer]) -> StoreInfo:
    infos = tuple(LoopInfo(f.loop, f.stage, f.extent, f.kind, f.axis_kind) for f in loops)
    loop_vars = [f.var for f in loops]
    accesses = [_access(s.buffer, s.indices, True, loop_vars, args)]
    for x in walk(s.value):
        if isinstance(x, BufferLoad):
            accesses.append(_access(x.buffer, x.indices, False, loop_vars, args))
    return StoreInfo(s.stage, s.role, infos, tuple(accesses), dict(_ops(s.value)), guarded)


def _access(buffer: Buffer, indices: tuple[Expr, ...], write: bool, loop_vars: list[Var],
            args: frozenset[Buffer]) -> AccessInfo:
    shape = buffer.shape
    flat: Expr = const(0)
    stride = 1
    for ix, n in zip(reversed(indices), reversed(shape)):
        flat = Binary("add", flat, Binary("mul", ix, const(stride)))
        stride *= n
    aff = Affine.of(flat)
    coef = dict(aff.terms)
    opaque = [a for a in coef if not isinstance(a, Var)]
    strides: list[int | None] = []
    for v in loop_vars:
        if any(v in set(walk(a)) for a in opaque):
            strides.append(None)
        else:
            strides.append(coef.get(v, 0))
    return AccessInfo(buffer.name, buffer.scope, buffer.dtype, write, tuple(strides), math.prod(shape),
                      itemsize(stored_dtype(buffer.dtype, buffer in args)))


def _values(e: Expr):
    """Nodes of `e` that compute values (not the index arithmetic of loads)."""
    yield e
    if not isinstance(e, BufferLoad):
        for c in children(e):
            yield from _values(c)


def _ops(e: Expr) -> Counter:
    c: Counter = Counter()
    for x in _values(e):
        if isinstance(x, Binary):
            if not is_float(x.dtype):
                c["int"] += 1
            elif x.op == "add" and any(isinstance(y, Binary) and y.op == "mul" for y in (x.a, x.b)):
                c["float_fma"] += 1
                c["float_mul"] -= 1
            elif x.op in ("add", "sub", "min", "max"):
                c["float_add"] += 1
            elif x.op == "mul":
                c["float_mul"] += 1
            elif x.op == "div":
                c["float_div"] += 1
        elif isinstance(x, Call):
            c["float_math"] += 1
        elif isinstance(x, (Compare, Logical, Not)):
            c["compare"] += 1
        elif isinstance(x, Select):
            c["select"] += 1
        elif isinstance(x, Cast):
            c["cast"] += 1
    return +c
