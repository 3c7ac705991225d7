"""Contractions: matrix products (mm, addmm, bmm, baddbmm) and convolutions.

A product is one contraction stage `sum_k A[.., k] * B[k, ..]` in the operands' dtype
(kernels accumulate in float32); bias, scaling and activations are elementwise stages
that the partition fuses into its epilogue. A convolution (any stride, padding,
dilation and groups, depthwise included) is a padding stage read by an implicit-GEMM
contraction, plus its bias.

Example:
    >>> import torch
    >>> from tensortune.graph.lowering import rule_for
    >>> rule_for(torch.ops.aten.convolution.default).__name__
    'convolution'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ... import te
from ...te.expr import Expr
from ..ir import ValueInfo
from . import register
from .context import LoweringContext, Unsupported, Val

aten = torch.ops.aten


def matmul_stage(ctx: LoweringContext, a: Val, b: Val) -> Val:
    """`a @ b` for 2-D operands, or batched over one leading dimension."""
    if a.dtype != b.dtype:
        raise Unsupported(f"a product of {a.dtype} and {b.dtype}")
    if a.dtype not in ("float16", "bfloat16", "float32", "float64"):
        raise Unsupported(f"a product of {a.dtype} values")
    batched = a.ndim == 3
    if batched:
        (bt, m, k), (_, _, n) = a.shape, b.shape
        out_shape: tuple[int, ...] = (bt, m, n)
    else:
        (m, k), (_, n) = a.shape, b.shape
        out_shape = (m, n)

    def build(name: str, at: te.Tensor, bt_: te.Tensor) -> te.Tensor:
        r = te.reduce_axis(k, "k")
        if batched:
            return te.compute(out_shape, lambda x, i, j: te.sum(at[x, i, r] * bt_[x, r, j], axis=r), name=name,
                              axis_names=["b", "i", "j"])
        return te.compute(out_shape, lambda i, j: te.sum(at[i, r] * bt_[r, j], axis=r), name=name,
                          axis_names=["i", "j"])

    return ctx.stage(build, [a, b], ValueInfo(out_shape, a.dtype), op=ctx.op)


@register(aten.mm.default)
def mm(ctx: LoweringContext, a: Val, b: Val) -> Val:
    return matmul_stage(ctx, a, b)


@register(aten.bmm.default)
def bmm(ctx: LoweringContext, a: Val, b: Val) -> Val:
    return matmul_stage(ctx, a, b)


def _scaled_sum(ctx: LoweringContext, bias: Any, product: Val, beta: Any, alpha: Any) -> Val:
    def fn(bv: Expr, p: Expr) -> Expr:
        left = bv if beta == 1 else bv * beta
        right = p if alpha == 1 else p * alpha
        return left + right
    if beta == 0:
        return ctx.elementwise(lambda p: p * alpha, [product], ctx.out_dtype) if alpha != 1 else product
    return ctx.elementwise(fn, [bias, product], ctx.out_dtype)


@register(aten.addmm.default)
def addmm(ctx: LoweringContext, bias: Any, a: Val, b: Val, beta: Any = 1, alpha: Any = 1) -> Val:
    return _scaled_sum(ctx, bias, matmul_stage(ctx, a, b), beta, alpha)


@register(aten.baddbmm.default)
def baddbmm(ctx: LoweringContext, bias: Any, a: Val, b: Val, beta: Any = 1, alpha: Any = 1) -> Val:
    return _scaled_sum(ctx, bias, matmul_stage(ctx, a, b), beta, alpha)


@register(aten.convolution.default)
def convolution(ctx: LoweringContext, x: Val, w: Val, bias: Val | None, stride: Sequence[int],
                padding: Sequence[int], dilation: Sequence[int], transposed: bool, output_padding: Sequence[int],
                groups: int) -> Val:
    if transposed:
        raise Unsupported("transposed convolution")
    spatial = x.ndim - 2
    if spatial not in (1, 2):
        raise Unsupported(f"{spatial}-d convolution")
    if x.dtype != w.dtype or x.dtype not in ("float16", "bfloat16", "float32", "float64"):
        raise Unsupported(f"a convolution of {x.dtype} and {w.dtype}")
    stride, padding, dilation = (list(v) * spatial if len(v) == 1 else list(v) for v in (stride, padding, dilation))
    if spatial == 1:  # as 2-d with a unit height
        from .shapes import unsqueeze, squeeze
        x2, w2 = unsqueeze(ctx, x, 2), unsqueeze(ctx, w, 2)
        out = convolution(ctx, x2, w2, None, [1, stride[0]], [0, padding[0]], [1, dilation[0]], False, [0, 0],
                          groups)
        out = squeeze(ctx, out, 2)
        return _add_bias(ctx, out, bias, 1)
    n, c, h, wd = x.shape
    f, cg, kh, kw = w.shape
    if c != cg * groups or f % groups:
        raise Unsupported(f"channels {c} and filters {f} do not split into {groups} groups")
    oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    if oh <= 0 or ow <= 0:
        raise Unsupported("a convolution with an empty output")
    src = x
    if padding[0] or padding[1]:
        from .shapes import constant_pad_nd
        src = constant_pad_nd(ctx, x, [padding[1], padding[1], padding[0], padding[0]], 0.0)
    fg = f // groups
    sh, sw = stride
    dh, dw = dilation

    def build(name: str, xt: te.Tensor, wt: te.Tensor) -> te.Tensor:
        rr, rs = te.reduce_axis(kh, "rr"), te.reduce_axis(kw, "rs")
        if cg == 1:
            def body(b: Expr, k: Expr, y: Expr, z: Expr) -> Expr:
                ch = k if groups == f else (k // fg)
                return te.sum(xt[b, ch, y * sh + rr * dh, z * sw + rs * dw] * wt[k, 0, rr, rs], axis=[rr, rs])
        else:
            rc = te.reduce_axis(cg, "rc")

            def body(b: Expr, k: Expr, y: Expr, z: Expr) -> Expr:
                ch = rc if groups == 1 else (k // fg) * cg + rc
                return te.sum(xt[b, ch, y * sh + rr * dh, z * sw + rs * dw] * wt[k, rc, rr, rs], axis=[rc, rr, rs])
        return te.compute((n, f, oh, ow), body, name=name, axis_names=["b", "f", "y", "x"])

    out = ctx.stage(build, [src, w], ValueInfo((n, f, oh, ow), x.dtype))
    return _add_bias(ctx, out, bias, 1)


def _add_bias(ctx: LoweringContext, out: Val, bias: Val | None, channel_dim: int) -> Val:
    if bias is None:
        return out
    from .shapes import view
    shape = [1] * out.ndim
    shape[channel_dim] = bias.shape[0]
    b = view(ctx, bias, shape)
    return ctx.elementwise(lambda v, bv: v + bv, [out, b], out.dtype)

