"""Filling a sketch's holes: a sketch and a configuration become a `te.Schedule`.

Everything goes through te's checked schedule primitives, so the result is an ordinary
schedule with its list of steps (recorded with each measurement and replayable with
`te.Schedule.from_steps`).

Example:
    >>> from tensortune.te import workloads
    >>> from tensortune.autoschedule.holes import SketchSpace
    >>> w = workloads.matmul(64, 64, 64)
    >>> sp = SketchSpace.of(w.outputs)
    >>> cfg = sp.space.config(sketch="C:cache_write", C_tile_i=(2, 2, 4), C_tile_j=(1, 2, 16),
    ...                       C_tile_k=(4,), C_par=1, C_unroll=16, C_at=2)
    >>> s = apply_config(sp, cfg)
    >>> [l.name for l in s["C.local"].loops]
    ['k.0', 'i.0', 'j.0', 'k.1', 'i.1', 'j.1']
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..te.expr import Reduce
from ..te.schedule import MAX_UNROLL, Schedule, Stage
from ..te.visit import reads, walk
from .analysis import StageInfo
from .holes import SketchSpace, hole
from .rfactor import rfactor_graph
from .sketch import (CACHE_WRITE, DOT, INLINE, RFACTOR, SIMPLE, TILE, TILE_LOCAL, WINDOW, DotAxes, Sketch,
                     packs, sketch_dot_axes, window_axes)

PACK_BLOCK = 16  # the blocks of a packed copy that transposes (one 64-byte line of float32 each way)


def apply_config(sp: SketchSpace, config: Mapping[str, Any]) -> Schedule:
    """The schedule of `config` (its sketch with the holes filled); raises TEError when
    te refuses a primitive."""
    sketch = sp.sketch(config)
    outputs = sp.outputs
    rfactored = {p.stage: config[hole(p.stage, "rf")] for p in sketch.plans if p.rule == RFACTOR}
    partials: dict[str, str] = {}
    if rfactored:
        outputs, partials = rfactor_graph(outputs, rfactored)
    s = Schedule(outputs)
    for p in sketch.plans:
        if p.rule == INLINE:
            s[p.stage].compute_inline()
    for p in sketch.plans:
        if p.rule == CACHE_WRITE:
            local = s.cache_write(p.stage)
            _tile_local(s, config, p.prefix, consumer=s[p.stage], local=s[local.name], vector=p.vector, pack=p.pack,
                        panel=p.panel)
        elif p.rule == TILE_LOCAL:
            _tile_local(s, config, p.prefix, consumer=s[p.partner], local=s[p.stage], vector=p.vector, pack=p.pack,
                        panel=p.panel)
        elif p.rule == WINDOW:
            if p.partner:
                _window(s, config, p.prefix, consumer=s[p.partner], local=s[p.stage], axes=window_axes(sp.graph[p.stage]))
            else:
                local = s.cache_write(p.stage)
                _window(s, config, p.prefix, consumer=s[p.stage], local=s[local.name],
                        axes=window_axes(sp.graph[p.stage]))
        elif p.rule == DOT:
            _dot(s, config, p.prefix, p.stage, p.partner, sketch_dot_axes(sketch, sp.graph, p.stage))
        elif p.rule == TILE:
            _tile_root(s, config, p.prefix)
        elif p.rule == SIMPLE:
            _simple(s, config, p.stage, lead=_consumer_split(sp, sketch, config, p.stage))
        elif p.rule == RFACTOR:
            _rfactor_partial(s, config, p.stage, partials[p.stage])
            _simple(s, {hole(p.stage, "vec"): (1,), hole(p.stage, "par"): 0}, p.stage)
    return s


def _tiles(config: Mapping[str, Any], anchor: str, stage: Stage) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    spatial = [tuple(config[hole(anchor, f"tile_{a.name}")]) for a in stage.tensor.op.axes]
    reduce = [tuple(config[hole(anchor, f"tile_{r.name}")]) for r in stage.tensor.op.reduce_axes]
    return spatial, reduce


def _parallel(stage: Stage, loops: list[str]) -> str:
    if len(loops) > 1:
        fused = stage.fuse(*loops).name
    else:
        fused = loops[0]
    stage.parallel(fused)
    return fused


def _tile_local(s: Schedule, config: Mapping[str, Any], anchor: str, consumer: Stage, local: Stage,
                vector: str = "", pack: bool = False, panel: bool = False) -> None:
    """The consumer gets the two outer spatial levels; `local` is computed at one of them
    and tiled reduce-space-reduce-space inside (SSRSRS overall). With a `vector` axis,
    the local tile is laid out and vectorized along it, and the inputs read along it
    are packed with it last; with `pack`, the inputs read along the last axis elsewhere
    than in their last dimension are packed with it last; with `panel`, the outer level
    runs over blocks of the last axis first and each block's inputs read along it are
    copied there into a contiguous panel (`par` 1: the blocks in parallel, each panel
    read by every row tile; 2: blocks and rows fused in parallel, each panel read by the
    row tiles of one outer tile)."""
    if pack:
        _pack_along(s, local, local.op.axes[-1].name)
    copies = _panel_copies(s, local) if panel else []
    if vector:
        _pack_along(s, local, vector)
        local.reorder_storage(*[a.name for a in local.op.axes if a.name != vector], vector)
    spatial, _ = _tiles(config, anchor, local)
    par = config[hole(anchor, "par")]
    at = max(config[hole(anchor, "at")], par)
    c_axes = [a.name for a in consumer.tensor.op.axes]
    levels: list[list[str]] = [[], [], []]
    for name, (f1, f2, f3) in zip(c_axes, spatial):
        parts = consumer.split(name, factors=(f1, f2 * f3))
        for lv, loop in enumerate(parts):
            levels[lv].append(loop.name)
    if vector:  # the threads split the other axes: each reads a part of the broadcast input, all of the packed one
        kv = [a.name for a in local.op.axes].index(vector)  # the consumer reads the tile at its own index
        for lv in (0, 1):
            levels[lv].append(levels[lv].pop(kv))
    if panel:  # the blocks of the last axis outermost: a panel serves the row tiles inside
        levels[0].insert(0, levels[0].pop())
    consumer.reorder(*levels[0], *levels[1], *levels[2])
    if panel:
        if par == 2:
            levels[0] = [_parallel(consumer, levels[0])]
        elif par == 1:
            consumer.parallel(levels[0][0])
        attach = levels[at - 1][-1]
    elif par:
        fused = _parallel(consumer, levels[0] + (levels[1] if par == 2 else []))
        attach = fused if at == par else levels[1][-1]
    else:
        attach = levels[at - 1][-1]
    consumer.vectorize(levels[2][-1])
    local.compute_at(consumer, attach)
    for copy in copies:
        copy.compute_at(consumer, levels[0][0])
    inner = [t[2:] if at == 2 else t[1:] for t in spatial]
    _tile_inner(local, config, anchor, inner, outer_spatial=(at == 1), vector=vector)


def _window(s: Schedule, config: Mapping[str, Any], prefix: str, consumer: Stage, local: Stage,
            axes: tuple[str, str] | None) -> None:
    """A sliding-window reduction (depthwise convolution): the consumer's axes outside
    the window (batch, channels) fused and parallel, then blocks of rows and of the
    vectorized axis; `local`, a tile of rows x vectors, is computed in each block with the
    window's loops outside its rows and vectors, all unrolled but the vector loop."""
    assert axes is not None
    rows, vec = axes
    names = [a.name for a in local.op.axes]
    kv = names.index(vec)
    kr = names.index(rows) if rows else None
    c_axes = [a.name for a in consumer.tensor.op.axes]  # the consumer reads the tile at its own index
    outer = [c_axes[d] for d in range(len(c_axes)) if d not in (kr, kv)]
    blocks, inner = [], []
    if kr is not None:
        yo, yi = consumer.split(c_axes[kr], factors=tuple(config[hole(prefix, f"tile_{rows}")]))
        blocks.append(yo.name)
        inner.append(yi.name)
    xo, xi = consumer.split(c_axes[kv], factors=tuple(config[hole(prefix, f"tile_{vec}")]))
    consumer.reorder(*outer, *blocks, xo.name, *inner, xi.name)
    par = config[hole(prefix, "par")]
    parallel = outer + (blocks if par == 2 or not outer else []) if par else []
    if parallel:
        _parallel(consumer, parallel)
    consumer.vectorize(xi.name)
    local.compute_at(consumer, xo.name)
    l_outer = [names[d] for d in range(len(names)) if d not in (kr, kv)]
    window = [r.name for r in local.op.reduce_axes]
    l_rows = [names[kr]] if kr is not None else []
    local.reorder(*l_outer, *window, *l_rows, vec)
    local.vectorize(vec)
    copies = 1
    for loop in [*l_rows, *reversed(window)]:
        copies *= local.loop(loop).extent
        if copies > MAX_UNROLL:
            break
        if local.loop(loop).extent > 1:
            local.unroll(loop)


