"""Scaled dot-product attention, kept whole through capture and lowered to stages.

Capture maps `aten.scaled_dot_product_attention` to the op `tensortune::sdpa` (which
runs torch's own attention when called), so the graph keeps attention as one node
instead of torch's math decomposition. It lowers to the stages of attention: scores
(a contraction over the head dimension), scale and mask, a softmax over the keys (rows
whose every key is masked give zeros, as torch's math path does), then the product with
the values; the partition makes them one fused kernel where the target has one.

Example:
    >>> import torch
    >>> q = k = v = torch.randn(1, 2, 8, 4)
    >>> torch.allclose(torch.ops.tensortune.sdpa(q, k, v, None, 0.0, True, None, False),
    ...                torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))
    True
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ... import te
from ..ir import ValueInfo
from . import register
from .context import LoweringContext, Unsupported, Val
from .reductions import rows


@torch.library.custom_op("tensortune::sdpa", mutates_args=())
def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None, dropout_p: float,
         is_causal: bool, scale: float | None, enable_gqa: bool) -> torch.Tensor:
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p,
                                                            is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)


@sdpa.register_fake
def _(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None, dropout_p: float,
      is_causal: bool, scale: float | None, enable_gqa: bool) -> torch.Tensor:
    return q.new_empty(q.shape[:-1] + (v.shape[-1],))


def keep_sdpa(q: Any, k: Any, v: Any, attn_mask: Any = None, dropout_p: float = 0.0, is_causal: bool = False,
              scale: float | None = None, enable_gqa: bool = False) -> Any:
    """The decomposition capture uses for `aten.scaled_dot_product_attention`: the kept op."""
    return torch.ops.tensortune.sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)


@register(torch.ops.tensortune.sdpa.default)
def attention(ctx: LoweringContext, q: Val, k: Val, v: Val, mask: Val | None, dropout_p: float, is_causal: bool,
              scale: float | None, enable_gqa: bool) -> Val:
    if dropout_p:
        raise Unsupported("attention with dropout")
    if not (q.ndim == k.ndim == v.ndim == 4):
        raise Unsupported("attention on other than [batch, heads, sequence, dim] tensors")
    (b, h, sq, d), (bk, hk, skv, dk), (_, _, _, dv) = q.shape, k.shape, v.shape
    if bk != b or dk != d or h % hk or (hk != h and not enable_gqa):
        raise Unsupported(f"attention shapes q{list(q.shape)} k{list(k.shape)} v{list(v.shape)}")
    if q.dtype not in ("float16", "bfloat16", "float32") or k.dtype != q.dtype or v.dtype != q.dtype:
        raise Unsupported(f"attention on {q.dtype}")
    group = h // hk
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)

    def head(x: Any) -> Any:
        return x if group == 1 else x // group

    def scores(name: str, qt: te.Tensor, kt: te.Tensor) -> te.Tensor:
        r = te.reduce_axis(d, "d")
        return te.compute((b, h, sq, skv), lambda x, y, i, j: te.sum(qt[x, y, i, r] * kt[x, head(y), j, r], axis=r),
                          name=name, axis_names=["b", "h", "i", "j"])

    s = ctx.stage(scores, [q, k], ValueInfo((b, h, sq, skv), q.dtype), op="attention.scores")
    masked = mask is not None or is_causal
    operands: list[Any] = [s]
    if mask is not None:
        operands.append(mask)

    def logits(v_: Any, *m: Any) -> Any:
        x = v_ * scale
        if mask is not None:
            x = te.select(m[0], x, float("-inf")) if mask.dtype == "bool" else x + m[0]
        return x

    shape = (b, h, sq, skv)
    if is_causal:
        causal = ctx.elementwise(lambda i, j: j <= i, [_index(ctx, shape, 2), _index(ctx, shape, 3)], "bool",
                                 shape=shape, op="attention.causal")
        operands.append(causal)
        inner = logits

        def logits(v_: Any, *m: Any) -> Any:  # noqa: F811 - the causal select around the mask
            return te.select(m[-1], inner(v_, *m[:-1]), float("-inf"))

    cdt = ["float32"] + (["bool" if mask is not None and mask.dtype == "bool" else "float32"] if mask is not None
                         else []) + (["bool"] if is_causal else [])
    lg = ctx.elementwise(logits, operands, "float32", shape=shape, compute=cdt, op="attention.logits")
    mx = ctx.reduce("max", lg, [3], op="attention.max")
    m = rows(mx, lg, [3])
    if masked:
        total = ctx.reduce("sum", lg, [3], extra=[m], op="attention.sum",
                           prologue=lambda x, mm: te.select(te.equal(mm, float("-inf")), te.const(0.0, "float32"),
                                                            te.exp(x - mm)))
        p = ctx.elementwise(lambda x, mm, t: te.select(te.equal(mm, float("-inf")), te.const(0.0, "float32"),
                                                       te.exp(x - mm) / t), [lg, m, rows(total, lg, [3])], q.dtype,
                            op="attention.probs")
    else:
        total = ctx.reduce("sum", lg, [3], extra=[m], prologue=lambda x, mm: te.exp(x - mm), op="attention.sum")
        p = ctx.elementwise(lambda x, mm, t: te.exp(x - mm) / t, [lg, m, rows(total, lg, [3])], q.dtype,
                            op="attention.probs")

    def output(name: str, pt: te.Tensor, vt: te.Tensor) -> te.Tensor:
        r = te.reduce_axis(skv, "j")
        return te.compute((b, h, sq, dv), lambda x, y, i, e: te.sum(pt[x, y, i, r] * vt[x, head(y), r, e], axis=r),
                          name=name, axis_names=["b", "h", "i", "e"])

    return ctx.stage(output, [p, v], ValueInfo((b, h, sq, dv), q.dtype), op="attention.output")


def _index(ctx: LoweringContext, shape: tuple[int, ...], dim: int) -> Val:
    """The index along `dim` as an int32 tensor of `shape` (a stage with no inputs)."""
    def build(name: str) -> te.Tensor:
        return te.compute(shape, lambda *idx: idx[dim], name=name, axis_names=[f"i{k}" for k in range(len(shape))])
    return ctx.stage(build, [], ValueInfo(shape, "int32"), op="attention.index")
