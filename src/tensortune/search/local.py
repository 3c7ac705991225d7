"""Iterated greedy local search: climb through neighbours, then kick and climb again.

From the best point of a small random sample, measure the unseen neighbours of the
current point (one step in one parameter), in random order and a batch at a time, and
move as soon as one is faster (first improvement). At a local optimum, where every
neighbour has been measured, kick: restart from the best point found with a few
parameters changed at random (iterated local search); every other restart starts from
a fresh random point instead, so the search does not circle one basin.

Example:
    >>> from tensortune.space import Space
    >>> from tensortune.measure import MeasureResult
    >>> s = LocalSearch(Space({"x": list(range(32)), "y": list(range(8))}), seed=0, budget=60)
    >>> for _ in range(60):
    ...     s.tell([MeasureResult(c, (1.0 + abs(c["x"] - 20) + abs(c["y"] - 2),)) for c in s.ask(1)])
    >>> s.best.time
    1.0
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..measure import MeasureResult
from ..space import Space
from .planned import PlannedSearch
from .points import Point


class LocalSearch(PlannedSearch):
    name = "local"

    def __init__(self, space: Space, seed: int | None = None, budget: int | None = None, *,
                 initial: int = 8, plan_size: int = 4, kick: int = 3) -> None:
        super().__init__(space, seed, budget, plan_size)
        self.initial = initial
        self.kick = kick
        self.current: Point | None = None  # a measured point the climb is at
        self._pending_start: Point | None = None
        self.restarts = 0

    def plan(self, n: int) -> list[Point]:
        if len(self.measured) < self.initial or self.current is None:
            return self.fresh_random(n)
        fresh = [p for p in self.ops.neighbours(self.current) if p not in self.seen_points]
        if fresh:
            order = self.rng.permutation(len(fresh))
            return [fresh[int(i)] for i in order[:n]]
        return self._restart(n)

    def _restart(self, n: int) -> list[Point]:
        """At a local optimum: a kicked copy of the best, or a random point."""
        self.restarts += 1
        best = self._best_point()
        start: Point | None = None
        if best is not None and self.restarts % 2 == 1:
            for _ in range(8):
                cand = self.ops.mutate(best, genes=self.kick)
                if cand is not None and cand not in self.seen_points:
                    start = cand
                    break
        if start is None:
            fresh = self.fresh_random(1)
            if not fresh:
                return []
            start = fresh[0]
        self._pending_start = start  # becomes current once measured (see tell)
        return [start]

    def _best_point(self) -> Point | None:
        return next((p for p, t in self.ranked() if math.isfinite(t)), None)

    def tell(self, results: Sequence[MeasureResult]) -> None:
        super().tell(results)
        for r in results:
            point = self.ops.point(r.config)
            if point is None:
                continue
            ok = math.isfinite(self.measured[point])
            if point == self._pending_start:
                self._pending_start = None
                self.current = point if ok else self._best_point()
            elif ok and (self.current is None or self.measured[point] < self.measured[self.current]):
                self.current = point  # first improvement
