"""Register-tile seeds: a few annotations from what the CPU is known to need, measured first.

A tiled reduction runs fastest when its innermost tile is a block of accumulators that
fits the vector registers (here 32 registers of 16 float32 lanes) and stays in them for
the whole reduction: a few rows of the second-to-last spatial axis times one to four
vectors of the contiguous axis, with no tile level between them and the reduction loop.
A sketch vectorized along another axis (`vector`) gets one to four vectors of that axis
times rows of the axis its packed operand does not depend on (a conv's 32 filters times
14 columns), with the rows unrolled.
A `dot` sketch (a matrix-vector product) gets a few rows of W times one or two vectors
of lanes (DOT_SHAPES), in parallel and serially: it is seeded before every other
sketch. Panel sketches come next, the plain tiling last.
The search starts from a handful of such annotations of every tiled sketch (the rest of
each configuration is drawn at random), then evolves as usual; they are ordinary
candidates, measured and checked like any other.

Example:
    >>> from tensortune.te import workloads
    >>> from tensortune.autoschedule.holes import SketchSpace
    >>> sp = SketchSpace.of(workloads.matmul(256, 256, 256).outputs)
    >>> [(c["sketch"], c["C_tile_i"], c["C_tile_j"]) for c in register_tile_seeds(sp)][:3]
    [('C:cache_write(panel)', (1, 1, 6), (1, 1, 64)), ('C:cache_write', (1, 1, 6), (1, 1, 64)), ('C:tile', (1, 1, 6), (1, 1, 64))]
"""

from __future__ import annotations

import numpy as np

from ..space import Config
from ..te.expr import IterVar
from ..te.visit import reads, walk
from .holes import SketchSpace, hole
from .sketch import DOT, TILE, WINDOW, lanes, window_axes

SHAPES = ((6, 64), (12, 32), (8, 32), (4, 64), (14, 32), (16, 16))  # (rows, vector elements): 16-28 registers
VECTOR_AXIS_SHAPES = ((14, 32), (12, 32), (7, 64), (8, 32), (6, 64), (16, 16))
WINDOW_ROWS = (4, 2, 7, 8)  # rows of a window sketch's tile (each loaded vector feeds up to R of them)
MAX_SEEDS = 12
DOT_SHAPES = ((8, 1), (4, 1), (4, 2), (16, 1), (2, 2), (1, 1))  # (rows of W, vectors of lanes)
MAX_DOT_SEEDS = 6
LANES = 16  # float32 lanes of this machine's vectors (64 bytes, AVX-512)


def register_tile_seeds(sp: SketchSpace, rng: np.random.Generator | None = None) -> list[Config]:
    base = {p.name: p.values[0] for p in sp.space.params}
    out = dot_seeds(sp, base) + window_seeds(sp, base)
    # panels first, then the other local tiles, the plain tiling last
    local_first = sorted(sp.sketches.items(), key=lambda kv: (any(p.rule == TILE for p in kv[1].plans),
                                                              not any(p.panel for p in kv[1].plans)))
    shapes = _shapes(sp)
    for n in range(max(len(shapes), len(VECTOR_AXIS_SHAPES))):
        for key, sketch in local_first:
            anchors = sketch.anchors()
            if not anchors or (n > 0 and any(p.rule == TILE for p in sketch.plans)):
                continue
            options = VECTOR_AXIS_SHAPES if any(a.vector for a in anchors) else shapes
            if n >= len(options):
                continue
            shape = options[n]
            values = dict(base, sketch=key)
            for h in sp.holes[key]:
                if h.name.endswith("_vec"):
                    friendly = [v for v in h.values if v[0] in (16, 32, 64)] or list(h.values)
                    values[h.name] = friendly[min(1, len(friendly) - 1)]
                elif h.name.endswith("_par") and not any(h.name == hole(a.prefix, "par") for a in anchors):
                    values[h.name] = 1 if 1 in h.values else h.values[0]
            if not all(_fill_anchor(sp, values, a, shape) for a in anchors):
                continue
            cfg = sp.canonical(Config(values))
            if sp.space.is_valid(cfg) and cfg not in out:
                out.append(cfg)
            if len(out) >= MAX_SEEDS:
                return out
    return out


def dot_seeds(sp: SketchSpace, base: dict) -> list[Config]:
    """Dot sketches with DOT_SHAPES (those whose accumulators fit), each in parallel then
    serially (a small product may not pay for waking a second thread), one block per
    parallel iteration."""
    out: list[Config] = []
    for rows, vectors in DOT_SHAPES:
        for par in (1, 0):
            for key, sketch in sp.sketches.items():
                plans = [p for p in sketch.plans if p.rule == DOT]
                if not plans:
                    continue
                values = dict(base, sketch=key)
                for h in sp.holes[key]:
                    if h.name.endswith("_par"):
                        values[h.name] = 1 if 1 in h.values else h.values[0]
                for p in plans:
                    width = vectors * lanes(sp.graph[p.stage].tensor.dtype)
                    values[hole(p.prefix, "rows")] = rows
                    values[hole(p.prefix, "lanes")] = width
                    values[hole(p.prefix, "block")] = 1
                    values[hole(p.prefix, "par")] = par
                cfg = sp.canonical(Config(values))
                if sp.space.is_valid(cfg) and cfg not in out:
                    out.append(cfg)
    return out[:MAX_DOT_SEEDS]


