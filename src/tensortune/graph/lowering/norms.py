"""Normalisations: layer norm, batch norm in inference, group norm.

Layer norm is the rows form of `te.workloads.layer_norm`: a mean, a variance that reads
it, and an elementwise output; batch norm with running statistics is elementwise (it
fuses into the convolution before it).

Example:
    >>> import torch
    >>> from tensortune.graph.lowering import rule_for
    >>> rule_for(torch.ops.aten.native_layer_norm.default).__name__
    'layer_norm'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ... import te
from . import register
from .context import LoweringContext, Unsupported, Val
from .reductions import keep, rows, variance

aten = torch.ops.aten


@register(aten.native_layer_norm.default)
def layer_norm(ctx: LoweringContext, x: Val, normalized_shape: Sequence[int], weight: Val | None, bias: Val | None,
               eps: float) -> tuple[Val, Val, Val]:
    k = len(normalized_shape)
    dims = list(range(x.ndim - k, x.ndim))
    var, mean = variance(ctx, x, dims, 0.0, keepdim=False)
    rstd = ctx.elementwise(lambda v: 1.0 / te.sqrt(v + eps), [var], var.dtype)
    operands: list[Any] = [x, rows(mean, x, dims), rows(rstd, x, dims)] + [v for v in (weight, bias) if v is not None]
    out = ctx.elementwise(lambda v, m, r, *wb: scale_shift((v - m) * r, wb, weight, bias), operands, x.dtype)
    return out, keep(ctx, ctx.cast(mean, x.dtype), x, dims), keep(ctx, ctx.cast(rstd, x.dtype), x, dims)


def scale_shift(v: Any, wb: Sequence[Any], weight: Val | None, bias: Val | None) -> Any:
    """`v * weight + bias`, for the ones given (`wb` holds their values in that order)."""
    if weight is not None:
        v = v * wb[0]
    if bias is not None:
        v = v + wb[-1]
    return v


def _channel(ctx: LoweringContext, v: Val | None, ndim: int) -> Val | None:
    if v is None:
        return None
    from .shapes import view
    shape = [1] * ndim
    shape[1] = v.shape[0]
    return view(ctx, v, shape)


def _batch_norm_eval(ctx: LoweringContext, x: Val, weight: Val | None, bias: Val | None, mean: Val, var: Val,
                     eps: float) -> Val:
    chans = [_channel(ctx, v, x.ndim) for v in (mean, var, weight, bias)]
    operands: list[Any] = [x] + [c for c in chans if c is not None]
    return ctx.elementwise(lambda v, m, s, *wb: scale_shift((v - m) * (1.0 / te.sqrt(s + eps)), wb, weight, bias),
                           operands, x.dtype)


@register(aten._native_batch_norm_legit_no_training.default)
def batch_norm_eval(ctx: LoweringContext, x: Val, weight: Val | None, bias: Val | None, running_mean: Val,
                    running_var: Val, momentum: float, eps: float) -> tuple[Any, ...]:
    return _batch_norm_eval(ctx, x, weight, bias, running_mean, running_var, eps), None, None


@register(aten._native_batch_norm_legit.default, aten.native_batch_norm.default)
def batch_norm(ctx: LoweringContext, x: Val, weight: Val | None, bias: Val | None, running_mean: Val | None,
               running_var: Val | None, training: bool, momentum: float, eps: float) -> tuple[Any, ...]:
    if training or running_mean is None or running_var is None:
        raise Unsupported("batch norm in training mode (it updates its running statistics)")
    return _batch_norm_eval(ctx, x, weight, bias, running_mean, running_var, eps), None, None


@register(aten.native_group_norm.default)
def group_norm(ctx: LoweringContext, x: Val, weight: Val | None, bias: Val | None, n: int, c: int, hw: int,
               groups: int, eps: float) -> tuple[Any, ...]:
    from .shapes import view
    if c % groups:
        raise Unsupported(f"{c} channels in {groups} groups")
    grouped = view(ctx, x, [n, groups, (c // groups) * hw])
    var, mean = variance(ctx, grouped, [2], 0.0, keepdim=False)
    rstd = ctx.elementwise(lambda v: 1.0 / te.sqrt(v + eps), [var], var.dtype)
    normed = ctx.elementwise(lambda v, m, r: (v - m) * r,
                             [grouped, rows(mean, grouped, [2]), rows(rstd, grouped, [2])], var.dtype)
    out = view(ctx, normed, list(x.shape))
    w, b = _channel(ctx, weight, x.ndim), _channel(ctx, bias, x.ndim)
    operands: list[Any] = [out] + [v for v in (w, b) if v is not None]
    result = ctx.elementwise(lambda v, *wb: scale_shift(v, wb, weight, bias), operands, x.dtype)
    return result, ctx.cast(mean, x.dtype), ctx.cast(rstd, x.dtype)

