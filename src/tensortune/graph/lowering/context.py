"""What a lowering rule works with: operands (`Val`), and helpers that add te stages.

A rule receives the FX node's arguments with tensors replaced by `Val`s and returns the
`Val` (or tuple of them) of its result. It adds stages through the context:
`ctx.elementwise(fn, operands)` broadcasts and promotes like torch, `ctx.reduce(...)`
reduces over dimensions, `ctx.stage(...)` adds any te compute. Each stage's `build`
closure makes its te tensor from the te tensors of its inputs, so a kernel can be
assembled later from any set of stages over fresh placeholders. A rule raises
`Unsupported` when it cannot lower its arguments: the node then runs as its ATen call.

Example:
    >>> from tensortune.graph.ir import Graph, Node, ValueInfo
    >>> ctx = LoweringContext(Graph())
    >>> x = ctx.input("x", ValueInfo((2, 3), "float32"))
    >>> y = ctx.elementwise(lambda a: a * 2.0, [x], "float32", op="mul")
    >>> ctx.graph.nodes[y.node].role, y.info
    ('elementwise', ValueInfo(shape=(2, 3), dtype='float32'))
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ... import te
from ...te.expr import Expr, Reduce
from ...te.tensor import Tensor
from ..ir import FLOAT_DTYPES, Graph, Node, ValueInfo, te_dtype


class Unsupported(Exception):
    """A rule cannot lower this call; the message says why (the call falls back to ATen)."""


@dataclass(frozen=True)
class Val:
    """A tensor operand of a rule: the node that makes it and its static type.

    `dims`, when set, says which output dimension each of its dimensions is read along
    (a row statistic of shape [B, S] read by an output [B, S, H] has dims (0, 1)),
    instead of torch's right-aligned broadcasting."""

    node: int
    info: ValueInfo
    dims: tuple[int, ...] | None = None

    def aligned(self, dims: Sequence[int]) -> "Val":
        return Val(self.node, self.info, tuple(dims))

    @property
    def shape(self) -> tuple[int, ...]:
        return self.info.shape

    @property
    def dtype(self) -> str:
        return self.info.dtype

    @property
    def ndim(self) -> int:
        return len(self.info.shape)


Operand = Any  # a Val or a Python number


def te_shape(shape: Sequence[int]) -> tuple[int, ...]:
    """te tensors have at least one dimension: a 0-d value is held as shape (1,)."""
    return tuple(shape) if shape else (1,)


def axis_names(n: int, prefix: str = "i") -> list[str]:
    return [f"{prefix}{d}" for d in range(n)] or [f"{prefix}0"]


def read(t: Tensor, shape: Sequence[int], idx: Sequence[Expr], out_shape: Sequence[int],
         dims: Sequence[int] | None = None) -> Expr:
    """`t` (of logical `shape`) read at the output index `idx`, broadcast as torch does
    (or along the output dimensions `dims`)."""
    if not shape:
        return t[0]
    if dims is not None:
        return t[tuple(idx[d] for d in dims)]
    offset = len(out_shape) - len(shape)
    index = []
    for d, extent in enumerate(shape):
        od = d + offset
        index.append(0 if extent == 1 and out_shape[od] != 1 else idx[od])
    return t[tuple(index)]


def logical(expr: Expr, dtype: str) -> Expr:
    """A stored value as the rule sees it: booleans (stored as int32) become conditions."""
    return te.not_equal(expr, te.const(0, expr.dtype)) if dtype == "bool" else expr


def to_dtype(expr: Expr, dtype: str) -> Expr:
    """Convert a logical value (a condition, an int32, a float) to te `dtype` (a condition for 'bool')."""
    if dtype == "bool":
        return expr if expr.dtype == "bool" else te.not_equal(expr, te.const(0, expr.dtype))
    target = te_dtype(dtype)
    if expr.dtype == "bool":
        return te.select(expr, te.const(1, target), te.const(0, target))
    return te.cast(expr, target)


def store(expr: Expr, dtype: str) -> Expr:
    """A logical value as stored for a value of torch dtype `dtype`."""
    if dtype == "bool":
        cond = to_dtype(expr, "bool")
        return te.select(cond, te.const(1, "int32"), te.const(0, "int32"))
    return to_dtype(expr, dtype)


