"""Reductions: sums and means, max and min, variance, any/all, softmax and log-softmax.

Half floats accumulate in float32. A softmax is three stages over the reduced dimension
(row max, sum of exponentials, the normalised output), the form the GPU rows pattern and
the CPU sketches fuse into one kernel.

Example:
    >>> import torch
    >>> from tensortune.graph.lowering import rule_for
    >>> rule_for(torch.ops.aten._softmax.default).__name__
    'softmax'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from ... import te
from . import register
from .context import LoweringContext, Unsupported, Val

aten = torch.ops.aten


def _dims(x: Val, dim: Any) -> list[int]:
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(x.ndim))
    dims = [dim] if isinstance(dim, int) else list(dim)
    return sorted({d % max(1, x.ndim) for d in dims})


def _count(x: Val, dims: Sequence[int]) -> int:
    return math.prod(x.shape[d] for d in dims)


@register(aten.sum.dim_IntList, aten.sum.default)
def sum_(ctx: LoweringContext, x: Val, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Val:
    if x.ndim == 0:
        return ctx.cast(x, ctx.out_dtype)
    dims = _dims(x, dim)
    out = ctx.reduce("sum", x, dims, dtype=ctx.out_dtype)
    return keep(ctx, out, x, dims) if keepdim else out


@register(aten.mean.dim, aten.mean.default)
def mean(ctx: LoweringContext, x: Val, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Val:
    dims = _dims(x, dim)
    inv = 1.0 / _count(x, dims)
    total = ctx.cast(ctx.reduce("sum", x, dims, prologue=lambda v: v * inv), ctx.out_dtype)
    return keep(ctx, total, x, dims) if keepdim else total


def _minmax(combiner: str) -> Any:
    def rule(ctx: LoweringContext, x: Val, dim: Any = None, keepdim: bool = False) -> Val:
        if x.dtype == "bool":
            raise Unsupported(f"{combiner} of booleans")
        dims = _dims(x, dim)
        out = ctx.reduce(combiner, x, dims, dtype=ctx.out_dtype)
        return keep(ctx, out, x, dims) if keepdim else out
    rule.__name__ = combiner
    return rule


register(aten.amax.default, aten.max.default)(_minmax("max"))
register(aten.amin.default, aten.min.default)(_minmax("min"))


def _truth(ctx: LoweringContext, combiner: str, x: Val, dim: Any, keepdim: bool) -> Val:
    from .context import compute_dtype
    source = "bool" if x.dtype == "bool" else compute_dtype([x.dtype])
    dims = _dims(x, dim)
    total = ctx.reduce(combiner, x, dims, acc="int32", source=source,
                       prologue=lambda v: te.select(v if v.dtype == "bool" else te.not_equal(v, te.const(0, v.dtype)),
                                                    te.const(1, "int32"), te.const(0, "int32")))
    out = ctx.cast(total, "bool")
    return keep(ctx, out, x, dims) if keepdim else out


@register(aten.any.dim, aten.any.dims, aten.any.default)
def any_(ctx: LoweringContext, x: Val, dim: Any = None, keepdim: bool = False) -> Val:
    return _truth(ctx, "max", x, dim, keepdim)


@register(aten.all.dim, aten.all.dims, aten.all.default)
def all_(ctx: LoweringContext, x: Val, dim: Any = None, keepdim: bool = False) -> Val:
    return _truth(ctx, "min", x, dim, keepdim)


def variance(ctx: LoweringContext, x: Val, dims: list[int], correction: float, keepdim: bool) -> tuple[Val, Val]:
    """(variance, mean) over `dims` in the accumulation type, in two passes; without
    `keepdim` they are row statistics (read them with `rows(...)`)."""
    n = _count(x, dims)
    inv = 1.0 / n
    if n - correction <= 0:
        raise Unsupported("variance with no degrees of freedom")
    scale = 1.0 / (n - correction)
    m = ctx.reduce("sum", x, dims, prologue=lambda v: v * inv)
    var = ctx.reduce("sum", x, dims, extra=[rows(m, x, dims)], prologue=lambda v, mu: (v - mu) * (v - mu) * scale)
    if keepdim:
        return keep(ctx, var, x, dims), keep(ctx, m, x, dims)
    return var, m


def rows(stat: Val, x: Val, dims: Sequence[int]) -> Val:
    """A statistic reduced over `dims` of `x`, read along x's other dimensions."""
    return stat.aligned([d for d in range(x.ndim) if d not in set(dims)])


def keep(ctx: LoweringContext, stat: Val, x: Val, dims: Sequence[int]) -> Val:
    """The statistic with the reduced dimensions kept as ones (torch's keepdim=True)."""
    from .shapes import view
    return view(ctx, stat, [1 if d in set(dims) else x.shape[d] for d in range(x.ndim)])


