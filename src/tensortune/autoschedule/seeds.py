"""Register-tile seeds: a few annotations from what the CPU is known to need, measured first.

A tiled reduction runs fastest when its innermost tile is a block of accumulators that
fits the vector registers (here 32 registers of 16 float32 lanes) and stays in them for
the whole reduction: a few rows of the second-to-last spatial axis times one to four
vectors of the contiguous axis, with no tile level between them and the reduction loop.
The search starts from a handful of such annotations of every tiled sketch (the rest of
each configuration is drawn at random), then evolves as usual; they are ordinary
candidates, measured and checked like any other.

Example:
    >>> from tensortune.te import workloads
    >>> from tensortune.autoschedule.holes import SketchSpace
    >>> sp = SketchSpace.of(workloads.matmul(256, 256, 256).outputs)
    >>> [(c["sketch"], c["C_tile_i"], c["C_tile_j"]) for c in register_tile_seeds(sp)][:3]
    [('C:cache_write', (1, 1, 6), (1, 1, 64)), ('C:tile', (1, 1, 6), (1, 1, 64)), ('C:cache_write', (1, 1, 12), (1, 1, 32))]
"""

from __future__ import annotations

import numpy as np

from ..space import Config
from ..te.expr import IterVar
from ..te.visit import reads, walk
from .holes import SketchSpace, hole
from .sketch import TILE

SHAPES = ((6, 64), (12, 32), (8, 32), (4, 64), (14, 32), (16, 16))  # (rows, vector elements): 16-28 registers
MAX_SEEDS = 8


def register_tile_seeds(sp: SketchSpace, rng: np.random.Generator | None = None) -> list[Config]:
    base = {p.name: p.values[0] for p in sp.space.params}
    local_first = sorted(sp.sketches.items(), key=lambda kv: any(p.rule == TILE for p in kv[1].plans))
    out: list[Config] = []
    for n, shape in enumerate(_shapes(sp)):
        for key, sketch in local_first:
            anchors = sketch.anchors()
            if not anchors or (n > 0 and any(p.rule == TILE for p in sketch.plans)):
                continue
            values = dict(base, sketch=key)
            for h in sp.holes[key]:
                if h.name.endswith("_vec"):
                    friendly = [v for v in h.values if v[0] in (16, 32, 64)] or list(h.values)
                    values[h.name] = friendly[min(1, len(friendly) - 1)]
                elif h.name.endswith("_par") and not any(h.name == hole(a.stage, "par") for a in anchors):
                    values[h.name] = 1 if 1 in h.values else h.values[0]
            if not all(_fill_anchor(sp, values, a.stage, shape) for a in anchors):
                continue
            cfg = sp.canonical(Config(values))
            if sp.space.is_valid(cfg) and cfg not in out:
                out.append(cfg)
            if len(out) >= MAX_SEEDS:
                return out
    return out


def _shapes(sp: SketchSpace) -> list[tuple[int, int]]:
    """SHAPES, after six and four rows of the whole contiguous axis when it is short (56 wide)."""
    shapes = list(SHAPES)
    lasts = {sp.graph[p.stage].spatial[-1].extent for s in sp.sketches.values() for p in s.anchors()}
    shapes[:0] = [(rows, e) for e in sorted(lasts) if e <= 64 and e not in (16, 32, 64) for rows in (6, 4)]
    return shapes


def row_axis(stage) -> int | None:
    """The spatial axis (not the contiguous one) that the contiguous operand does not
    depend on, the largest if several: its rows share each loaded vector."""
    spatial = list(stage.spatial)
    last = spatial[-1]
    contiguous = [r for r in reads(stage.tensor.op.body)
                  if r.indices and any(v is last or v == last for v in walk(r.indices[-1]))]
    used = {v for r in contiguous for ix in r.indices for v in walk(ix) if isinstance(v, IterVar)}
    options = [k for k, a in enumerate(spatial[:-1]) if a.extent > 1 and a not in used]
    if not options:
        options = [k for k, a in enumerate(spatial[:-1]) if a.extent > 1]
    return max(options, key=lambda k: spatial[k].extent) if options else None


def _fill_anchor(sp: SketchSpace, values: dict, stage: str, shape: tuple[int, int]) -> bool:
    s = sp.graph[stage]
    rows, vec = shape
    spatial = list(s.spatial)
    rows_at = row_axis(s)
    for k, a in enumerate(spatial):
        name = hole(stage, f"tile_{a.name}")
        options = sp.space.params[sp.space.names.index(name)].values
        want = vec if k == len(spatial) - 1 else rows if k == rows_at else 1
        pick = _closest(options, want, a.extent, divisors_first=(k == len(spatial) - 1))
        if pick is None:
            return False
        values[name] = pick
    for r in s.reduce:
        name = hole(stage, f"tile_{r.name}")
        options = sp.space.params[sp.space.names.index(name)].values
        values[name] = (r.extent,) if r.extent <= 4 and (r.extent,) in options else options[0]
    values[hole(stage, "par")] = 1
    values[hole(stage, "unroll")] = 0  # GCC unrolls and vectorizes such a nest well by itself (measured)
    if hole(stage, "at") in values:
        values[hole(stage, "at")] = 2
    return True


def _closest(options, want: int, extent: int, divisors_first: bool):
    """(1, 1, f) with f the option nearest `want`; for the vectorized axis a divisor of
    the extent is preferred (a tail inside the vector loop is slow, a tail of rows is not)."""
    plain = [t for t in options if t[:-1] == (1,) * (len(t) - 1)]
    if not plain:
        return None
    return min(plain, key=lambda t: (divisors_first and extent % t[-1] != 0, abs(t[-1] - want)))
