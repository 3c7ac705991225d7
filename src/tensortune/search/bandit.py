"""A bandit over strategies that share one history, as OpenTuner's AUC bandit does.

Each arm is a strategy. Every arm is told every result, so each learns from what the
others measured, and none proposes what another already proposed. Each configuration
asked for comes from one arm, the one with the highest

    credit(arm) + exploration * sqrt(2 ln(uses of all arms) / uses(arm))

(an arm not used yet goes first). An arm's credit is the area under the curve of its
last `window` results, where a result counts 1 if it was faster than every earlier
measurement: with the i-th of k results weighted i / (k (k + 1) / 2), credit is 1 when
every result was a new best and recent successes weigh more than old ones. So the arm
that keeps improving gets the measurements, and one that stops is tried again now and
then.

Example:
    >>> from tensortune.space import Space
    >>> from tensortune.measure import MeasureResult
    >>> s = BanditSearch(Space({"x": list(range(64)), "y": list(range(8))}), seed=0, budget=60)
    >>> for _ in range(60):
    ...     s.tell([MeasureResult(c, (1.0 + abs(c["x"] - 40) + abs(c["y"] - 2),)) for c in s.ask(1)])
    >>> s.best.time <= 2.0
    True
    >>> sum(s.uses.values())
    60
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..measure import MeasureResult
from ..space import Config, Space
from .base import SearchStrategy, create_strategy

DEFAULT_ARMS = ("evolutionary", "local")


def recency_weighted_credit(outcomes: Sequence[bool]) -> float:
    """The area under an arm's curve of new bests, recent ones weighing most.

    >>> recency_weighted_credit([False, False, True]), recency_weighted_credit([True, False, False])
    (0.5, 0.16666666666666666)
    """
    k = len(outcomes)
    if not k:
        return 0.0
    weights = np.arange(1, k + 1, dtype=np.float64)
    return float(weights @ np.asarray(outcomes, dtype=np.float64) / (k * (k + 1) / 2))


class BanditSearch(SearchStrategy):
    name = "bandit"

    def __init__(self, space: Space, seed: int | None = None, budget: int | None = None, *,
                 arms: Sequence[str] = DEFAULT_ARMS, exploration: float = 0.05, window: int = 100,
                 arm_options: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        super().__init__(space, seed, budget)
        if not arms:
            raise ValueError("a bandit needs at least one arm")
        if len(set(arms)) != len(arms):
            raise ValueError(f"bandit arms must be distinct, got {list(arms)}")
        unknown = set(arm_options or {}) - set(arms)
        if unknown:
            raise ValueError(f"arm_options name strategies that are not arms: {sorted(unknown)}")
        if not exploration >= 0:
            raise ValueError(f"exploration must be at least 0, got {exploration}")
        if window < 1:
            raise ValueError(f"window must be at least 1, got {window}")
        seeds = np.random.SeedSequence(seed).generate_state(len(arms))
        self.arms: dict[str, SearchStrategy] = {
            name: create_strategy(name, space, seed=int(s), budget=budget, **dict((arm_options or {}).get(name, {})))
            for name, s in zip(arms, seeds)}
        self.exploration = exploration
        self.uses: dict[str, int] = {name: 0 for name in arms}
        self.outcomes: dict[str, deque[bool]] = {name: deque(maxlen=window) for name in arms}
        self._asked_by: dict[Config, str] = {}

    def score(self, arm: str) -> float:
        """The arm's credit plus its exploration bonus (infinite before its first use)."""
        uses = self.uses[arm]
        if not uses:
            return math.inf
        total = sum(self.uses.values())
        bonus = math.sqrt(2.0 * math.log(total) / uses)
        return recency_weighted_credit(self.outcomes[arm]) + self.exploration * bonus

    def _choose(self) -> str:
        scores = np.asarray([self.score(a) for a in self.arms])
        tied = np.flatnonzero(scores == scores.max())
        return list(self.arms)[int(tied[self.rng.integers(len(tied))])]

    def _ask_one(self) -> tuple[str, list[Config]]:
        """One configuration from the chosen arm; an arm that finds nothing new (random
        draws can miss the last unseen points of a large space) hands its turn to the
        others, best-scored first."""
        chosen = self._choose()
        got = self.arms[chosen].ask(1)
        if not got:
            for arm in sorted((a for a in self.arms if a != chosen), key=self.score, reverse=True):
                if got := self.arms[arm].ask(1):
                    return arm, got
        return chosen, got

    def ask(self, n: int) -> list[Config]:
        out: list[Config] = []
        while len(out) < n:
            arm, got = self._ask_one()
            if not got:
                break  # the space is exhausted
            config = got[0]
            for other, strategy in self.arms.items():
                if other != arm:
                    strategy.exclude([config])
            self.uses[arm] += 1
            self._asked_by[config] = arm
            self.seen.add(config)
            out.append(config)
        return out

    def pace_model(self, share: float, seconds: float) -> None:
        for strategy in self.arms.values():
            strategy.pace_model(share, seconds)

    def tell(self, results: Sequence[MeasureResult]) -> None:
        best = self.best.time if self.best else math.inf
        for r in results:
            arm = self._asked_by.pop(r.config, None)
            if arm is not None:
                self.outcomes[arm].append(r.ok and r.time < best)
            if r.ok:
                best = min(best, r.time)
        super().tell(results)
        for strategy in self.arms.values():
            strategy.tell(results)

    @property
    def accepts_prior(self) -> bool:
        return any(s.accepts_prior for s in self.arms.values())

    def use_prior(self, model: Any, workload_key: Mapping[str, Any] | None = None, *,
                  explore: bool = False) -> bool:
        took = [s.use_prior(model, workload_key, explore=explore) for s in self.arms.values()]
        return any(took)
