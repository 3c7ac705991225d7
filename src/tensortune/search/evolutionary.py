"""Evolutionary search guided by a cost model, in the style of Ansor and MetaSchedule.

Each batch: refit the model on every measurement; seed a population with the best
measured points and fresh random ones; evolve it for a few generations, where parents
are drawn with probability growing with their predicted rank and children are
mutations (or crossovers) of them; the model scores every child. Nothing is measured
to evolve: only the model is queried.

The batch measured is the model's best unmeasured points, in two parts. An exploring
part, a share `explore_share` of the batch at the start that falls linearly to none at
the end of the budget, is picked greedily down the ranking so that its points differ
pairwise in at least `explore_distance` parameters: several promising regions are
tried at once, so one plateau the model likes cannot take the whole budget. The rest
of the batch is the best of the ranking (exploitation). When the search stagnates (no
new best for `stall` of the measurements so far, at least 8), exploitation is not
paying: the whole batch explores, taken only among points that differ from each of the
three best measured points in at least two parameters. An epsilon-greedy share of
uniform random points guards against a model that is wrong everywhere.

With `explore_switches=True` (the default) a stalled batch is taken per switch instead:
for each combination of the two-valued parameters (`use_shmem`, `read_only`...), least
measured first, the model's best unmeasured point in it. A switch often selects a code path
whose typical configuration is slow but whose best ones are the fastest, which a model of
all points ranks by the typical ones (docs/benchmarks/strategies.md: on
convolution_milo-A4000 at N=200 this takes the mean over 100 seeds from 0.960 to 0.999).
With more than six switches, or `explore_switches=False`, a stalled batch explores away
from the best points as above.

With `tpe_share` > 0, that share of every plan that is not stalled is drawn as the `tpe`
strategy draws (near the fastest measurements, several parameters changed at once, scored
by l / g) instead of from the model; off by default (replayed in
docs/benchmarks/strategies_experiments.md, "TPE in our own hands": better at N=100, worse at
20 and 200).
Its draws are valid ones only: learning from invalid draws, which lifts `tpe` alone, did
not help here (convolution_milo-A100 at N=100 on seeds 0..49: 0.807, below `auto`'s 0.837).

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

import itertools
import math
from typing import Any

import numpy as np

from ..space import Space
from .guided import ModelGuidedSearch
from .points import Point, unique
from .tpe import ParzenProposer

SWITCH_SEEDS = 64  # top-ranked points projected onto each switch combination


class EvolutionarySearch(ModelGuidedSearch):
    name = "evolutionary"

    def __init__(self, space: Space, seed: int | None = None, budget: int | None = None, *,
                 population: int = 256, generations: int = 4, mutation: float = 0.85,
                 measured_share: float = 0.2, min_random: int = 50, explore_share: float = 0.5,
                 explore_distance: int = 3, stall: float = 0.25, explore_switches: bool = True,
                 tpe_share: float = 0.0, **options: Any) -> None:
        super().__init__(space, seed, budget, **options)
        self.population = population
        self.generations = generations
        self.mutation = mutation
        self.measured_share = measured_share
        self.min_random = min_random
        self.explore_share = explore_share
        self.explore_distance = max(1, min(explore_distance, len(self.ops.free)))
        self.stall = stall
        self.switches = self.ops.switches() if explore_switches else []
        if not 0.0 <= tpe_share <= 1.0:
            raise ValueError(f"tpe_share must lie in [0, 1], got {tpe_share}")
        self.tpe_share = tpe_share
        self.tpe = ParzenProposer(learn_invalid=False)

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
            children = [c for c in self.ops.mutate_many([population[int(i)] for i in parents[mutated]])
                        if c is not None]
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
        stalled = self.stalled()
        share = 0.0 if stalled else self.tpe_share * n
        k = int(share) + int(self.rng.random() < share - int(share)) if share else 0
        chosen = self.plan_from_model(n - k, stalled) if n > k else []
        return chosen + self.tpe.propose(self, k, set(chosen)) if k else chosen

    def plan_from_model(self, n: int, stalled: bool) -> list[Point]:
        points, scores = self.evolve()
        ranked = self.top_unseen(points, scores, 16 * n)
        if stalled and self.switches:
            explore = self.per_switch(points, scores, n)
        elif stalled:
            best = [p for p, t in self.ranked()[:3] if math.isfinite(t)]
            away = [p for p in ranked if all(self.ops.distance(p, q) >= 2 for q in best)]
            explore = self.diverse(away, n, self.explore_distance)
        else:
            progress = min(1.0, len(self.measured) / self.budget) if self.budget else 0.5
            share = self.explore_share * (1.0 - progress) * n
            k = min(n, int(share) + int(self.rng.random() < share - int(share)))
            explore = self.diverse(ranked, k, self.explore_distance)
        taken = set(explore)
        return explore + [p for p in ranked if p not in taken][: n - len(explore)]

    def stalled(self) -> bool:
        """No new best in the last `stall` share of the measurements (at least 8)."""
        best, last = math.inf, 0
        for i, r in enumerate(self.history):
            if r.ok and r.time < best:
                best, last = r.time, i + 1
        return len(self.history) - last >= max(8.0, self.stall * len(self.history))

    def diverse(self, ranked: list[Point], n: int, distance: int) -> list[Point]:
        """Going down `ranked`, the points that differ from every earlier pick in at least
        `distance` parameters (topped up in rank order if too few do)."""
        chosen: list[Point] = []
        for p in ranked:
            if len(chosen) == n:
                return chosen
            if all(self.ops.distance(p, q) >= distance for q in chosen):
                chosen.append(p)
        return chosen + [p for p in ranked if p not in chosen][: n - len(chosen)]

    def per_switch(self, points: list[Point], scores: np.ndarray, n: int) -> list[Point]:
        """Up to `n` points, one per combination of the switches (least measured first): the
        model's best unmeasured point among the evolved ones in that combination and the
        best-ranked ones moved into it."""
        def combo_of(p: Point) -> tuple[int, ...]:
            return tuple(p[k] for k in self.switches)

        counts = {combo: 0 for combo in itertools.product((0, 1), repeat=len(self.switches))}
        for p in self.measured:
            counts[combo_of(p)] += 1
        ranked = [points[i] for i in np.argsort(-scores, kind="stable")]
        inside: dict[tuple[int, ...], list[Point]] = {combo: [] for combo in counts}
        for p in ranked:
            inside[combo_of(p)].append(p)
        top = ranked[:SWITCH_SEEDS]
        tie = self.rng.random(len(counts))
        chosen: list[Point] = []
        for _, _, combo in sorted((c, float(t), combo) for (combo, c), t in zip(counts.items(), tie)):
            moved = []
            for p in top:
                q = list(p)
                for k, v in zip(self.switches, combo):
                    q[k] = v
                moved.append(tuple(q))
            candidates = unique([q for q in moved if self.ops.valid(q)] + inside[combo][:SWITCH_SEEDS],
                                self.seen_points | set(chosen))
            if candidates:
                chosen.append(candidates[int(np.argmax(self.acquisition(candidates)))])
            if len(chosen) == n:
                break
        return chosen