def _dot(s: Schedule, config: Mapping[str, Any], prefix: str, name: str, partner: str, axes: DotAxes) -> None:
    """Dot products along the contiguous reduction k: k split by `lanes` and rfactored into
    `<name>.rf[lane, ...]`, laid out lanes last; the output (the consumer `partner`, if
    any, else the reduction itself) splits its vector axis j into parallel blocks of
    `block` groups of `rows`, with the batch axes fused into the parallel loop; in each
    group the lane accumulators of its rows of W and every row of x are updated along
    the outer part of k (vectorized over the lanes, the rows unrolled) and then summed."""
    stage = s[name]
    k = stage.op.reduce_axes[0].name
    _, k_lane = stage.split(k, factors=(config[hole(prefix, "lanes")],))
    rf = s[s.rfactor(name, k_lane.name).name]
    rf_axes = [a.name for a in rf.op.axes]  # the lanes, then the original spatial axes
    rf.reorder_storage(*rf_axes[1:], rf_axes[0])
    out = s[partner] if partner else stage
    names = [a.name for a in out.op.axes]  # the consumer reads the reduction at its own index
    position = {a.name: d for d, a in enumerate(stage.op.axes)}
    batch = [names[position[a]] for a in axes.batch]
    rows = [names[position[a]] for a in axes.rows]
    outer, group, inner = out.split(names[position[axes.vector]],
                                    factors=(config[hole(prefix, "block")], config[hole(prefix, "rows")]))
    out.reorder(*batch, outer.name, group.name, *rows, inner.name, *[l.name for l in out.reduce_axis])
    parallel = outer.name
    if batch:
        parallel = out.fuse(*batch, outer.name).name
    if config[hole(prefix, "par")]:
        out.parallel(parallel)
    if partner:
        stage.compute_at(out, group.name)
    rf.compute_at(out, group.name)
    lane, *spatial, k_outer = [l.name for l in rf.loops]
    j = spatial[position[axes.vector]]
    others = [spatial[position[a]] for a in axes.rows + axes.batch]
    rf.reorder(k_outer, j, *others, lane)
    rf.vectorize(lane)
    for loop in [j, *others]:  # extents of one group once computed at it
        rf.unroll(loop)
    out.unroll(inner.name)
    if partner:
        stage.unroll(stage.loops[position[axes.vector]].name)


