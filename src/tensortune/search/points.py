"""Moves in a space, on choice-index points: random draws, mutation, crossover, neighbours.

Strategies search over points (one choice index per parameter) rather than
configurations: points are cheap tuples, and validity is checked once per point and
remembered. Mutation and crossover retry a few times to land on a valid point, so
spaces with invalid regions are handled; when a space's valid points are too sparse for
that, callers fall back to uniform draws, which the space makes exactly.

Example:
    >>> import numpy as np
    >>> from tensortune.space import Space
    >>> ops = PointOps(Space({"a": [1, 2, 4, 8], "b": [1, 2]}, ["a * b <= 8"]), np.random.default_rng(0))
    >>> p = ops.random(1)[0]
    >>> ops.valid(ops.mutate(p) or p)
    True
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from ..space import Categorical, Config, Space, SpaceError

Point = tuple[int, ...]

MAX_SWITCH_COMBINATIONS = 64  # more two-valued parameters than this: too many corners to tell apart


class PointOps:
    """The moves strategies make; remembers which points are valid."""

    def __init__(self, space: Space, rng: np.random.Generator, tries: int = 16) -> None:
        self.space = space
        self.rng = rng
        self.tries = tries
        self.sizes = [len(p) for p in space.params]
        self.free = [k for k, n in enumerate(self.sizes) if n > 1]  # parameters that can change
        self._valid: dict[Point, bool] = {}
        self._sizes_arr = np.asarray(self.sizes, dtype=np.int64)
        self._free_arr = np.asarray(self.free, dtype=np.int64)
        self._ordered = np.asarray([not isinstance(p, Categorical) for p in space.params])
        self._neighbour_steps = [
            [p.neighbour_indices(i) for i in range(len(p))] if len(p) <= 4096 else None
            for p in space.params
        ]

    # ---- conversions ---------------------------------------------------------------------
    def config(self, point: Point) -> Config:
        return self.space.to_config(point)

    def point(self, config: Config) -> Point | None:
        """The point of a configuration, or None if it is not in the space."""
        try:
            point = self.space.to_point(config)
        except SpaceError:
            return None
        return point if self.valid(point) else None

    def valid(self, point: Point) -> bool:
        known = self._valid.get(point)
        if known is None:
            known = self._valid[point] = bool(self.space.is_valid_point(point))
        return known

    def switches(self) -> list[int]:
        """The two-valued parameters (a switch often selects a code path: shared memory or
        not, padding or not), or none when their combinations, the space's corners, exceed
        MAX_SWITCH_COMBINATIONS."""
        found = [k for k in self.free if self.sizes[k] == 2]
        return found if 2 ** len(found) <= MAX_SWITCH_COMBINATIONS else []

    # ---- moves ---------------------------------------------------------------------------
    def random(self, n: int) -> list[Point]:
        """`n` uniform valid points (with replacement)."""
        points = [tuple(int(i) for i in p) for p in self.space.sample_points(n, self.rng)]
        for p in points:
            self._valid[p] = True
        return points

    def _step(self, k: int, index: int) -> int:
        """A new choice for parameter k: half the time a neighbour, else any other value."""
        size = self.sizes[k]
        steps = self._neighbour_steps[k]
        if steps is not None and self.rng.random() < 0.5 and steps[index]:
            options = steps[index]
            return int(options[int(self.rng.integers(len(options)))])
        new = int(self.rng.integers(size - 1))
        return new + 1 if new >= index else new

    def mutate(self, point: Point, genes: int = 1) -> Point | None:
        """`point` with `genes` parameters changed (valid), or None if no try was valid."""
        if not self.free:
            return None
        for _ in range(self.tries):
            new = list(point)
            count = min(genes, len(self.free))
            for k in self.rng.choice(self.free, size=count, replace=False):
                new[k] = self._step(int(k), new[k])
            cand = tuple(new)
            if self.valid(cand):
                return cand
        return None

    def _mutate_rows(self, rows: np.ndarray) -> np.ndarray:
        """Change one free parameter per row: a step to an adjacent value for ordered
        parameters half the time, otherwise any other value."""
        rows = rows.copy()
        n = len(rows)
        k = self._free_arr[self.rng.integers(len(self._free_arr), size=n)]
        old = rows[np.arange(n), k]
        size = self._sizes_arr[k]
        other = self.rng.integers(size - 1)
        new = other + (other >= old)
        step = self._ordered[k] & (self.rng.random(n) < 0.5)
        delta = np.where(self.rng.random(n) < 0.5, -1, 1)
        delta = np.where((old + delta < 0) | (old + delta >= size), -delta, delta)
        new = np.where(step, old + delta, new)
        rows[np.arange(n), k] = new
        return rows

    def mutate_many(self, parents: Sequence[Point], extra_gene: float = 0.25) -> list[Point | None]:
        """A valid mutation of each parent (None where a few tries found none); a share
        `extra_gene` of the children change two parameters. A subclass that redefines
        `mutate` alone gets its `mutate` here too (the vectorized path knows only the
        uniform moves)."""
        out: list[Point | None] = [None] * len(parents)
        if not self.free or not parents:
            return out
        if type(self).mutate is not PointOps.mutate:
            return [self.mutate(p, 2 if self.rng.random() < extra_gene else 1) for p in parents]
        todo = np.arange(len(parents))
        rows_all = np.asarray(parents, dtype=np.int64)
        for _ in range(self.tries):
            rows = self._mutate_rows(rows_all[todo])
            twice = self.rng.random(len(rows)) < extra_gene
            if twice.any():
                rows[twice] = self._mutate_rows(rows[twice])
            left = []
            for i, row in zip(todo.tolist(), map(tuple, rows.tolist())):
                if self.valid(row):
                    out[i] = row
                else:
                    left.append(i)
            if not left:
                break
            todo = np.asarray(left)
        return out

    def crossover(self, a: Point, b: Point) -> Point | None:
        """Each parameter from one parent or the other (valid), or None."""
        for _ in range(self.tries):
            take = self.rng.random(len(a)) < 0.5
            cand = tuple(x if t else y for x, y, t in zip(a, b, take))
            if self.valid(cand):
                return cand
        return None

    def neighbours(self, point: Point) -> list[Point]:
        """Valid points one step away in one parameter."""
        out = []
        for k in self.free:
            steps = self._neighbour_steps[k]
            options = steps[point[k]] if steps is not None else \
                [i for i in (point[k] - 1, point[k] + 1) if 0 <= i < self.sizes[k]]
            for idx in options:
                cand = point[:k] + (idx,) + point[k + 1:]
                if self.valid(cand):
                    out.append(cand)
        return out

    def distance(self, a: Sequence[int], b: Sequence[int]) -> int:
        """Number of parameters in which two points differ."""
        return sum(1 for x, y in zip(a, b) if x != y)


def unique(points: Iterable[Point], exclude: set[Point] | None = None) -> list[Point]:
    """Points in order, without repeats and without those in `exclude`."""
    seen = set(exclude or ())
    out = []
    for p in points:
        if p not in seen:
            seen.add(p)
            out.append(p)
    return out