def compute_dtype(dtypes: Sequence[str]) -> str:
    """The dtype elementwise math runs in: float32 for half and single floats, float64 if
    any operand is, int32 for integers, bool for booleans alone."""
    floats = [d for d in dtypes if d in FLOAT_DTYPES]
    if floats:
        return "float64" if "float64" in floats else "float32"
    if dtypes and all(d == "bool" for d in dtypes):
        return "bool"
    return "int32"


@dataclass(frozen=True)
class ElementwiseSpec:
    """An elementwise stage as `LoweringContext.elementwise` was asked for it."""

    fn: Callable[..., Expr]
    operands: tuple[Any, ...]
    dtype: str
    compute: tuple[str, ...]


class LoweringContext:
    """Adds nodes to a graph on behalf of lowering rules."""

    def __init__(self, graph: Graph, origin: str = "") -> None:
        self.graph = graph
        self.origin = origin
        self.op = ""

    # -- nodes -----------------------------------------------------------------------------------
    def input(self, name: str, info: ValueInfo, position: int | None = None) -> Val:
        return Val(self.graph.add(Node(-1, "input", name, (), info, origin=name), position), info)

    def constant(self, name: str, value: Any, info: ValueInfo) -> Val:
        return Val(self.graph.add(Node(-1, "constant", name, (), info, origin=name, value=value)), info)

    def stage(self, build: Callable[..., Tensor], inputs: Sequence[Val], info: ValueInfo, *, op: str = "",
              alias: bool = False, spec: Any = None) -> Val:
        """Add a te stage; `build(name, *te_inputs)` must make a tensor of `info`'s type."""
        node = Node(-1, "te", op or self.op, tuple(v.node for v in inputs), info, build=build,
                    origin=self.origin, alias=alias, spec=spec)
        probe = build("probe", *[te.placeholder(te_shape(v.shape), te_dtype(v.dtype), f"in{k}")
                                 for k, v in enumerate(inputs)])
        want = (te_shape(info.shape), te_dtype(info.dtype))
        if (probe.shape, probe.dtype) != want:
            raise AssertionError(f"lowering of {node.op} made {probe.dtype}{list(probe.shape)}, expected "
                                 f"{want[1]}{list(want[0])}")
        node.role, node.flops = classify(probe)
        from ...te.expr import Call
        from ...te.visit import walk
        node.expensive = any(isinstance(x, Call) for x in walk(probe.op.body))
        return Val(self.graph.add(node), info)

    # -- helpers ---------------------------------------------------------------------------------
    def elementwise(self, fn: Callable[..., Expr], operands: Sequence[Operand], dtype: str, *,
                    shape: Sequence[int] | None = None, op: str = "",
                    compute: str | Sequence[str] | None = None) -> Val:
        """`fn` applied to every element of the broadcast operands, stored as `dtype`.

        Operands reach `fn` as te expressions in the `compute` dtype (one for all, or one
        per operand; default: the operands' common type, see `compute_dtype`), numbers as
        constants of it, booleans as conditions."""
        tensors = [o for o in operands if isinstance(o, Val)]
        out_shape = tuple(shape) if shape is not None else \
            broadcast_shapes([t.shape for t in tensors if t.dims is None])
        if isinstance(compute, (list, tuple)):
            cdts = list(compute)
        else:
            cdts = [compute or compute_dtype([t.dtype for t in tensors] or [dtype])] * len(operands)
        positions = [k for k, o in enumerate(operands) if isinstance(o, Val)]

        def build(name: str, *ts: Tensor) -> Tensor:
            def body(*idx: Expr) -> Expr:
                index = idx if out_shape else ()
                vals: list[Any] = list(operands)
                for t, k in zip(ts, positions):
                    v = operands[k]
                    vals[k] = to_dtype(logical(read(t, v.shape, index, out_shape, v.dims), v.dtype), cdts[k])
                for k, o in enumerate(vals):
                    if not isinstance(o, Expr):
                        vals[k] = scalar(o, cdts[k])
                return store(fn(*vals), dtype)
            return te.compute(te_shape(out_shape), body, name=name, axis_names=axis_names(len(out_shape)))

        spec = ElementwiseSpec(fn, tuple(operands), dtype, tuple(cdts))
        return self.stage(build, tensors, ValueInfo(out_shape, dtype), op=op, spec=spec)

    def reduce(self, combiner: str, x: Val, dims: Sequence[int], *, dtype: str | None = None,
               prologue: Callable[..., Expr] | None = None, extra: Sequence[Val] = (), op: str = "",
               acc: str | None = None, source: str | None = None) -> Val:
        """`combiner` (sum, max, min) of `prologue(x, *extra)` (default x) over `dims`.

        Values are read as `source` (default: the accumulation type), reduced in `acc`
        (default: float32 for half floats, int32 for integers and booleans) and stored
        as `dtype` (default: `acc`). `extra` values are read at the input's index."""
        dims = sorted({d % max(1, x.ndim) for d in dims})
        kept = [d for d in range(x.ndim) if d not in dims]
        out_shape = tuple(x.shape[d] for d in kept)
        acc = acc or (compute_dtype([x.dtype]) if x.dtype != "bool" else "int32")
        src_dtype = source or acc
        out_dtype = dtype or acc

        def build(name: str, xt: Tensor, *others: Tensor) -> Tensor:
            raxes = [te.reduce_axis(x.shape[d], f"r{d}") for d in dims]

            def body(*idx: Expr) -> Expr:
                it, rest = iter(raxes), iter(idx)
                full: list[Expr] = [next(it) if d in dims else next(rest) for d in range(x.ndim)]
                src = to_dtype(logical(xt[tuple(full)] if x.ndim else xt[0], x.dtype), src_dtype)
                if prologue is not None:
                    kept_idx = [full[d] for d in range(x.ndim)]
                    ex = [to_dtype(logical(read(t, v.shape, kept_idx, x.shape, v.dims), v.dtype), src_dtype)
                          for t, v in zip(others, extra)]
                    src = prologue(src, *ex)
                red = {"sum": te.sum, "max": te.max, "min": te.min}[combiner](src, axis=raxes)
                return red
            out = te.compute(te_shape(out_shape), body, name=name, axis_names=axis_names(len(out_shape)))
            return out

        if out_dtype != acc:
            red = self.stage(build, [x, *extra], ValueInfo(out_shape, acc), op=op)
            return self.cast(red, out_dtype)
        return self.stage(build, [x, *extra], ValueInfo(out_shape, out_dtype), op=op)

    def cast(self, x: Val, dtype: str) -> Val:
        if x.dtype == dtype:
            return x
        return self.elementwise(lambda a: a, [x], dtype, op=f"{self.op or 'cast'}[to {dtype}]",
                                compute=compute_dtype([x.dtype, dtype]) if dtype != "bool" else None)