def _pack_along(s: Schedule, reader: Stage, vector: str) -> None:
    """Copy each tensor `reader` reads along axis `vector` (other than in its last
    dimension) into a buffer laid out with that dimension last, at the root: the copy's
    loops follow its layout (contiguous writes), the outer ones fused and parallel. When
    the source's own last dimension and the packed one are both long (a transposed
    matrix), the copy goes by PACK_BLOCK x PACK_BLOCK blocks, so that it reads whole
    cache lines of the source as it writes whole vectors of the copy."""
    axis = next(a for a in reader.op.axes if a.name == vector)
    for tensor, dim in packs(reader.op.body, axis):
        copy = s[s.cache_read(tensor.name, [reader.name])]
        names = [a.name for a in copy.op.axes]
        order = names[:dim] + names[dim + 1:] + [names[dim]]
        copy.reorder_storage(*order)
        last, packed = names[-1], names[dim]
        if min(tensor.shape[-1], tensor.shape[dim]) >= 2 * PACK_BLOCK:
            lo, li = copy.split(last, PACK_BLOCK)
            po, pi = copy.split(packed, PACK_BLOCK)
            outer = [n for n in order[:-1] if n != last]
            copy.reorder(*outer, lo.name, po.name, li.name, pi.name)
            _parallel(copy, outer + [lo.name])
            copy.vectorize(pi.name)
        else:
            copy.reorder(*order)
            _parallel(copy, order[:-1])


