"""Bound inference: which region of each tensor a stage computes, hence its loop extents.

A stage at the root computes its whole tensor. A stage computed at loop L of a
consumer computes, per iteration of L, the union of the elements the consumer reads
while its loops inside L sweep their ranges: `base + [0, extent)` per dimension, where
`base` depends only on loops outside L. When that is not affine (or the reads disagree)
the region is the whole dimension, which is always correct.

Example:
    >>> from tensortune import te
    >>> A = te.placeholder((64,), name="A")
    >>> B = te.compute((64,), lambda i: A[i] + 1, name="B")
    >>> C = te.compute((64,), lambda i: B[i] * 2, name="C")
    >>> s = te.create_schedule(C)
    >>> o, i = s[C].split("i", 8)
    >>> s[B].compute_at(s[C], o)
    >>> s.bounds()["B"].region
    (8,)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .affine import Affine, Range, symbolic_range
from .expr import Expr, IterVar
from .state import StageState, reads_of
from .visit import substitute


@dataclass(frozen=True)
class StageBounds:
    base: tuple[Affine, ...]  # per spatial dimension: where the computed region starts
    region: tuple[int, ...]  # the region's extents (the stage's buffer shape)
    extents: dict[str, int]  # every loop of the stage
    lower_guard: tuple[bool, ...]  # base + local may fall below 0
    upper_guard: tuple[bool, ...]  # base + local may pass the tensor's extent


def root_values(st: StageState, b: StageBounds) -> dict[IterVar, Expr]:
    """Each root axis of `st` as an expression of its leaf loop variables (plus the base)."""
    vals, _ = st.loop_values(b.extents)
    out: dict[IterVar, Expr] = {}
    for d, ax in enumerate(st.axes):
        base = b.base[d]
        out[ax] = vals[ax.name] if not base.terms and not base.offset else Affine.of(
            base.to_expr() + vals[ax.name]).to_expr()
    for ax in st.reduce_axes:
        out[ax] = vals[ax.name]
    return out


def infer_bounds(stages: Mapping[str, StageState], bodies: Mapping[str, Expr]) -> dict[str, StageBounds]:
    """Bounds of every non-inlined stage; `stages` in topological order, `bodies` with
    inlined producers substituted."""
    out: dict[str, StageBounds] = {}
    var_ranges: dict[Expr, Range] = {}
    for st in reversed(list(stages.values())):
        if st.inlined:
            continue
        shape = st.tensor.shape
        full = tuple(Affine(()) for _ in shape)
        base, region = full, shape
        lower = upper = tuple(False for _ in shape)
        if st.attach is not None:
            base, region, lower, upper = _attached_region(st, stages, out, bodies, var_ranges)
        root = {a.name: region[d] for d, a in enumerate(st.axes)}
        root.update({a.name: a.extent for a in st.reduce_axes})
        b = StageBounds(base, region, st.loop_extents(root), lower, upper)
        out[st.name] = b
        for leaf in st.leaves:
            var_ranges[st.loop_var(leaf)] = (0, b.extents[leaf] - 1)
    return out


def _attached_region(st: StageState, stages: Mapping[str, StageState], bounds: Mapping[str, StageBounds],
                     bodies: Mapping[str, Expr], var_ranges: Mapping[Expr, Range]):
    shape = st.tensor.shape
    target, loop = st.attach  # type: ignore[misc]
    t = stages[target]
    per_dim: list[list] = [[] for _ in shape]
    for consumer, body in bodies.items():
        if consumer == st.name or not reads_of(body, st.tensor):
            continue
        # everything nested inside one iteration of `loop` varies: the consumer's loops, the
        # loops of the stages it is computed inside (up to the target), the target's inner loops
        moving: list[Expr] = []
        cur = consumer
        while cur != target:
            c = stages[cur]
            moving.extend(c.loop_var(x) for x in c.leaves)
            cur = c.attach[0]  # type: ignore[index]
        moving.extend(t.loop_var(x) for x in t.leaves[t.leaves.index(loop) + 1:])
        varying = {v: var_ranges[v] for v in moving}
        values = root_values(stages[consumer], bounds[consumer])
        for r in reads_of(body, st.tensor):
            for d, ix in enumerate(r.indices):
                per_dim[d].append(symbolic_range(substitute(ix, values), varying))
    base, region, lower, upper = [], [], [], []
    for d, ranges in enumerate(per_dim):
        fallback = not ranges or any(r is None for r in ranges) or len({r.base for r in ranges}) > 1
        if not fallback:
            lo, hi = min(r.lo for r in ranges), max(r.hi for r in ranges)
            extent = hi - lo + 1
            fallback = extent >= shape[d]
        if fallback:
            base.append(Affine(()))
            region.append(shape[d])
            lower.append(False)
            upper.append(False)
            continue
        b = Affine(ranges[0].base.terms, lo)
        span = b.interval(var_ranges)
        base.append(b)
        region.append(extent)
        lower.append(span is None or span[0] < 0)
        upper.append(span is None or span[1] + extent > shape[d])
    return tuple(base), tuple(region), tuple(lower), tuple(upper)
