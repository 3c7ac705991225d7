"""Everything else models use: embeddings, constants and ranges, pooling.

Example:
    >>> import torch
    >>> from tensortune.graph.lowering import rule_for
    >>> rule_for(torch.ops.aten.embedding.default).__name__
    'embedding'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ... import te
from ...te.expr import Expr
from ..ir import ValueInfo
from . import register
from .context import LoweringContext, Unsupported, Val, axis_names, scalar, store, te_shape

aten = torch.ops.aten


@register(aten.embedding.default)
def embedding(ctx: LoweringContext, weight: Val, indices: Val, padding_idx: int = -1, scale_grad: bool = False,
              sparse: bool = False) -> Val:
    if weight.ndim != 2:
        raise Unsupported("an embedding table that is not 2-d")
    out_shape = indices.shape + (weight.shape[1],)
    nd = indices.ndim

    def build(name: str, wt: te.Tensor, it: te.Tensor) -> te.Tensor:
        def body(*idx: Expr) -> Expr:
            row = it[tuple(idx[:nd])] if nd else it[0]
            return wt[clamp_index(row, weight.shape[0]), idx[nd]]
        return te.compute(out_shape, body, name=name, axis_names=axis_names(len(out_shape)))

    return ctx.stage(build, [weight, indices], ValueInfo(out_shape, weight.dtype))


def clamp_index(i: Expr, extent: int, wrap: bool = False) -> Expr:
    """An index read from data, kept inside `[0, extent)` (torch raises on one outside; a
    kernel must never read past its tensor); `wrap` counts negative ones from the end."""
    if wrap:
        i = te.select(i < 0, i + extent, i)
    return te.minimum(te.maximum(i, 0), extent - 1)


@register(aten.index.Tensor)
def index(ctx: LoweringContext, x: Val, indices: Sequence[Val | None]) -> Val:
    """Advanced indexing by integer tensors on leading dimensions (`x[i]`, `x[i, j]`)."""
    indices = list(indices)
    k = 0
    while k < len(indices) and indices[k] is not None:
        k += 1
    if k == 0 or any(i is not None for i in indices[k:]):
        raise Unsupported("indexing that is not by tensors on the leading dimensions")
    tensors = [i for i in indices if i is not None]
    if any(t.dtype == "bool" for t in tensors):
        raise Unsupported("indexing by a boolean mask (its shape depends on the data)")
    from .context import broadcast_shapes, read
    bshape = broadcast_shapes([t.shape for t in tensors])
    out_shape = bshape + x.shape[k:]

    def build(name: str, xt: te.Tensor, *its: te.Tensor) -> te.Tensor:
        def body(*idx: Expr) -> Expr:
            head = [clamp_index(read(it, t.shape, idx[:len(bshape)], bshape), x.shape[d], wrap=True)
                    for d, (it, t) in enumerate(zip(its, tensors))]
            return xt[tuple(head + list(idx[len(bshape):]))]
        return te.compute(te_shape(out_shape), body, name=name, axis_names=axis_names(len(out_shape)))

    return ctx.stage(build, [x, *tensors], ValueInfo(out_shape, x.dtype))


def _constant_stage(ctx: LoweringContext, shape: Sequence[int], dtype: str, fn: Any) -> Val:
    out_shape = tuple(int(s) for s in shape)
    if any(s <= 0 for s in out_shape):
        raise Unsupported("an empty tensor")

    def build(name: str) -> te.Tensor:
        return te.compute(te_shape(out_shape), lambda *idx: store(fn(*idx), dtype), name=name,
                          axis_names=axis_names(len(out_shape)))

    return ctx.stage(build, [], ValueInfo(out_shape, dtype))


@register(aten.full.default, aten.full_like.default, aten.new_full.default, aten.scalar_tensor.default,
          aten.zeros.default, aten.ones.default, aten.zeros_like.default, aten.ones_like.default,
          aten.new_zeros.default, aten.new_ones.default, aten.empty.memory_format, aten.empty_like.default,
          aten.new_empty.default)
def full(ctx: LoweringContext, *args: Any, **kwargs: Any) -> Val:
    name = ctx.target_op_name
    value: Any = 0
    if "full" in name:
        value = args[-1]
    elif "scalar_tensor" in name:
        value = args[0]
    elif "ones" in name:
        value = 1
    dtype = ctx.out_dtype
    cdt = "bool" if dtype == "bool" else dtype
    if isinstance(value, Val):
        raise Unsupported("a fill value that is a tensor")
    return _constant_stage(ctx, ctx.out_shape, dtype, lambda *idx: scalar(value, cdt))


@register(aten.fill.Scalar)
def fill(ctx: LoweringContext, x: Val, value: Any) -> Val:
    dtype = x.dtype
    return _constant_stage(ctx, x.shape, dtype, lambda *idx: scalar(value, "bool" if dtype == "bool" else dtype))


@register(aten.arange.start_step, aten.arange.default, aten.arange.start)
def arange(ctx: LoweringContext, *args: Any, **kwargs: Any) -> Val:
    nums = [a for a in args if isinstance(a, (int, float))]
    start, step = (0, 1)
    if len(nums) >= 2:
        start = nums[0]
    if len(nums) >= 3:
        step = nums[2]
    dtype = ctx.out_dtype
    cdt = dtype if dtype in ("float16", "bfloat16", "float32", "float64") else "int32"

    def fn(i: Expr) -> Expr:
        v = i if cdt == "int32" else te.cast(i, "float64" if cdt == "float64" else "float32")
        return v * step + start if (step != 1 or start != 0) else v
    return _constant_stage(ctx, ctx.out_shape, dtype, fn)


def _pool_out(size: int, k: int, s: int, p: int, d: int, ceil: bool) -> int:
    span = size + 2 * p - d * (k - 1) - 1
    out = (span + (s - 1 if ceil else 0)) // s + 1
    if ceil and (out - 1) * s >= size + p:
        out -= 1
    return out


def _pair(v: Sequence[int] | int, default: Sequence[int] | None = None) -> list[int]:
    if v is None or (isinstance(v, (list, tuple)) and not v):
        return list(default or [])
    if isinstance(v, int):
        return [v, v]
    return list(v) * 2 if len(v) == 1 else list(v)


@register(aten.max_pool2d_with_indices.default)
def max_pool2d(ctx: LoweringContext, x: Val, kernel: Sequence[int], stride: Sequence[int] = (),
               padding: Sequence[int] = (0,), dilation: Sequence[int] = (1,), ceil_mode: bool = False) -> tuple[Any, ...]:
    k = _pair(kernel)
    s, p, d = _pair(stride, k), _pair(padding), _pair(dilation)
    n, c, h, w = x.shape[-4:] if x.ndim == 4 else (1,) + x.shape
    if x.ndim != 4:
        raise Unsupported("max pooling of a 3-d input")
    oh, ow = _pool_out(h, k[0], s[0], p[0], d[0], ceil_mode), _pool_out(w, k[1], s[1], p[1], d[1], ceil_mode)
    acc = "float32" if x.dtype in ("float16", "bfloat16") else x.dtype

    def build(name: str, xt: te.Tensor) -> te.Tensor:
        ry, rx = te.reduce_axis(k[0], "ry"), te.reduce_axis(k[1], "rx")

        def body(b: Expr, ch: Expr, y: Expr, z: Expr) -> Expr:
            iy, ix = y * s[0] + ry * d[0] - p[0], z * s[1] + rx * d[1] - p[1]
            inside = te.all(iy >= 0, iy < h, ix >= 0, ix < w)
            v = te.select(inside, te.cast(xt[b, ch, iy, ix], acc), te.const(float("-inf"), acc))
            return te.max(v, axis=[ry, rx])
        return te.compute((n, c, oh, ow), body, name=name, axis_names=["b", "c", "y", "x"])

    pooled = ctx.stage(build, [x], ValueInfo((n, c, oh, ow), acc))
    return ctx.cast(pooled, x.dtype), None


@register(aten.avg_pool2d.default)
def avg_pool2d(ctx: LoweringContext, x: Val, kernel: Sequence[int], stride: Sequence[int] = (),
               padding: Sequence[int] = (0,), ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Val:
    k = _pair(kernel)
    s, p = _pair(stride, k), _pair(padding)
    if x.ndim != 4:
        raise Unsupported("average pooling of a 3-d input")
    if ceil_mode or (not count_include_pad and (p[0] or p[1])):
        raise Unsupported("average pooling with ceil_mode or padding excluded from the count")
    n, c, h, w = x.shape
    oh, ow = _pool_out(h, k[0], s[0], p[0], 1, False), _pool_out(w, k[1], s[1], p[1], 1, False)
    inv = 1.0 / (divisor_override or k[0] * k[1])
    acc = "float32" if x.dtype in ("float16", "bfloat16") else x.dtype

    def build(name: str, xt: te.Tensor) -> te.Tensor:
        ry, rx = te.reduce_axis(k[0], "ry"), te.reduce_axis(k[1], "rx")

        def body(b: Expr, ch: Expr, y: Expr, z: Expr) -> Expr:
            iy, ix = y * s[0] + ry - p[0], z * s[1] + rx - p[1]
            v = te.cast(xt[b, ch, iy, ix], acc) * inv
            if p[0] or p[1]:
                v = te.select(te.all(iy >= 0, iy < h, ix >= 0, ix < w), v, te.const(0, acc))
            return te.sum(v, axis=[ry, rx])
        return te.compute((n, c, oh, ow), body, name=name, axis_names=["b", "c", "y", "x"])

    pooled = ctx.stage(build, [x], ValueInfo((n, c, oh, ow), acc))
    return ctx.cast(pooled, x.dtype)


@register(aten._adaptive_avg_pool2d.default)
def adaptive_avg_pool2d(ctx: LoweringContext, x: Val, output_size: Sequence[int]) -> Val:
    oh, ow = _pair(output_size)
    h, w = x.shape[-2:]
    if h % oh or w % ow:
        raise Unsupported("adaptive pooling with uneven windows")
    return avg_pool2d(ctx, x, [h // oh, w // ow], [h // oh, w // ow])
