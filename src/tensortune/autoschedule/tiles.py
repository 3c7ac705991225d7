"""Tile sizes: the split factors of one loop into several levels.

A tiling of a loop of extent E into L levels is the tuple of the L - 1 inner extents
(the outermost level takes whatever is left, rounded up). Candidates are every tuple of
divisors whose product divides E, as Ansor samples them, plus a few tuples whose
innermost factor does not divide E (the split leaves a guarded tail), so extents such
as 56 can still get a full vector. Mutation moves a prime factor of E from one level
to another, which keeps the product and therefore the loop's coverage.

Example:
    >>> tile_options(8, levels=3)
    [(1, 1), (1, 2), (1, 4), (1, 8), (2, 1), (2, 2), (2, 4), (4, 1), (4, 2), (8, 1)]
    >>> outer_extent(56, (2, 16))
    2
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

Tile = tuple[int, ...]

TAIL_INNER = (6, 12, 16, 32, 48, 64)  # innermost factors tried even when they leave a tail
TAIL_FRONT = (1, 2, 4)  # with these factors on the level just outside them


@lru_cache(maxsize=None)
def divisors(n: int) -> tuple[int, ...]:
    return tuple(d for d in range(1, n + 1) if n % d == 0)


@lru_cache(maxsize=None)
def prime_factors(n: int) -> tuple[int, ...]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return tuple(out)


def outer_extent(extent: int, tile: Sequence[int]) -> int:
    return -(-extent // math.prod(tile))


@lru_cache(maxsize=None)
def tile_options(extent: int, levels: int, max_inner: int | None = None, tails: bool = False) -> list[Tile]:
    """Candidate inner-extent tuples for splitting `extent` into `levels` loops.

    `max_inner` bounds the innermost factor; `tails` adds tuples with a non-dividing
    innermost factor."""
    if levels < 2:
        return [()]
    inner = levels - 1
    out: list[Tile] = []

    def go(prefix: Tile, left: int) -> None:
        if len(prefix) == inner:
            out.append(prefix)
            return
        for d in divisors(left):
            go(prefix + (d,), left // d)

    go((), extent)
    if max_inner is not None:
        out = [t for t in out if t[-1] <= max_inner]
    if tails:
        for v in TAIL_INNER:
            if v >= extent or extent % v == 0 or (max_inner is not None and v > max_inner):
                continue
            fronts = TAIL_FRONT if inner > 1 else (1,)
            for front in fronts:
                t = (1,) * (inner - 2) + (front, v) if inner > 1 else (v,)
                if math.prod(t) <= extent:
                    out.append(t)
    return sorted(set(out))


def move_factor(tile: Tile, extent: int, rng: np.random.Generator) -> Tile | None:
    """`tile` with one prime factor moved between two levels (the outermost included);
    None when the tile has a tail or nothing can move."""
    levels = (outer_extent(extent, tile),) + tuple(tile)
    if math.prod(levels) != extent:
        return None
    sources = [k for k, x in enumerate(levels) if x > 1]
    if not sources:
        return None
    src = int(rng.choice(sources))
    p = int(rng.choice(prime_factors(levels[src])))
    dst_options = [k for k in range(len(levels)) if k != src]
    if not dst_options:
        return None
    dst = int(rng.choice(dst_options))
    new = list(levels)
    new[src] //= p
    new[dst] *= p
    return tuple(new[1:])
