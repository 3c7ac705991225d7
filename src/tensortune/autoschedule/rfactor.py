"""rfactor as a rewrite of the expression graph, for reductions with little parallelism.

`X[s] = sum_k f(s, k)` with k of extent K becomes a partial reduction over a new
spatial axis of extent F, `X.rf[r, s] = sum_o f(s, o * F + r)` (guarded when F does not
divide K), and a final short reduction `X[s] = sum_r X.rf[r, s]`. The partial stage can
run its F lanes in parallel and vectorized; max and min reductions work the same way.

Example:
    >>> from tensortune import te
    >>> A = te.placeholder((1000,), name="A")
    >>> k = te.reduce_axis(1000, "k")
    >>> S = te.compute((1,), lambda i: te.sum(A[k] * A[k], axis=k), name="S")
    >>> (out,), partials = rfactor_graph([S], {"S": 64})
    >>> partials, out.op.inputs[0].shape
    ({'S': 'S.rf'}, (64, 1))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..te import ops
from ..te.dtype import TEError
from ..te.expr import Const, Expr, IterVar, Reduce, TensorRead
from ..te.tensor import Tensor, compute, graph
from ..te.visit import map_expr, substitute


def rfactor_graph(outputs: Sequence[Tensor], factors: Mapping[str, int]) -> tuple[list[Tensor], dict[str, str]]:
    """The graph with each named reduction split by its factor; returns the new outputs and
    the name of each reduction's partial stage."""
    rebuilt: dict[int, Tensor] = {}
    partials: dict[str, str] = {}

    def rebuild(t: Tensor) -> Tensor:
        if t.op is None:
            return t
        if id(t) in rebuilt:
            return rebuilt[id(t)]
        body = map_expr(t.op.body, lambda x: TensorRead(rebuild(x.tensor), x.indices)
                        if isinstance(x, TensorRead) and x.tensor.op is not None else None)
        if t.name in factors:
            new, partial = _split_reduction(t, body, factors[t.name])
            partials[t.name] = partial.name
        else:
            new = compute(t.shape, lambda *idx: substitute(body, dict(zip(t.op.axes, idx))), name=t.name,
                          tag=t.op.tag)
        rebuilt[id(t)] = new
        return new

    for t in graph(outputs):
        rebuild(t)
    return [rebuilt[id(o)] for o in outputs], partials


def _split_reduction(t: Tensor, body: Expr, factor: int) -> tuple[Tensor, Tensor]:
    if not isinstance(body, Reduce) or len(body.axes) != 1:
        raise TEError(f"rfactor: {t.name!r} must reduce over exactly one axis")
    k = body.axes[0]
    outer_extent = -(-k.extent // factor)
    ko = ops.reduce_axis(outer_extent, f"{k.name}o")
    identity: Const = body.init

    def partial_body(r: IterVar, *spatial: IterVar) -> Expr:
        mapping: dict[IterVar, Expr] = dict(zip(t.op.axes, spatial))
        index = ko * factor + r
        mapping[k] = index
        value = substitute(body.source, mapping)
        if k.extent % factor:
            value = ops.select(index < k.extent, value, identity)
        return Reduce(body.combiner, value, (ko,))

    names = ["rf_lane"] + [a.name for a in t.op.axes]
    partial = compute((factor,) + t.shape, _named(partial_body, names), name=f"{t.name}.rf")
    lane = ops.reduce_axis(factor, "rf_lane")
    final = compute(t.shape, _named(lambda *s: Reduce(body.combiner, partial[(lane,) + s], (lane,)),
                                    [a.name for a in t.op.axes]), name=t.name)
    return final, partial


def _named(fn, names: list[str]):
    """A function whose parameters carry `names` (te names axes after them)."""
    params = ", ".join(names)
    scope = {"fn": fn}
    exec(f"def named({params}):\n    return fn({params})", scope)  # noqa: S102 - names are te axis names
    return scope["named"]
