"""Shared machinery of strategies that plan batches: history as points, a queue, fallbacks.

A planned strategy fills a queue with a batch of points (`plan`) and serves `ask` from
it, so a tuner that asks for one configuration at a time does not make the strategy
re-plan (and refit a cost model) after every measurement. When a plan comes back empty,
uniform random points replace it, and when the space runs out `ask` returns fewer points
(an empty list means every valid configuration has been seen).

Example:
    >>> from tensortune.space import Space
    >>> class First(PlannedSearch):
    ...     def plan(self, n):
    ...         return []  # always falls back to random points
    >>> s = First(Space({"a": [1, 2, 3]}), seed=0)
    >>> sorted(c["a"] for c in s.ask(5))
    [1, 2, 3]
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Sequence

import numpy as np

from ..measure import MeasureResult
from ..space import Config, Space
from .base import SearchStrategy
from .points import Point, PointOps, unique

ENUMERATE_REST = 200_000  # spaces up to this size list their unseen points when draws stall


class PlannedSearch(SearchStrategy):
    """Base of strategies that propose batches of choice-index points."""

    def __init__(self, space: Space, seed: int | None = None, budget: int | None = None,
                 plan_size: int = 8) -> None:
        super().__init__(space, seed, budget)
        if plan_size < 1:
            raise ValueError(f"plan_size must be at least 1, got {plan_size}")
        self.plan_size = plan_size
        self.ops = PointOps(space, self.rng)
        self.measured: dict[Point, float] = {}  # point -> time in seconds, inf if it failed
        self.rejected: set[Point] = set()  # failed in the builder (MeasureResult.rejected_by_build)
        self.seen_points: set[Point] = set()
        self._queue: list[Point] = []
        self._rest: list[Point] | None = None

    # ---- to implement --------------------------------------------------------------------
    @abstractmethod
    def plan(self, n: int) -> list[Point]:
        """About `n` unseen valid points to measure next (fewer is fine)."""

    def next_plan_size(self) -> int:
        """How many points the next plan holds (at least what `ask` was asked for)."""
        return self.plan_size

    # ---- ask / tell ----------------------------------------------------------------------
    def ask(self, n: int) -> list[Config]:
        out: list[Config] = []
        while len(out) < n:
            if not self._queue:
                want = max(n - len(out), self.next_plan_size())
                planned = unique(self.plan(want), self.seen_points)
                if not planned:
                    planned = self.fresh_random(want)
                if not planned:
                    break
                self._queue = planned
            point = self._queue.pop(0)
            if point in self.seen_points:
                continue
            self.seen_points.add(point)
            config = self.ops.config(point)
            if self.propose(config):
                out.append(config)
        return out

    def exclude(self, configs: Sequence[Config]) -> None:
        super().exclude(configs)
        self.seen_points.update(p for p in map(self.ops.point, configs) if p is not None)

    def tell(self, results: Sequence[MeasureResult]) -> None:
        super().tell(results)
        for r in results:
            point = self.ops.point(r.config)
            if point is None:
                continue
            self.seen_points.add(point)
            self.measured[point] = r.time if r.ok else math.inf
            if r.rejected_by_build:
                self.rejected.add(point)

    # ---- helpers for subclasses -----------------------------------------------------------
    @property
    def remaining_budget(self) -> int | None:
        return None if self.budget is None else max(0, self.budget - len(self.measured))

    def ranked(self) -> list[tuple[Point, float]]:
        """Measured points, fastest first (failures last)."""
        return sorted(self.measured.items(), key=lambda kv: kv[1])

    def arrays(self) -> tuple[list[Point], np.ndarray]:
        points = list(self.measured)
        return points, np.asarray([self.measured[p] for p in points], dtype=np.float64)

    def fresh_random(self, n: int, exclude: set[Point] | None = None) -> list[Point]:
        """Up to `n` distinct uniform points not seen yet."""
        exclude = self.seen_points | (exclude or set())
        out: list[Point] = []
        for _ in range(8):
            draws = self.ops.random(max(2 * (n - len(out)), 8))
            out += unique(draws, exclude | set(out))[: n - len(out)]
            if len(out) >= n:
                return out
        return out + self._enumerated_rest(n - len(out), exclude | set(out))

    def space_filling(self, n: int, draws_per_point: int = 16) -> list[Point]:
        """`n` unseen random points, chosen among many draws to differ in many parameters."""
        pool = self.fresh_random(n * draws_per_point)
        if len(pool) <= n:
            return pool
        arr = np.asarray(pool)
        taken = list(self.measured) + list(self._queue)
        chosen: list[int] = []
        nearest = np.full(len(pool), arr.shape[1] + 1.0)
        if taken:
            for p in taken:
                nearest = np.minimum(nearest, (arr != np.asarray(p)).sum(axis=1))
        for _ in range(n):
            # the farthest point from everything chosen, ties broken at random
            scores = nearest + self.rng.random(len(pool)) * 0.5
            scores[chosen] = -1
            k = int(np.argmax(scores))
            chosen.append(k)
            nearest = np.minimum(nearest, (arr != arr[k]).sum(axis=1))
        return [pool[k] for k in chosen]

    def _enumerated_rest(self, n: int, exclude: set[Point]) -> list[Point]:
        """When random draws keep hitting seen points: the unseen rest of a small space."""
        if self._rest is None:
            if not self.space.size_is_exact or self.space.size > ENUMERATE_REST:
                return []
            rest = [self.space.to_point(c) for c in self.space]
            self._rest = [rest[i] for i in self.rng.permutation(len(rest))]
        self._rest = [p for p in self._rest if p not in exclude]
        return self._rest[:n]