def _panel_copies(s: Schedule, reader: Stage) -> list[Stage]:
    """A copy of each input `reader` reads along its last axis (`panel_inputs`), laid out
    with that axis last; the caller computes it at a tile loop, where its region is one
    panel. The copy's loops follow its layout; a transposing copy goes by PACK_BLOCK x
    PACK_BLOCK blocks when both sides are long (each reads whole cache lines of the source
    as it writes whole vectors)."""
    axis = reader.op.axes[-1]
    out = []
    for tensor, dim in _panel_reads(reader, axis):
        copy = s[s.cache_read(tensor.name, [reader.name])]
        names = [a.name for a in copy.op.axes]
        order = names[:dim] + names[dim + 1:] + [names[dim]]
        if dim != len(names) - 1:
            copy.reorder_storage(*order)
        out.append((copy, names, order, dim, tensor))
    stages = []
    for copy, names, order, dim, tensor in out:
        last, packed = names[-1], names[dim]
        if dim != len(names) - 1 and min(tensor.shape[-1], tensor.shape[dim]) >= 2 * PACK_BLOCK:
            lo, li = copy.split(last, PACK_BLOCK)
            po, pi = copy.split(packed, PACK_BLOCK)
            outer = [n for n in order[:-1] if n != last]
            copy.reorder(*outer, lo.name, po.name, li.name, pi.name)
            copy.vectorize(pi.name)
        else:
            copy.reorder(*order)
            copy.vectorize(order[-1])
        stages.append(copy)
    return stages


def _panel_reads(reader: Stage, axis) -> list:
    """(tensor, dimension) of each tensor `reader`'s body reads with `axis` alone in a dimension."""
    body = reader.op.body
    source = body.source if isinstance(body, Reduce) else body
    out = []
    for r in reads(source):
        dims = [d for d, ix in enumerate(r.indices) if ix is axis or ix == axis]
        if dims and all(t is not r.tensor for t, _ in out):
            out.append((r.tensor, dims[0]))
    return out


def _tile_root(s: Schedule, config: Mapping[str, Any], anchor: str) -> None:
    stage = s[anchor]
    spatial, _ = _tiles(config, anchor, stage)
    par = config[hole(anchor, "par")]
    outer = _tile_inner(stage, config, anchor, spatial, outer_spatial=True)
    if par:
        _parallel(stage, outer[0] + (outer[1] if par == 2 else []))


def _tile_inner(stage: Stage, config: Mapping[str, Any], anchor: str, spatial: list[tuple[int, ...]],
                outer_spatial: bool, vector: str = "") -> list[list[str]]:
    """Split each spatial axis by `spatial` and each reduction axis in two, order the loops
    S..S R S R S (the last two spatial levels inside the reductions), vectorize the
    innermost (the last axis's, or `vector`'s moved last), unroll inner loops up to the
    unroll step. Returns the spatial levels."""
    _, reduce = _tiles(config, anchor, stage)
    op = stage.tensor.op
    n_levels = len(spatial[0]) + 1
    s_levels: list[list[str]] = [[] for _ in range(n_levels)]
    for a, factors in zip(op.axes, spatial):
        for lv, loop in enumerate(stage.split(a.name, factors=factors)):
            s_levels[lv].append(loop.name)
    r_levels: list[list[str]] = [[], []]
    for r, factors in zip(op.reduce_axes, reduce):
        for lv, loop in enumerate(stage.split(r.name, factors=factors)):
            r_levels[lv].append(loop.name)
    head = n_levels - 2 if outer_spatial else 0  # spatial levels before the first reduction level
    innermost = list(s_levels[-1])
    if vector:
        kv = [a.name for a in op.axes].index(vector)
        innermost = innermost[:kv] + innermost[kv + 1:] + [innermost[kv]]
    order = [x for lv in s_levels[:head] for x in lv]
    order += r_levels[0] + s_levels[head] + r_levels[1] + innermost
    stage.reorder(*order)
    stage.vectorize(innermost[-1])
    inner = r_levels[0] + s_levels[head] + r_levels[1] + innermost[:-1]
    _unroll(stage, inner, config[hole(anchor, "unroll")])
    return s_levels


