"""Tensors: placeholders (inputs) and computed tensors, checked when they are defined.

Example:
    >>> from tensortune import te
    >>> A = te.placeholder((64, 32), name="A")
    >>> B = te.placeholder((32, 48), name="B")
    >>> k = te.reduce_axis(32, "k")
    >>> C = te.compute((64, 48), lambda m, n: te.sum(A[m, k] * B[k, n], axis=k), name="C")
    >>> C.shape, C.dtype, [t.name for t in C.op.inputs]
    ((64, 48), 'float32', ['A', 'B'])
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .affine import interval
from .dtype import INDEX, TEError, check_dtype, is_int
from .expr import Const, Expr, IterVar, Reduce, Select, TensorRead, as_expr
from .split import has_inner_reduction, lift_reductions
from .visit import children, itervars, reads


@dataclass(frozen=True, eq=False)
class ComputeOp:
    """How a computed tensor is defined: spatial axes, reduce axes and the body."""

    axes: tuple[IterVar, ...]
    reduce_axes: tuple[IterVar, ...]
    body: Expr
    tag: str = ""

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        seen: dict[int, Tensor] = {}
        for r in reads(self.body):
            seen.setdefault(id(r.tensor), r.tensor)
        return tuple(seen.values())


@dataclass(frozen=True, eq=False)
class Tensor:
    """A named n-dimensional array; `op` is None for placeholders."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    op: ComputeOp | None = None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_placeholder(self) -> bool:
        return self.op is None

    @property
    def axis(self) -> tuple[IterVar, ...]:
        return self.op.axes if self.op else ()

    def __getitem__(self, index: Any) -> TensorRead:
        idx = index if isinstance(index, tuple) else (index,)
        if len(idx) != self.ndim:
            raise TEError(f"{self.name} has {self.ndim} dimensions {self.shape} but is indexed with {len(idx)}")
        out = []
        for d, x in enumerate(idx):
            if isinstance(x, slice):
                raise TEError(f"{self.name}[...]: slices are not supported; index with axes")
            e = as_expr(x, INDEX)
            if not is_int(e.dtype):
                raise TEError(f"index {d} of {self.name} is {e} of type {e.dtype}; indices must be int32")
            if isinstance(e, Const) and not 0 <= int(e.value) < self.shape[d]:
                raise TEError(f"constant index {e.value} is out of range for dimension {d} of "
                              f"{self.name} (extent {self.shape[d]})")
            out.append(e)
        return TensorRead(self, tuple(out))

    def __repr__(self) -> str:
        kind = "placeholder" if self.op is None else "compute"
        return f"Tensor({self.name!r}, {self.shape}, {self.dtype!r}, {kind})"

    def __bool__(self) -> bool:
        return True


def _shape(shape: Any, what: str) -> tuple[int, ...]:
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    if not shape:
        raise TEError(f"{what}: a tensor needs at least one dimension; use shape (1,) for a scalar")
    for s in shape:
        if not isinstance(s, int) or isinstance(s, bool) or s <= 0:
            raise TEError(f"{what}: shape {shape} must be positive integers")
    return shape


def _name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise TEError(f"tensor names must be non-empty strings, got {name!r}")
    return name


def placeholder(shape: Sequence[int] | int, dtype: str = "float32", name: str = "placeholder") -> Tensor:
    """An input tensor."""
    return Tensor(_name(name), _shape(shape, f"placeholder {name!r}"), check_dtype(dtype))