def window_seeds(sp: SketchSpace, base: dict) -> list[Config]:
    """Window sketches with a few rows (WINDOW_ROWS) of the whole vectorized axis when it
    is at most 64 wide (56 columns), else 64 of it, the outer axes in parallel."""
    out: list[Config] = []
    for rows in WINDOW_ROWS:
        for key, sketch in sp.sketches.items():
            plans = [p for p in sketch.plans if p.rule == WINDOW]
            if not plans:
                continue
            values = dict(base, sketch=key)
            for h in sp.holes[key]:
                if h.name.endswith("_par"):
                    values[h.name] = 1 if 1 in h.values else h.values[0]
            for p in plans:
                row_axis, vec = window_axes(sp.graph[p.stage])  # type: ignore[misc]
                width = {a.name: a.extent for a in sp.graph[p.stage].spatial}[vec]
                options = sp.space.params[sp.space.names.index(hole(p.prefix, f"tile_{vec}"))].values
                values[hole(p.prefix, f"tile_{vec}")] = min(options, key=lambda t: abs(t[0] - min(width, 64)))
                if row_axis:
                    options = sp.space.params[sp.space.names.index(hole(p.prefix, f"tile_{row_axis}"))].values
                    values[hole(p.prefix, f"tile_{row_axis}")] = min(options, key=lambda t: abs(t[0] - rows))
            cfg = sp.canonical(Config(values))
            if sp.space.is_valid(cfg) and cfg not in out:
                out.append(cfg)
    return out[:MAX_SEEDS // 2]


def _shapes(sp: SketchSpace) -> list[tuple[int, int]]:
    """SHAPES, after six and four rows of the whole contiguous axis when it is short (56 wide)."""
    shapes = list(SHAPES)
    lasts = {sp.graph[p.stage].spatial[-1].extent for s in sp.sketches.values() for p in s.anchors()}
    shapes[:0] = [(rows, e) for e in sorted(lasts) if e <= 64 and e not in (16, 32, 64) for rows in (6, 4)]
    return shapes


def row_axis(stage, vector: str = "") -> int | None:
    """The spatial axis (not the vectorized one: the last, or `vector`) that the operands
    read along the vectorized axis do not depend on, the largest (then the innermost) if
    several: its rows share each loaded vector."""
    spatial = list(stage.spatial)
    kv = [a.name for a in spatial].index(vector) if vector else len(spatial) - 1
    vec = spatial[kv]
    if vector:
        along = [r for r in reads(stage.tensor.op.body) if any(v is vec or v == vec for ix in r.indices for v in walk(ix))]
    else:
        along = [r for r in reads(stage.tensor.op.body)
                 if r.indices and any(v is vec or v == vec for v in walk(r.indices[-1]))]
    used = {v for r in along for ix in r.indices for v in walk(ix) if isinstance(v, IterVar)}
    others = [k for k in range(len(spatial)) if k != kv and spatial[k].extent > 1]
    options = [k for k in others if spatial[k] not in used] or others
    return max(options, key=lambda k: (spatial[k].extent, k)) if options else None


def _fill_anchor(sp: SketchSpace, values: dict, plan, shape: tuple[int, int]) -> bool:
    s = sp.graph[plan.stage]
    prefix = plan.prefix
    rows, vec = shape
    spatial = list(s.spatial)
    kv = [a.name for a in spatial].index(plan.vector) if plan.vector else len(spatial) - 1
    rows_at = row_axis(s, plan.vector)
    for k, a in enumerate(spatial):
        name = hole(prefix, f"tile_{a.name}")
        options = sp.space.params[sp.space.names.index(name)].values
        want = vec if k == kv else rows if k == rows_at else 1
        pick = _closest(options, want, a.extent, whole_vectors=(k == kv))
        if pick is None:
            return False
        values[name] = pick
    for r in s.reduce:
        name = hole(prefix, f"tile_{r.name}")
        options = sp.space.params[sp.space.names.index(name)].values
        values[name] = (r.extent,) if r.extent <= 4 and (r.extent,) in options else options[0]
    values[hole(prefix, "par")] = 1
    # GCC unrolls and vectorizes a nest over the last axis well by itself (measured); the
    # rows of a tile vectorized along another axis must be unrolled for it to keep the
    # loaded vectors in registers (measured: 2 FMAs with memory operands per row otherwise)
    values[hole(prefix, "unroll")] = 512 if plan.vector else 0
    if hole(prefix, "at") in values:
        values[hole(prefix, "at")] = 2
    return True


def _closest(options, want: int, extent: int, whole_vectors: bool):
    """(1, 1, f) with f the option nearest `want`; for the vectorized axis a whole number
    of vectors (or the whole axis) is preferred: a tile that does not divide the axis
    leaves one tail tile, cut off with constant extents by te's partitioning, while a
    tile of a partial vector (43 of 688 columns) has a partial vector in every tile."""
    plain = [t for t in options if t[:-1] == (1,) * (len(t) - 1)]
    if not plain:
        return None
    return min(plain, key=lambda t: (whole_vectors and t[-1] % LANES != 0 and t[-1] != extent,
                                     abs(t[-1] - want)))
