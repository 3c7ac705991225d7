"""Reductions inside larger expressions become stages of their own, when they are defined.

`te.compute` calls `lift_reductions` on every body. A reduction that is not the whole
body (`te.sum(Q[b, i, d] * K[b, j, d], axis=d) * scale`), each of several reductions in
one expression, and a reduction inside another reduction's source become computed
tensors named `<name>.<combiner>` (`<name>.<combiner>1`, ... for more of the same kind),
over the axes they use, in the order the enclosing compute has them; the expression
then reads them at those axes. What is left for the auto-schedulers (CPU sketches, GPU
patterns) is the graph they expect: a reduction stage and its elementwise epilogue
(fused by both), or rows of reductions read by an elementwise output. The values are
the same: each lifted stage computes exactly the subexpression it replaces, in its type.

Example:
    >>> from tensortune import te
    >>> Q, K = te.placeholder((2, 8, 4), name="Q"), te.placeholder((2, 8, 4), name="K")
    >>> d = te.reduce_axis(4, "d")
    >>> S = te.compute((2, 8, 8), lambda b, i, j: te.sum(Q[b, i, d] * K[b, j, d], axis=d) * 0.5, name="S")
    >>> [t.name for t in te.graph(S)], str(S.op.body)
    (['Q', 'K', 'S.sum', 'S'], '(S.sum[b, i, j] * 0.5)')
    >>> S.op.inputs[0].shape
    (2, 8, 8)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .dtype import TEError
from .expr import Expr, IterVar, Reduce, const
from .visit import children, itervars, substitute, walk, with_children


def has_inner_reduction(body: Expr) -> bool:
    """Whether `body` has a reduction anywhere but as its whole self."""
    inner = body.source if isinstance(body, Reduce) else body
    return any(isinstance(x, Reduce) for x in walk(inner))


def lift_reductions(name: str, axes: Sequence[IterVar], body: Expr,
                    make: Callable[..., Any]) -> Expr:
    """`body` with every reduction that is not the whole body replaced by a read of a new
    stage computing it (`make` is `te.compute`). Axes a lifted reduction uses must be
    `axes` or reduce axes of reductions around it."""
    names: dict[str, int] = {}

    def stage_name(combiner: str) -> str:
        n = names.get(combiner, 0)
        names[combiner] = n + 1
        return f"{name}.{combiner}{n or ''}"

    def lift(e: Expr, context: Sequence[IterVar]) -> Expr:
        """`e` (not itself a stage's whole body) with its reductions lifted."""
        return _map_pre(e, lambda x: stage_read(x, context) if isinstance(x, Reduce) else None)

    def stage_read(r: Reduce, context: Sequence[IterVar]) -> Expr:
        inner_context = list(context) + list(r.axes)
        source = lift(r.source, inner_context)
        used = set(itervars(source)) - set(r.axes)
        unknown = [v for v in used if v not in context]
        if unknown:
            raise TEError(f"compute {name!r}: a reduction inside the expression uses axis "
                          f"{unknown[0].name!r}, which is neither an axis of {name!r} nor a reduce axis around it")
        free = [v for v in context if v in used]
        spatial = [IterVar(v.name, v.extent, "spatial") for v in free]
        body = Reduce(r.combiner, substitute(source, dict(zip(free, spatial))), r.axes)
        if not free:
            stage = make((1,), lambda _: body, name=stage_name(r.combiner), axis_names=["i0"])
            return stage[const(0)]
        stage = make(tuple(v.extent for v in free), lambda *ax: substitute(body, dict(zip(spatial, ax))),
                     name=stage_name(r.combiner), axis_names=[v.name for v in free])
        return stage[tuple(free)]

    if isinstance(body, Reduce):
        return Reduce(body.combiner, lift(body.source, list(axes) + list(body.axes)), body.axes)
    return lift(body, list(axes))


def _map_pre(e: Expr, fn: Callable[[Expr], Expr | None]) -> Expr:
    """Rewrite top-down: where `fn` gives a replacement, its subtree is not visited."""
    out = fn(e)
    if out is not None:
        return out
    kids = children(e)
    if not kids:
        return e
    return with_children(e, tuple(_map_pre(c, fn) for c in kids))

