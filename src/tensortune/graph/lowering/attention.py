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
from .context import LoweringContext, Unsupported, Val, read
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
                          name=name, axis_names=["i0", "i1", "i2", "i3"])

    s = ctx.stage(scores, [q, k], ValueInfo((b, h, sq, skv), q.dtype), op="attention.scores")
    shape = (b, h, sq, skv)
    offset = 0
    if mask is not None and ctx.graph.nodes[mask.node].kind == "constant" and not is_causal:
        found = causal_offset(ctx.graph.nodes[mask.node].value, sq, skv)
        if found is not None:  # a causal mask given as data (as Hugging Face builds it): kept as a bound
            mask, is_causal, offset = None, True, found
    inputs = [s] + ([mask] if mask is not None else [])
    neg_inf = float("-inf")

    def logits(name: str, st: te.Tensor, *mt: te.Tensor) -> te.Tensor:
        def body(z: Any, y: Any, i: Any, j: Any) -> Any:
            x = te.cast(st[z, y, i, j], "float32") * scale
            keep = None
            if mask is not None:
                m = read(mt[0], mask.shape, (z, y, i, j), shape)
                if mask.dtype == "bool":
                    keep = te.not_equal(m, te.const(0, m.dtype))
                else:
                    x = x + te.cast(m, "float32")
            if is_causal:  # torch's is_causal: the diagonal from the top left
                bound = j <= (i + offset if offset else i)
                keep = bound if keep is None else te.all(bound, keep)
            return x if keep is None else te.select(keep, x, neg_inf)
        return te.compute(shape, body, name=name, axis_names=["i0", "i1", "i2", "i3"])

    lg = ctx.stage(logits, inputs, ValueInfo(shape, "float32"), op="attention.logits")
    mx = ctx.reduce("max", lg, [3], op="attention.max")
    # a row whose every key is masked subtracts 0 (its exponentials are 0) and divides by 1: zeros, as torch gives
    e = ctx.elementwise(lambda x, m: te.exp(x - te.select(m > neg_inf, m, 0.0)), [lg, rows(mx, lg, [3])],
                        "float32", op="attention.exp")
    total = ctx.reduce("sum", e, [3], op="attention.sum")
    p = ctx.elementwise(lambda x, t: x / te.select(t > 0.0, t, 1.0), [e, rows(total, e, [3])], q.dtype,
                        op="attention.probs")

    def output(name: str, pt: te.Tensor, vt: te.Tensor) -> te.Tensor:
        r = te.reduce_axis(skv, "j")
        return te.compute((b, h, sq, dv), lambda x, y, i, e: te.sum(pt[x, y, i, r] * vt[x, head(y), r, e], axis=r),
                          name=name, axis_names=["i0", "i1", "i2", "i3"])

    return ctx.stage(output, [p, v], ValueInfo((b, h, sq, dv), q.dtype), op="attention.output")


def causal_offset(mask: Any, sq: int, skv: int) -> int | None:
    """The `c` for which a constant attention mask keeps exactly the keys `j <= i + c` of
    every query `i` (the same for every batch and head), or None. A boolean mask keeps
    where it is true; an additive one where it is 0, and must be -inf or below half the
    dtype's lowest value elsewhere, with every query keeping some key (so the bound and
    the mask give the same softmax).

    Example:
        >>> causal_offset(torch.ones(4, 6, dtype=torch.bool).tril(2), 4, 6)
        2
        >>> padding = torch.ones(4, 6, dtype=torch.bool)
        >>> padding[:, 4:] = False
        >>> causal_offset(padding, 4, 6) is None
        True
    """
    if not isinstance(mask, torch.Tensor) or mask.ndim < 2 or tuple(mask.shape[-2:]) != (sq, skv):
        return None
    if mask.dtype == torch.bool:
        keep = mask
    elif mask.is_floating_point():
        masked = mask != 0
        lowest = torch.finfo(mask.dtype).min / 2
        if not bool(torch.all(~masked | (mask <= lowest))):
            return None
        keep = ~masked
    else:
        return None
    rows = keep.reshape(-1, sq, skv)
    first = rows[0]
    c = int(first[0].sum()) - 1
    if mask.dtype != torch.bool and c < 0:
        return None
    expected = torch.ones(sq, skv, dtype=torch.bool, device=first.device).tril(c)
    if not bool(torch.equal(first, expected)) or not bool(torch.all(rows == first)):
        return None
    if mask.dtype != torch.bool and not bool(expected.any(dim=1).all()):
        return None
    return c
