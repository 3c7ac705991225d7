"""Simulated annealing over neighbours, on measurements or on a cost model (AutoTVM).

Plain (`energy="measured"`): `plan_size` chains walk the space; each step proposes a
random one- or two-parameter change of a chain's current point and measures it. A chain
moves if the new point is faster, or slower by a log-time ratio d with probability
exp(-d / T); the temperature T falls linearly to zero over the budget (geometrically
when the budget is unknown). A failed point is never moved to; a chain with no unseen
neighbour restarts from the best point measured, or from a random one.

With the model (`energy="model"`, AutoTVM's XGBTuner): after an initial random sample, a
ranking model is fitted to every measurement, the chains anneal on the model's score
for `steps` steps without measuring anything, and the batch is the best points they
visited, chosen diversity-aware: each pick is penalized by how many picks already share
its parameter values.

Example:
    >>> from tensortune.space import Space
    >>> from tensortune.measure import MeasureResult
    >>> s = SimulatedAnnealing(Space({"x": list(range(64))}), seed=0, budget=30)
    >>> for _ in range(30):
    ...     s.tell([MeasureResult(c, (1.0 + abs(c["x"] - 40),)) for c in s.ask(1)])
    >>> s.best.time <= 3.0
    True
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from typing import Any

import numpy as np

from ..measure import MeasureResult
from ..space import Space
from .guided import ModelGuidedSearch
from .points import Point, unique


class SimulatedAnnealing(ModelGuidedSearch):
    name = "annealing"

    def __init__(self, space: Space, seed: int | None = None, budget: int | None = None, *,
                 energy: str = "measured", start_temperature: float = 0.3, steps: int = 100,
                 chains: int | None = None, diversity: float = 0.5, **options: Any) -> None:
        if energy not in ("measured", "model"):
            raise ValueError(f"energy must be 'measured' or 'model', got {energy!r}")
        options.setdefault("plan_size", 4 if energy == "measured" else 8)
        super().__init__(space, seed, budget, **options)
        self.energy = energy
        self.start_temperature = start_temperature
        self.steps = steps
        self.diversity = diversity
        self.chains: list[Point] = []  # current point of each chain
        self.n_chains = chains or (self.plan_size if energy == "measured" else 64)
        self._proposed_by: dict[Point, int] = {}

    # ---- temperature -------------------------------------------------------------------------
    def temperature(self) -> float:
        done = len(self.measured)
        if self.budget:
            return self.start_temperature * max(0.0, 1.0 - done / self.budget)
        return self.start_temperature * 0.98 ** done

    @staticmethod
    def accept(old: float, new: float, temperature: float, u: float) -> bool:
        """Metropolis rule on log times (scale free); a failure is never accepted."""
        if not math.isfinite(new):
            return False
        if not math.isfinite(old) or new <= old:
            return True
        return temperature > 0 and u < math.exp(-math.log(new / old) / temperature)

    # ---- measured energy ------------------------------------------------------------------------
    def plan(self, n: int) -> list[Point]:
        if self.energy == "model":
            return super().plan(n)
        if len(self.measured) < self.initial or not self.chains:
            start = self.space_filling(n)
            for p in start:
                self._proposed_by[p] = -1  # not yet a chain: becomes one if it is among the best
            return start
        out = []
        for c, current in enumerate(self.chains):
            proposal = self._propose_from(current, exclude=set(out))
            if proposal is None:  # nothing new around this chain: jump somewhere random
                fresh = self.fresh_random(1, exclude=set(out))
                proposal = fresh[0] if fresh else None
            if proposal is not None:
                self._proposed_by[proposal] = c
                out.append(proposal)
        return out

    def _propose_from(self, point: Point, exclude: set[Point]) -> Point | None:
        for _ in range(8):
            cand = self.ops.mutate(point, genes=1 + int(self.rng.random() < 0.2))
            if cand is not None and cand not in self.seen_points and cand not in exclude:
                return cand
        fresh = [p for p in self.ops.neighbours(point) if p not in self.seen_points and p not in exclude]
        return fresh[int(self.rng.integers(len(fresh)))] if fresh else None

    def tell(self, results: Sequence[MeasureResult]) -> None:
        super().tell(results)
        if self.energy == "model":
            return
        if not self.chains and len(self.measured) >= self.initial:
            ranked = [p for p, t in self.ranked() if math.isfinite(t)] or list(self.measured)
            self.chains = [ranked[i % len(ranked)] for i in range(self.n_chains)]
            return
        temperature = self.temperature()
        best = next((p for p, t in self.ranked() if math.isfinite(t)), None)
        for r in results:
            point = self.ops.point(r.config)
            c = self._proposed_by.pop(point, -1) if point is not None else -1
            if c < 0 or c >= len(self.chains):
                continue
            current = self.chains[c]
            if self.accept(self.measured.get(current, math.inf), self.measured[point],
                           temperature, float(self.rng.random())):
                self.chains[c] = point
            elif not any(p not in self.seen_points for p in self.ops.neighbours(current)):
                self.chains[c] = best if best is not None else self.fresh_random(1)[0]

    # ---- model energy (AutoTVM) --------------------------------------------------------------
    def plan_with_model(self, n: int) -> list[Point]:
        ranked = [p for p, t in self.ranked() if math.isfinite(t)]
        k = self.n_chains
        starts = ranked[: k // 2] + self.ops.random(k - min(len(ranked), k // 2))
        points = list(starts)
        energy = self.score(points)
        visited: dict[Point, float] = dict(zip(points, energy.tolist()))
        for step in range(self.steps):
            temperature = 1.0 - step / self.steps  # AutoTVM anneals from 1 to 0 on model scores
            proposals = [q or p for p, q in zip(points, self.ops.mutate_many(points, extra_gene=0.0))]
            new = [p for p in unique(proposals) if p not in visited]
            if new:
                visited.update(zip(new, self.score(new).tolist()))
            scale = float(np.std(list(visited.values()))) or 1.0
            for i, q in enumerate(proposals):
                delta = (visited[q] - visited[points[i]]) / scale  # higher score is better
                if delta >= 0 or (temperature > 0 and self.rng.random() < math.exp(delta / temperature)):
                    points[i] = q
        candidates = [p for p in visited if p not in self.seen_points]
        scores = np.asarray([visited[p] for p in candidates])
        return self.diverse_picks(candidates, scores, n)

    def diverse_picks(self, candidates: list[Point], scores: np.ndarray, n: int) -> list[Point]:
        """Greedy picks of high score, penalized for sharing values with earlier picks."""
        if not candidates:
            return []
        order = np.argsort(-scores)[: 32 * n]
        pool = [candidates[i] for i in order]
        value = (scores[order] - scores[order].mean()) / (scores[order].std() or 1.0)
        arr = np.asarray(pool)
        shared = np.zeros(len(pool))
        chosen: list[int] = []
        for _ in range(min(n, len(pool))):
            gain = value - self.diversity * shared / max(1, len(self.ops.free))
            gain[chosen] = -np.inf
            k = int(np.argmax(gain))
            chosen.append(k)
            shared += (arr == arr[k]).sum(axis=1)
        return [pool[k] for k in chosen]