def compute(shape: Sequence[int] | int, fcompute: Callable[..., Any], name: str = "compute",
            tag: str = "", axis_names: Sequence[str] | None = None) -> Tensor:
    """The tensor whose element at each index is `fcompute(*index)`; the lambda's
    parameter names (or `axis_names`) become the axis names."""
    name = _name(name)
    shape = _shape(shape, f"compute {name!r}")
    names = list(axis_names) if axis_names is not None else _axis_names(fcompute, len(shape), name)
    if len(names) != len(shape) or not all(isinstance(n, str) and n.isidentifier() for n in names):
        raise TEError(f"compute {name!r}: axis names {names} must be {len(shape)} identifiers")
    axes = tuple(IterVar(n, e, "spatial") for n, e in zip(names, shape))
    body = as_expr(fcompute(*axes))
    if body.dtype == "bool":
        raise TEError(f"compute {name!r} yields a condition; select numbers with te.select")
    if has_inner_reduction(body):  # each becomes a stage of its own (te/split.py)
        body = lift_reductions(name, axes, body, compute)
    reduce_axes = body.axes if isinstance(body, Reduce) else ()
    _check_body(name, axes, reduce_axes, body)
    return Tensor(name, shape, body.dtype, ComputeOp(axes, reduce_axes, body, tag))


def _axis_names(fcompute: Callable[..., Any], ndim: int, name: str) -> list[str]:
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        params = []
    if any(p.kind is p.VAR_POSITIONAL for p in params) or not params:
        return [f"i{d}" for d in range(ndim)]
    if len(params) != ndim:
        raise TEError(f"compute {name!r} has {ndim} dimensions but its function takes {len(params)} "
                      f"arguments ({', '.join(p.name for p in params)})")
    return [p.name for p in params]


def _check_body(name: str, axes: tuple[IterVar, ...], reduce_axes: tuple[IterVar, ...], body: Expr) -> None:
    names = [a.name for a in axes + reduce_axes]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise TEError(f"compute {name!r}: axis name(s) {sorted(dup)} used twice")
    inner = body.source if isinstance(body, Reduce) else body
    known = set(axes) | set(reduce_axes)
    for v in itervars(body):
        if v not in known:
            what = "reduce axis" if v.kind == "reduce" else "axis"
            raise TEError(f"compute {name!r} uses {what} {v.name!r} (extent {v.extent}) that is not one of its "
                          f"axes ({', '.join(names) or 'none'})"
                          + ("; reduce axes must appear in te.sum/max/min(..., axis=...)" if v.kind == "reduce"
                             else ""))
    _check_reads(name, inner, guarded=False)


def _check_reads(name: str, e: Expr, guarded: bool) -> None:
    """Indices of reads outside any select branch must stay within the tensor's shape."""
    if isinstance(e, Select):
        _check_reads(name, e.cond, guarded)
        _check_reads(name, e.then, True)
        _check_reads(name, e.other, True)
        return
    if isinstance(e, TensorRead):
        for d, ix in enumerate(e.indices):
            r = interval(ix)
            if r is None:
                continue
            extent = e.tensor.shape[d]
            outside = r[1] < 0 or r[0] >= extent
            if outside or (not guarded and (r[0] < 0 or r[1] >= extent)):
                raise TEError(f"compute {name!r}: index {ix} of {e.tensor.name} (dimension {d}) ranges over "
                              f"[{r[0]}, {r[1]}] but the extent is {extent}; guard it with te.select or "
                              "te.workloads.pad")
    for c in children(e):
        _check_reads(name, c, guarded)


def graph(outputs: Tensor | Iterable[Tensor]) -> list[Tensor]:
    """Every tensor the outputs depend on, producers before consumers."""
    outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    order: list[Tensor] = []
    state: dict[int, int] = {}

    def visit(t: Tensor) -> None:
        s = state.get(id(t))
        if s == 2:
            return
        if s == 1:
            raise TEError(f"tensor {t.name!r} depends on itself")
        state[id(t)] = 1
        for p in (t.op.inputs if t.op else ()):
            visit(p)
        state[id(t)] = 2
        order.append(t)

    for t in outs:
        if not isinstance(t, Tensor):
            raise TEError(f"expected tensors, got {t!r}")
        visit(t)
    return order


def placeholders(outputs: Tensor | Iterable[Tensor]) -> list[Tensor]:
    """The input tensors of a computation, in order of first use."""
    return [t for t in graph(outputs) if t.is_placeholder]

