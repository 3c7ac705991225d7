"""Primitives that add a stage to a schedule: cache_write, cache_read and rfactor.

Example:
    >>> from tensortune import te
    >>> A = te.placeholder((4, 256), name="A")
    >>> k = te.reduce_axis(256, "k")
    >>> S = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="S")
    >>> s = te.create_schedule(S)
    >>> ko, ki = s[S].split("k", 16)
    >>> SR = s.rfactor(S, ki)       # 16 partial sums per row, then their sum
    >>> [(l.name, l.kind) for l in s[SR].loops], [(l.name, l.kind) for l in s[S].loops]
    ([('k.1', 'spatial'), ('i', 'spatial'), ('k.0', 'reduce')], [('i', 'spatial'), ('k.1', 'reduce')])
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .dtype import TEError
from .expr import Binary, Expr, IterVar, Reduce, Select, TensorRead, compare, const, reduce_identity
from .state import SplitRel, StageState, reads_of, replace_reads
from .steps import CacheRead, CacheWrite, RFactor
from .tensor import ComputeOp, Tensor, compute
from .visit import substitute

if TYPE_CHECKING:
    from .schedule import Schedule


def _untouched(sch: Schedule, name: str, what: str) -> StageState:
    st = sch._stage(name, what)
    if st.transformed or sch._attached_to(name) or st.attach is not None:
        raise TEError(f"{what}({name!r}) must come before {name!r} is transformed, computed at another stage or "
                      "has stages computed at it")
    return st


def cache_write(sch: Schedule, name: str, scope: str) -> Tensor:
    st = _untouched(sch, name, "cache_write")
    new_name = sch._fresh_name(f"{name}.{scope}")

    def change() -> Tensor:
        op = ComputeOp(st.axes, st.reduce_axes, st.body, "cache_write")
        cache = Tensor(new_name, st.tensor.shape, st.tensor.dtype, op)
        st.body = TensorRead(cache, tuple(st.axes))
        st.reduce_axes = ()
        st.reset_loops()
        sch._insert(StageState.of(cache, origin="cache_write"), before=name)
        return cache

    return sch._run(CacheWrite(name, scope), change)


def cache_read(sch: Schedule, name: str, readers: list[str], scope: str) -> Tensor:
    source = sch._stages[name].tensor if name in sch._stages else next(
        (t for t in sch.inputs if t.name == name), None)
    if source is None:
        raise TEError(f"cache_read: no tensor named {name!r}")
    if name in sch._stages and sch._stages[name].inlined:
        raise TEError(f"cache_read: {name!r} is inlined")
    if not readers:
        raise TEError("cache_read needs at least one reader")
    for r in readers:
        if not reads_of(sch._stage(r, "cache_read reader").body, source):
            raise TEError(f"cache_read: {r!r} does not read {name!r} directly")
    new_name = sch._fresh_name(f"{name}.{scope}")

    def change() -> Tensor:
        cache = compute(source.shape, lambda *i: source[i], name=new_name)
        for r in readers:
            sch._stages[r].body = replace_reads(sch._stages[r].body, source, cache)
        sch._insert(StageState.of(cache, origin="cache_read"), before=readers)
        return cache

    return sch._run(CacheRead(name, tuple(readers), scope), change)


def rfactor(sch: Schedule, name: str, loop: str) -> Tensor:
    st = sch._stage(name, "rfactor")
    body = st.body
    if not isinstance(body, Reduce):
        raise TEError(f"rfactor: {name!r} is not a reduction")
    if sch._attached_to(name) or st.attach is not None or st.annotations:
        raise TEError(f"rfactor({name!r}) must come before annotations and compute_at")
    roots = {a.name: a for a in st.reduce_axes}
    rels = st.relations
    split = rels[0] if len(rels) == 1 and isinstance(rels[0], SplitRel) else None
    if loop in roots and not rels:
        k, kf, kr = roots[loop], (loop, roots[loop].extent), None
        value: Expr = IterVar(loop, roots[loop].extent, "spatial")
    elif split is not None and split.parent in roots and len(split.children) == 2 and loop in split.children:
        k, f = roots[split.parent], split.factors[0]
        outer = (split.children[0], -(-k.extent // f))
        inner = (split.children[1], f)
        kf, kr = (inner, outer) if loop == split.children[1] else (outer, inner)
        fv = IterVar(kf[0], kf[1], "spatial")
        rv = IterVar(kr[0], kr[1], "reduce")
        ov, iv = (rv, fv) if kf is inner else (fv, rv)
        value = Binary("add", Binary("mul", ov, const(f)), iv)
    else:
        raise TEError(f"rfactor takes a reduce axis of {name!r}, or one of the two loops of a reduce axis just "
                      f"split, before any other transformation (the loops are {', '.join(st.leaves)})")
    new_name = sch._fresh_name(f"{name}.rf")

    def change() -> Tensor:
        src = substitute(body.source, {k: value})
        if kr is not None and k.extent % split.factors[0]:  # type: ignore[union-attr]
            src = Select(compare("lt", value, k.extent), src, reduce_identity(body.combiner, body.dtype))
        rest = tuple(a for a in st.reduce_axes if a != k)
        raxes = ((IterVar(kr[0], kr[1], "reduce"),) if kr else ()) + rest
        rf_body = Reduce(body.combiner, src, raxes) if raxes else src
        axes = (IterVar(kf[0], kf[1], "spatial"),) + st.axes
        rf = Tensor(new_name, (kf[1],) + st.tensor.shape, st.tensor.dtype, ComputeOp(axes, raxes, rf_body, "rfactor"))
        r = IterVar(kf[0], kf[1], "reduce")
        st.body = Reduce(body.combiner, TensorRead(rf, (r,) + st.axes), (r,))
        st.reduce_axes = (r,)
        st.reset_loops()
        sch._insert(StageState.of(rf, origin="rfactor"), before=name)
        return rf

    return sch._run(RFactor(name, loop), change)
