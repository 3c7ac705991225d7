"""A genetic algorithm in the style of Tensor Comprehensions' autotuner.

A generation is a population of measured points. The next one keeps the `elites`
fastest unchanged; every other member is a child of three parents drawn with probability
proportional to fitness (1 / time; a failed point has none), whose genes are each taken
from one parent, again in proportion to fitness, then mutated gene by gene with
probability `mutation`. Children already measured are mutated further, or replaced by
random points, so every generation measures only new configurations.

Example:
    >>> from tensortune.space import Space
    >>> from tensortune.measure import MeasureResult
    >>> space = Space({"x": list(range(16)), "y": list(range(16))})
    >>> s = GeneticSearch(space, seed=0, budget=60)
    >>> for _ in range(60):
    ...     s.tell([MeasureResult(c, (1.0 + abs(c["x"] - 9) + abs(c["y"] - 3),)) for c in s.ask(1)])
    >>> s.best.time <= 3.0
    True
"""

from __future__ import annotations

import math

import numpy as np

from ..space import Space
from .planned import PlannedSearch
from .points import Point


class GeneticSearch(PlannedSearch):
    name = "genetic"

    def __init__(self, space: Space, seed: int | None = None, budget: int | None = None, *,
                 population: int | None = None, elites: int | None = None, crossover: float = 0.8,
                 mutation: float = 0.07, parents: int = 3) -> None:
        size = population or (20 if budget is None else int(min(100, max(8, budget // 6))))
        super().__init__(space, seed, budget, plan_size=size)
        self.population_size = size
        self.elites = elites if elites is not None else max(1, size // 10)
        self.crossover_rate = crossover
        self.mutation = mutation
        self.parents = parents
        self.generation: list[Point] = []

    def fitness(self, points: list[Point]) -> np.ndarray:
        times = np.asarray([self.measured.get(p, math.inf) for p in points])
        fit = np.where(np.isfinite(times), 1.0 / np.where(np.isfinite(times), times, 1.0), 0.0)
        return fit / fit.max() if fit.max() > 0 else np.ones(len(points))

    def plan(self, n: int) -> list[Point]:
        measured_gen = [p for p in self.generation if p in self.measured]
        if len(self.measured) < self.population_size or not measured_gen:
            # first generation: random points
            start = self.fresh_random(max(n, self.population_size - len(self.measured)))
            self.generation = list(self.measured) + start
            return start
        # survivors: the best of the last generation and everything measured since
        pool = sorted(set(measured_gen) | set(self.measured), key=lambda p: self.measured[p])
        pool = pool[: self.population_size]
        fit = self.fitness(pool)
        weights = fit / fit.sum()
        elites = pool[: self.elites]
        children: list[Point] = []
        taken = set(self.seen_points)
        for _ in range(max(n, self.population_size - len(elites))):
            child = self._child(pool, weights)
            for _ in range(8):
                if child not in taken:
                    break
                child = self.ops.mutate(child) or child
            if child in taken:
                fresh = self.fresh_random(1, taken)
                if not fresh:
                    break
                child = fresh[0]
            taken.add(child)
            children.append(child)
        self.generation = elites + children
        return children

    def _child(self, pool: list[Point], weights: np.ndarray) -> Point:
        k = min(self.parents, len(pool))
        idx = self.rng.choice(len(pool), size=k, replace=int((weights > 0).sum()) < k, p=weights)
        if self.rng.random() < self.crossover_rate and k > 1:
            parent_fit = weights[idx] / weights[idx].sum() if weights[idx].sum() > 0 else None
            genes = [pool[int(idx[int(self.rng.choice(k, p=parent_fit))])][g] for g in range(len(pool[0]))]
            child: Point = tuple(genes)
            if not self.ops.valid(child):
                child = pool[int(idx[0])]
        else:
            child = pool[int(idx[0])]
        out = list(child)
        for g in self.ops.free:
            if self.rng.random() < self.mutation:
                out[g] = int(self.rng.integers(self.ops.sizes[g]))
        mutated = tuple(out)
        return mutated if self.ops.valid(mutated) else child
