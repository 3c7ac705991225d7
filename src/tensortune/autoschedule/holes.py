"""The holes of sketches as one search space, and the canonical form of a point in it.

Every sketch of a graph shares one `Space`: a `sketch` parameter picks the structure,
and each hole is a parameter named after the stage it belongs to, shared by the sketches
that have it (so the cache-write and plain tilings of a matmul share their tile sizes).
A configuration's canonical form resets the parameters its sketch does not use, so two
configurations that build the same program are recognised as one.

Example:
    >>> from tensortune.te import workloads
    >>> sp = SketchSpace.of(workloads.matmul(64, 64, 64).outputs)
    >>> [p.name for p in sp.space.params]
    ['sketch', 'C_tile_i', 'C_tile_j', 'C_tile_k', 'C_par', 'C_unroll', 'C_at']
    >>> cfg = sp.space.config(sketch="C:tile", C_tile_i=(2, 4, 8), C_tile_j=(1, 4, 16), C_tile_k=(4,),
    ...                       C_par=2, C_unroll=16, C_at=2)
    >>> sp.canonical(cfg)["C_at"]
    1
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..space import Categorical, Config, Space
from ..space.constraints import Constraint
from ..te.tensor import Tensor
from .analysis import GraphInfo, StageInfo, analyze
from .sketch import (CACHE_WRITE, DOT, RFACTOR, SIMPLE, TILE, TILE_LOCAL, WINDOW, DotAxes, Sketch,
                     generate_sketches, lanes, sketch_dot_axes, window_axes)
from .tiles import tile_options

UNROLL_STEPS = (0, 16, 64, 512)
RFACTOR_FACTORS = (16, 32, 64, 128, 256, 512)
MAX_VECTOR = 64  # innermost spatial tile of the contiguous axis
MAX_REGISTER_ROWS = 16  # innermost tile of the other spatial axes
MAX_WINDOW_ROWS = 8  # rows of a window rule's local tile
VECTOR_ALIGN = 8  # the innermost tile of the contiguous axis is a multiple of this, or the whole axis
MAX_REGISTER_TILE = 512  # elements of the innermost (register) tile: 32 vectors of 16 floats
MAX_LOCAL_TILE = 32768  # elements of the two innermost tile levels (128 KiB of float32)
DOT_ROWS = (1, 2, 4, 6, 8, 12, 16)  # rows of the big operand a dot block updates together
DOT_VECTORS = (1, 2, 4)  # vectors of lanes each output accumulates along the reduction
DOT_BLOCKS = (1, 2, 4, 8)  # groups of rows per iteration of the parallel loop
SERIAL_MAX_WORK = 10_000_000  # flops (or elements) up to which a stage may run serially


def ident(text: str) -> str:
    out = re.sub(r"\W", "_", text)
    return out if out and not out[0].isdigit() else f"t_{out}"


def hole(stage: str, what: str) -> str:
    return f"{ident(stage)}_{what}"


@dataclass(frozen=True)
class Hole:
    name: str
    values: tuple[Any, ...]


def sketch_holes(sketch: Sketch, g: GraphInfo) -> list[Hole]:
    """The holes one sketch needs filled, in a stable order."""
    out: list[Hole] = []
    for p in sketch.plans:
        s = g[p.stage]
        if p.rule in (TILE, TILE_LOCAL, CACHE_WRITE):
            out += _tile_holes(s, p.prefix, p.vector)
            if p.rule != TILE:
                out.append(Hole(hole(p.prefix, "at"), (1, 2)))
        elif p.rule == WINDOW:
            out += _window_holes(s, p.prefix)
        elif p.rule == DOT:
            out += _dot_holes(s, p.prefix, sketch_dot_axes(sketch, g, p.stage))
        elif p.rule == SIMPLE:
            out += _simple_holes(s)
        elif p.rule == RFACTOR:
            r = s.reduce[0].extent
            factors = tuple(f for f in RFACTOR_FACTORS if f * 2 <= r) or (min(16, r),)
            out += [Hole(hole(s.name, "rf"), factors), Hole(hole(s.name, "rfvec"), (1, 8, 16)),
                    Hole(hole(s.name, "unroll"), UNROLL_STEPS)]
    return out


def small(s: StageInfo) -> bool:
    """Work small enough that serial code may win (a few microseconds)."""
    return max(s.flops, s.spatial_size) <= SERIAL_MAX_WORK


def vector_friendly(extent: int, inner: int) -> bool:
    """An innermost tile of the contiguous axis that fills whole vectors (or is the axis)."""
    return inner % VECTOR_ALIGN == 0 or inner == extent or inner > 2 * VECTOR_ALIGN


def _tile_holes(s: StageInfo, prefix: str, vector: str = "") -> list[Hole]:
    """Tile sizes (named after `prefix`): the vectorized axis (the last, or `vector`)
    fills whole vectors, the others are register rows."""
    out = []
    vec_axis = vector or s.spatial[-1].name
    for a in s.spatial:
        if a.name == vec_axis:
            options = [t for t in tile_options(a.extent, 4, MAX_VECTOR, tails=True) if vector_friendly(a.extent, t[-1])]
        else:
            options = tile_options(a.extent, 4, MAX_REGISTER_ROWS, tails=True)
        out.append(Hole(hole(prefix, f"tile_{a.name}"), tuple(options)))
    for r in s.reduce:
        out.append(Hole(hole(prefix, f"tile_{r.name}"), tuple(tile_options(r.extent, 2))))
    # spatial levels fused into the parallel loop; serial code only for small work, where
    # starting threads costs more than it saves (on a busy machine serial code also dodges
    # waiting for a descheduled thread, which must not make the search pick it for big work)
    out.append(Hole(hole(prefix, "par"), (1, 2, 0) if small(s) else (1, 2)))
    out.append(Hole(hole(prefix, "unroll"), UNROLL_STEPS))
    return out


def _window_holes(s: StageInfo, prefix: str) -> list[Hole]:
    """Rows of the local tile (up to MAX_WINDOW_ROWS), its width along the vectorized axis
    (whole vectors or the whole axis), and how many outer levels run in parallel (1: the
    axes outside the window, as batch and channels; 2: also the blocks of rows)."""
    rows, vec = window_axes(s)  # type: ignore[misc]
    extent = {a.name: a.extent for a in s.spatial}
    out = []
    if rows:
        out.append(Hole(hole(prefix, f"tile_{rows}"), tuple(tile_options(extent[rows], 2, MAX_WINDOW_ROWS, tails=True))))
    widths = [t for t in tile_options(extent[vec], 2, MAX_VECTOR, tails=True) if vector_friendly(extent[vec], t[0])]
    out.append(Hole(hole(prefix, f"tile_{vec}"), tuple(widths)))
    out.append(Hole(hole(prefix, "par"), (1, 2, 0) if small(s) else (1, 2)))
    return out


def _dot_holes(s: StageInfo, prefix: str, axes: DotAxes) -> list[Hole]:
    """Rows of the big operand per block (`rows`), lanes each output accumulates along the
    reduction (`lanes`: whole vectors, at most half the reduction), row groups per
    parallel iteration (`block`), and whether the blocks run in parallel (`par`)."""
    extent = {a.name: a.extent for a in s.spatial}
    n, k = extent[axes.vector], s.reduce[0].extent
    width = lanes(s.tensor.dtype)
    rows = tuple(r for r in DOT_ROWS if r <= n) or (1,)
    vectors = tuple(v * width for v in DOT_VECTORS if v * width * 2 <= k) or (width,)
    blocks = tuple(b for b in DOT_BLOCKS if b == 1 or b * rows[0] < n)
    return [Hole(hole(prefix, "rows"), rows), Hole(hole(prefix, "lanes"), vectors),
            Hole(hole(prefix, "block"), blocks), Hole(hole(prefix, "par"), (1, 0) if small(s) else (1,))]


def _simple_holes(s: StageInfo) -> list[Hole]:
    if not s.spatial:
        return []
    last = s.spatial[-1].extent
    vec = [t for t in tile_options(last, 2, MAX_VECTOR, tails=True) if t[0] == 1 or vector_friendly(last, t[0])]
    out = [Hole(hole(s.name, "vec"), tuple(vec)),
           Hole(hole(s.name, "par"), tuple(range(0 if small(s) else 1, len(s.spatial) + 1)))]
    if s.reduce:
        out.append(Hole(hole(s.name, "unroll"), UNROLL_STEPS))
    return out


def tile_constraints(g: GraphInfo, sketches: list[Sketch]) -> list[Constraint]:
    """Per tiled stage: the register tile and the two innermost levels stay small enough to
    live in registers and in the L1/L2 caches; per dot stage, the accumulators (rows of x
    times rows of W times lanes) fit the registers."""
    out = []
    shared_rows: dict[tuple[str, str], int] = {}
    for sketch in sketches:
        for p in sketch.plans:
            if p.rule == DOT:
                rows = sketch_dot_axes(sketch, g, p.stage).rows
                size = math.prod(a.extent for a in g[p.stage].spatial if a.name in rows)
                shared_rows[p.prefix, p.stage] = max(size, shared_rows.get((p.prefix, p.stage), 1))
    for (prefix, name), shared in sorted(shared_rows.items()):
        names = (hole(prefix, "rows"), hole(prefix, "lanes"))

        def fits_dot(values, names=names, shared=shared) -> bool:
            return shared * values[names[0]] * values[names[1]] <= MAX_REGISTER_TILE

        out.append(Constraint(frozenset(names), f"{prefix}: accumulators <= {MAX_REGISTER_TILE} elements", fits_dot))
    for prefix, name in sorted({(p.prefix, p.stage) for s in sketches for p in s.anchors()}):
        names = [hole(prefix, f"tile_{a.name}") for a in g[name].spatial]

        def fits(values, names=tuple(names)) -> bool:
            register = local = 1
            for n in names:
                t = values[n]
                register *= t[-1]
                local *= t[-1] * t[-2]
            return register <= MAX_REGISTER_TILE and local <= MAX_LOCAL_TILE

        out.append(Constraint(frozenset(names), f"{prefix}: register tile <= {MAX_REGISTER_TILE} and local tile <= "
                              f"{MAX_LOCAL_TILE} elements", fits))
    return out


class SketchSpace:
    """The sketches of a graph, the space of their holes, and canonical configurations."""

    def __init__(self, outputs: list[Tensor], graph: GraphInfo, sketches: list[Sketch]) -> None:
        if not sketches:
            raise ValueError("no sketch for this graph")
        self.outputs = outputs
        self.graph = graph
        self.sketches = {s.key: s for s in sketches}
        self.holes = {s.key: sketch_holes(s, graph) for s in sketches}
        params: dict[str, tuple[Any, ...]] = {}
        for holes in self.holes.values():
            for h in holes:
                if h.name in params and params[h.name] != h.values:
                    raise ValueError(f"hole {h.name!r} has different values in two sketches")
                params[h.name] = h.values
        self.space = Space([Categorical("sketch", list(self.sketches))]
                           + [Categorical(n, list(v)) for n, v in params.items()],
                           constraints=tile_constraints(graph, sketches))
        self._defaults = {n: v[0] for n, v in params.items()}

    @staticmethod
    def of(outputs: Tensor | Iterable[Tensor]) -> SketchSpace:
        outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
        g = analyze(outs)
        return SketchSpace(outs, g, generate_sketches(outs, g))

    def sketch(self, config: Mapping[str, Any]) -> Sketch:
        key = config["sketch"]
        if key not in self.sketches:
            raise ValueError(f"unknown sketch {key!r}; this graph has {', '.join(self.sketches)}")
        return self.sketches[key]

    def used(self, config: Mapping[str, Any]) -> set[str]:
        return {h.name for h in self.holes[self.sketch(config).key]}

    def canonical(self, config: Mapping[str, Any]) -> Config:
        """The same program's configuration with unused holes reset and the compute
        location no shallower than the parallel loop it would have to sit in."""
        used = self.used(config)
        values = {"sketch": config["sketch"]}
        for name, default in self._defaults.items():
            values[name] = config[name] if name in used else default
        for p in self.sketch(config).plans:
            at, par = hole(p.prefix, "at"), hole(p.prefix, "par")
            if at in used and values[at] < values[par]:
                values[at] = values[par]
        return Config(values)