def scalar(value: Any, dtype: str) -> Expr:
    """A Python number as a te constant of the compute dtype."""
    if isinstance(value, bool) or dtype == "bool":
        if dtype == "bool":
            return te.const(bool(value))
        return te.const(int(value), te_dtype(dtype))
    if isinstance(value, float) and dtype not in FLOAT_DTYPES:
        if not value.is_integer():
            raise Unsupported(f"the float {value!r} in integer arithmetic")
        value = int(value)
    if isinstance(value, float) and math.isnan(value):
        raise Unsupported("a NaN constant")
    return te.const(value, te_dtype(dtype))


def broadcast_shapes(shapes: Sequence[Sequence[int]]) -> tuple[int, ...]:
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for s in shapes:
        for d, e in enumerate(s):
            od = ndim - len(s) + d
            if e != 1:
                if out[od] not in (1, e):
                    raise Unsupported(f"shapes {[list(x) for x in shapes]} do not broadcast")
                out[od] = e
    return tuple(out)


def classify(t: Tensor) -> tuple[str, float]:
    """The role of a stage (elementwise, reduction, contraction) and its floating-point work."""
    op = t.op
    assert op is not None
    body = op.body
    points = math.prod(t.shape)
    if not isinstance(body, Reduce):
        return "elementwise", float(points)
    depth = math.prod(a.extent for a in body.axes)
    src = body.source
    from ...te.expr import Binary, Cast
    while isinstance(src, Cast):
        src = src.value
    if body.combiner == "sum" and isinstance(src, Binary) and src.op == "mul" and _reuse(src, op.axes):
        return "contraction", 2.0 * points * depth
    return "reduction", float(points * depth)


def _reuse(product: Any, axes: Sequence[Any]) -> bool:
    """A product whose two factors each miss some output axis (a matmul, a convolution)."""
    from ...te.visit import itervars
    a, b = itervars(product.a), itervars(product.b)
    spatial = set(axes)
    return bool(spatial - a) and bool(spatial - b) and bool(spatial & a) and bool(spatial & b)
