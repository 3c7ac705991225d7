"""Copying a convolution's inputs with the reduced dimension last, before the contraction.

An NCHW convolution gathers its data along C (the reduction) with a stride of H*W, and
its KCRS weights with a stride of R*S: two-byte gathers that cannot be copied
asynchronously. With RELAYOUT, the launcher first copies each such input with that
dimension moved last (a tiled transpose [P, C, Q] -> [P, Q, C], coalesced both ways), and
the contraction reads the copies, contiguous along K.

Example:
    >>> from tensortune.te import workloads
    >>> from tensortune.backends.triton.patterns import analyze
    >>> plan = analyze(workloads.conv2d_nchw(2, 8, 6, 6, 4, 3, 3, 1, 1, "float16").output)
    >>> [(t.name, d) for t, d in relayout_targets(plan)]
    [('weight', 1), ('data', 1)]
"""

from __future__ import annotations

import dataclasses
import math

from ...te.expr import Expr, TensorRead, Var
from ...te.tensor import Tensor, placeholder
from ...te.visit import map_expr, reads
from .exprgen import INT32_LIMIT
from .patterns import ContractionPlan
from .source import CodegenError, cdiv, indent


def relayout_targets(plan: ContractionPlan) -> list[tuple[Tensor, int]]:
    """Inputs a windowed contraction (a convolution) gathers along a dimension that is not
    their last, with that dimension indexed by an inner reduce variable (NCHW data and
    KCRS weights along C): copied first with that dimension last, the gathers become
    contiguous along K (vector loads, asynchronous copies)."""
    if not plan.window:
        return []
    inner = {a.var for a in plan.k}
    found: dict[int, tuple[Tensor, int]] = {}
    for factor in (plan.factor_a, plan.factor_b):
        for r in reads(factor):
            t = r.tensor
            dims = [d for d, ix in enumerate(r.indices) if isinstance(ix, Var) and ix in inner]
            if t.op is not None or len(dims) != 1 or dims[0] == t.ndim - 1:
                continue
            if id(t) in found and found[id(t)][1] != dims[0]:
                return []
            found[id(t)] = (t, dims[0])
    return list(found.values())


def relayout(plan: ContractionPlan, targets: list[tuple[Tensor, int]]) -> tuple[ContractionPlan, list[Tensor]]:
    copies = []
    swap: dict[int, tuple[Tensor, int]] = {}
    for t, d in targets:
        shape = t.shape[:d] + t.shape[d + 1:] + (t.shape[d],)
        copy = placeholder(shape, t.dtype, f"{t.name}__last{d}")
        copies.append(copy)
        swap[id(t)] = (copy, d)

    def rewrite(x: Expr) -> Expr | None:
        if isinstance(x, TensorRead) and id(x.tensor) in swap:
            copy, d = swap[id(x.tensor)]
            return TensorRead(copy, x.indices[:d] + x.indices[d + 1:] + (x.indices[d],))
        return None

    return dataclasses.replace(plan, factor_a=map_expr(plan.factor_a, rewrite),
                               factor_b=map_expr(plan.factor_b, rewrite)), copies


def relayout_kernel(i: int, t: Tensor, d: int) -> tuple[str, tuple[int, int, int]]:
    """A tiled copy [P, C, Q] -> [P, Q, C]: loads along Q, stores along C."""
    p, cdim, q = math.prod(t.shape[:d]), t.shape[d], math.prod(t.shape[d + 1:])
    if p > 65535 or p * cdim * q > INT32_LIMIT:
        raise CodegenError(f"relayout of {t.name} {list(t.shape)}: too large for one launch")
    bq, bc = 64, min(64, max(16, 1 << (cdim - 1).bit_length()))
    mask = [m for m, even in ((f"(rc < {cdim})[:, None]", cdim % bc == 0), (f"(rq < {q})[None, :]", q % bq == 0))
            if not even]
    margs = f", mask={' & '.join(mask)}" if mask else ""
    body = ["pq = tl.program_id(0)", "pc = tl.program_id(1)", "pp = tl.program_id(2)",
            f"rq = pq * {bq} + tl.arange(0, {bq})", f"rc = pc * {bc} + tl.arange(0, {bc})",
            f"x = tl.load(p_src + pp * {cdim * q} + rc[:, None] * {q} + rq[None, :]{margs})",
            f"tl.store(p_dst + pp * {cdim * q} + rq[None, :] * {cdim} + rc[:, None], x{margs})"]
    text = "@triton.jit\n" + f"def tt_relayout{i}(p_src, p_dst):\n" + "\n".join(indent(body, 1))
    return text, (cdiv(q, bq), cdiv(cdim, bc), p)