def _correction(correction: Any, unbiased: Any = None) -> float:
    if correction is not None:
        return float(correction)
    return 1.0 if unbiased is None or unbiased else 0.0


@register(aten.var.correction, aten.var.dim, aten.var.default)
def var(ctx: LoweringContext, x: Val, dim: Any = None, *args: Any, correction: Any = None,
        keepdim: bool = False, unbiased: Any = None) -> Val:
    if args:
        if isinstance(args[0], bool):
            unbiased = args[0]
            keepdim = args[1] if len(args) > 1 else keepdim
        else:
            keepdim = args[0]
    v, _ = variance(ctx, x, _dims(x, dim), _correction(correction, unbiased), keepdim)
    return ctx.cast(v, ctx.out_dtype)


@register(aten.var_mean.correction, aten.var_mean.dim)
def var_mean(ctx: LoweringContext, x: Val, dim: Any = None, *args: Any, correction: Any = None,
             keepdim: bool = False, unbiased: Any = None) -> tuple[Val, Val]:
    if args:
        keepdim = args[-1] if isinstance(args[-1], bool) and len(args) > 1 else keepdim
    v, m = variance(ctx, x, _dims(x, dim), _correction(correction, unbiased), keepdim)
    return ctx.cast(v, x.dtype), ctx.cast(m, x.dtype)


def softmax_stages(ctx: LoweringContext, x: Val, dim: int, log: bool = False) -> Val:
    """max, sum of exp(x - max), then the output (in the accumulation type)."""
    dim %= max(1, x.ndim)
    mx = ctx.reduce("max", x, [dim])
    total = ctx.reduce("sum", x, [dim], extra=[rows(mx, x, [dim])], prologue=lambda v, m: te.exp(v - m))
    acc = total.dtype
    stats = [rows(mx, x, [dim]), rows(total, x, [dim])]
    if log:
        return ctx.elementwise(lambda v, m, s: v - m - te.log(s), [x, *stats], acc)
    return ctx.elementwise(lambda v, m, s: te.exp(v - m) / s, [x, *stats], acc)


@register(aten._softmax.default)
def softmax(ctx: LoweringContext, x: Val, dim: int, half_to_float: bool = False) -> Val:
    return ctx.cast(softmax_stages(ctx, x, dim), ctx.out_dtype)


@register(aten._log_softmax.default)
def log_softmax(ctx: LoweringContext, x: Val, dim: int, half_to_float: bool = False) -> Val:
    return ctx.cast(softmax_stages(ctx, x, dim, log=True), ctx.out_dtype)


@register(aten._safe_softmax.default)
def safe_softmax(ctx: LoweringContext, x: Val, dim: int, dtype: Any = None) -> Val:
    """Softmax whose fully masked rows (all -inf) give zeros instead of NaN."""
    dim %= max(1, x.ndim)
    mx = ctx.reduce("max", x, [dim])
    m = rows(mx, x, [dim])
    total = ctx.reduce("sum", x, [dim], extra=[m],
                       prologue=lambda v, mm: te.select(te.equal(mm, float("-inf")), te.const(0, v.dtype),
                                                        te.exp(v - mm)))
    out = ctx.elementwise(lambda v, mm, s: te.select(te.equal(mm, float("-inf")), te.const(0, v.dtype),
                                                     te.exp(v - mm) / s), [x, m, rows(total, x, [dim])], total.dtype)
    return ctx.cast(out, ctx.out_dtype)


@register(aten.logsumexp.default)
def logsumexp(ctx: LoweringContext, x: Val, dim: Any, keepdim: bool = False) -> Val:
    dims = _dims(x, dim)
    mx = ctx.reduce("max", x, dims)
    total = ctx.reduce("sum", x, dims, extra=[rows(mx, x, dims)], prologue=lambda v, m: te.exp(v - m))
    out = ctx.elementwise(lambda s, mm: te.log(s) + mm, [total, mx], ctx.out_dtype)
    return keep(ctx, out, x, dims) if keepdim else out


@register(aten.linalg_vector_norm.default)
def vector_norm(ctx: LoweringContext, x: Val, ord: Any = 2, dim: Any = None, keepdim: bool = False,
                dtype: Any = None) -> Val:
    if ord != 2:
        raise Unsupported(f"vector norm of order {ord!r}")
    dims = _dims(x, dim)
    total = ctx.reduce("sum", x, dims, prologue=lambda v: v * v)
    out = ctx.elementwise(lambda s: te.sqrt(s), [total], ctx.out_dtype)
    return keep(ctx, out, x, dims) if keepdim else out
