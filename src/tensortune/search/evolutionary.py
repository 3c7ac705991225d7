"""Evolutionary search guided by a cost model, in the style of Ansor and MetaSchedule.

Each batch: refit the model on every measurement; seed a population with the best
measured points and fresh random ones; evolve it for a few generations, where parents
are drawn with probability growing with their predicted rank and children are
mutations (or crossovers) of them; the model scores every child. The batch measured is
the model's best unmeasured points, kept diverse (no two differ in fewer than
`min_distance` parameters when enough candidates allow), plus an epsilon-greedy share
of random points. Nothing is measured to evolve: only the model is queried.

Example:
    >>> from tensortune.space import Space
    >>> space = Space({"x": list(range(32)), "y": list(range(32))})
    >>> s = EvolutionarySearch(space, seed=0, budget=40)
    >>> from tensortune.measure import MeasureResult
    >>> for _ in range(5):
    ...     batch = s.ask(8)
    ...     s.tell([MeasureResult(c, (1.0 + (c["x"] - 20) ** 2 + (c["y"] - 5) ** 2,)) for c in batch])
    >>> s.best.time < 20
    True
"""

from __future__ import annotations

import numpy as np

from .guided import ModelGuidedSearch
from .points import Point, unique


class EvolutionarySearch(ModelGuidedSearch):
    name = "evolutionary"

    def __init__(self, space, seed=None, budget=None, *, population: int = 256,
                 generations: int = 4, mutation: float = 0.85, measured_share: float = 0.2,
                 min_random: int = 50, min_distance: int = 1, pick: str = "top", **options) -> None:
        super().__init__(space, seed, budget, **options)
        self.population = population
        self.generations = generations
        self.mutation = mutation
        self.measured_share = measured_share
        self.min_random = min_random
        self.min_distance = min_distance
        self.pick = pick

    def initial_population(self) -> list[Point]:
        best = [p for p, t in self.ranked() if np.isfinite(t)]
        seeds = best[: max(1, int(self.measured_share * self.population))]
        fresh = self.ops.random(max(self.min_random, self.population - len(seeds)))
        return unique(seeds + fresh)

    def evolve(self) -> tuple[list[Point], np.ndarray]:
        """Every point the evolution visited, with its predicted score."""
        population = self.initial_population()
        scores = self.acquisition(population)
        visited: dict[Point, float] = dict(zip(population, scores.tolist()))
        for _ in range(self.generations):
            # rank-based selection: the best parent is about e^3 times likelier than the worst
            ranks = np.argsort(np.argsort(-scores))
            weights = np.exp(-3.0 * ranks / max(1, len(ranks) - 1))
            weights /= weights.sum()
            parents = self.rng.choice(len(population), size=self.population, p=weights)
            mutated = self.rng.random(len(parents)) < self.mutation
            children = self.ops.mutate_many([population[int(i)] for i in parents[mutated]])
            mates = self.rng.choice(len(population), size=int((~mutated).sum()), p=weights)
            for i, j in zip(parents[~mutated], mates):
                child = self.ops.crossover(population[int(i)], population[int(j)])
                if child is not None:
                    children.append(child)
            children = unique(children)
            new = [c for c in children if c not in visited]
            if new:
                visited.update(zip(new, self.acquisition(new).tolist()))
            population = children or population
            scores = np.asarray([visited[p] for p in population])
        points = list(visited)
        return points, np.asarray([visited[p] for p in points])

    def plan_with_model(self, n: int) -> list[Point]:
        points, scores = self.evolve()
        if self.pick == "thompson":
            return self.thompson(self.top_unseen(points, scores, 16 * n), n)
        ranked = self.top_unseen(points, scores, 4 * n)
        return self.diverse(ranked, n)

    def diverse(self, ranked: list[Point], n: int) -> list[Point]:
        """The first `n` of `ranked` that differ from each other in `min_distance`+ parameters."""
        chosen: list[Point] = []
        for p in ranked:
            if all(self.ops.distance(p, q) > self.min_distance - 1 for q in chosen):
                chosen.append(p)
                if len(chosen) == n:
                    return chosen
        return chosen + [p for p in ranked if p not in chosen][: n - len(chosen)]