def _unroll(stage: Stage, loops: list[str], max_step: int) -> None:
    """Unroll loops from the innermost outwards while the body copies (the loop's extent
    times those of every loop inside it) stay within `max_step`, as Ansor's
    auto_unroll_max_step does."""
    order = [l.name for l in stage.loops]
    for name in reversed(loops):
        pos = order.index(name)
        steps = 1
        for inner in order[pos:]:
            steps *= stage.loop(inner).extent
        if steps > max_step:
            break
        if stage.loop(name).extent > 1:
            stage.unroll(name)


def parallel_order(sketch: Sketch, stage: StageInfo) -> list[str]:
    """The spatial axes of a tiled stage in the order its parallel loop fuses them."""
    names = [a.name for a in stage.spatial]
    vector = sketch.plan(stage.name).vector
    return [n for n in names if n != vector] + ([vector] if vector else [])


def _consumer_split(sp: SketchSpace, sketch: Sketch, config: Mapping[str, Any], name: str) -> str:
    """The axis of stage `name` (computed at the root) along which its one consumer's
    parallel loop divides the work among threads: the first axis of that loop with more
    than one outer tile, as the producer reads it (alone in one of its dimensions).
    Computing the producer in parallel along the same axis, each thread writes what it
    then reads. "" when there is none, or when the producer's last axis (vectorized) is it."""
    g = sp.graph
    consumers = g[name].consumers
    if len(consumers) != 1 or not config.get(hole(name, "par")):
        return ""
    plan = sketch.plan(consumers[0])
    if plan.rule not in (TILE, TILE_LOCAL, CACHE_WRITE):
        return ""
    c = g[consumers[0]]
    extents = {a.name: a for a in c.spatial}
    split = next((a for a in parallel_order(sketch, c)
                  if extents[a].extent // math.prod(config[hole(plan.prefix, f"tile_{a}")]) > 1), None)
    if split is None:
        return ""
    body = c.tensor.op.body
    source = body.source if isinstance(body, Reduce) else body
    dims = {d for r in reads(source) if r.tensor.name == name for d, ix in enumerate(r.indices)
            if any(v is extents[split] or v == extents[split] for v in walk(ix))}
    axes = g[name].spatial
    if len(dims) != 1 or (d := dims.pop()) == len(axes) - 1:
        return ""
    return axes[d].name


def _simple(s: Schedule, config: Mapping[str, Any], name: str, lead: str = "") -> None:
    """Outer axes fused and parallel (`par` of them; `lead` first, if given), the last one
    split and vectorized."""
    stage = s[name]
    op = stage.tensor.op
    if not op.axes:
        return
    axes = [a.name for a in op.axes]
    vec = config[hole(name, "vec")][0]
    reduce = [r.name for r in op.reduce_axes]
    outer = axes[:-1]
    if lead in outer:
        outer = [lead] + [a for a in outer if a != lead]
    inner: list[str] = []
    if vec > 1:
        o, i = stage.split(axes[-1], factors=(vec,))
        outer.append(o.name)
        inner.append(i.name)
    else:
        outer.append(axes[-1])
    if lead in outer:
        stage.reorder(*outer, *reduce, *inner)
    elif inner and reduce:
        stage.reorder(*outer, *reduce, *inner)
    if inner:
        stage.vectorize(inner[0])
    par = min(config[hole(name, "par")], len(outer))
    if par:
        _parallel(stage, outer[:par])
    if reduce and hole(name, "unroll") in config and not inner:
        _unroll(stage, reduce, config[hole(name, "unroll")])


def _rfactor_partial(s: Schedule, config: Mapping[str, Any], anchor: str, partial: str) -> None:
    """The partial reduction `partial[f, spatial...]`: f split into a parallel outer part
    and a vectorized inner part that accumulates across the long reduction."""
    stage = s[partial]
    op = stage.tensor.op
    f = op.axes[0].name
    vec = config[hole(anchor, "rfvec")]
    rest = [a.name for a in op.axes[1:]]
    reduce = [r.name for r in op.reduce_axes]
    if vec > 1 and op.axes[0].extent > vec:
        fo, fi = stage.split(f, factors=(vec,))
        stage.reorder(fo.name, *rest, *reduce, fi.name)
        stage.parallel(fo.name)
        stage.vectorize(fi.name)
    else:
        stage.parallel(f)
        _unroll(stage, reduce, config[hole(anchor, "unroll")])
