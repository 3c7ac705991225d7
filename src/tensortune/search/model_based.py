"""Model-based optimization: a surrogate with uncertainty, an acquisition, evolution.

The surrogate is a bootstrap ensemble of ranking models fitted to every measurement;
where members disagree, the data leave doubt. The acquisition is optimistic (upper
confidence bound): the members' mean score plus `kappa` times their spread. Failures
teach twice: they rank below every success in the surrogate (unless the builder rejected
them, see `ModelGuidedSearch`), and the failure classifier adds the log of the predicted
chance of success (in units of the spread of scores), so regions that fail are avoided
without being ruled out. The acquisition is
maximized by the same evolution as `evolutionary` (mutations and crossovers of the best
measured points and of random ones, scored by the model only), and the batch is its best
unmeasured points. This is the shape of XLA's autotuner study and Helion's LFBO search.

Example:
    >>> from tensortune.space import Space
    >>> from tensortune.measure import ErrorKind, MeasureResult
    >>> space = Space({"x": list(range(32)), "y": list(range(32))})
    >>> s = ModelBasedSearch(space, seed=0, budget=48)
    >>> for _ in range(6):
    ...     batch = s.ask(8)
    ...     s.tell([MeasureResult.failed(c, ErrorKind.RUNTIME_ERROR, "") if c["x"] > 28 else
    ...             MeasureResult(c, (1.0 + abs(c["x"] - 20) + abs(c["y"] - 5),)) for c in batch])
    >>> s.best.time < 12
    True
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..model.ensemble import BootstrapEnsemble
from ..space import Space
from .evolutionary import EvolutionarySearch
from .points import Point


class ModelBasedSearch(EvolutionarySearch):
    name = "model_based"
    classify_failures = True

    def __init__(self, space: Space, seed: int | None = None, budget: int | None = None, *,
                 members: int = 4, kappa: float = 1.0, **options: Any) -> None:
        super().__init__(space, seed, budget, members=members, **options)
        self.kappa = kappa
        self._scale = 1.0

    def refit(self) -> None:
        fitted_on = self._fitted_on
        super().refit()
        if fitted_on != self._fitted_on:
            points, _ = self.arrays()
            # the spread of scores over measured points: the unit of the failure penalty
            self._scale = float(np.std(self.model.predict(self.features.points(points)))) or 1.0

    def acquisition(self, points: list[Point]) -> np.ndarray:
        if not points:
            return np.zeros(0)
        X = self.features.points(points)
        if isinstance(self.model, BootstrapEnsemble):
            members = self.model.predict_members(X)
            mean, spread = members.mean(axis=0), members.std(axis=0)
        else:
            mean, spread = self.model.predict(X), np.zeros(len(points))
        p_ok = np.clip(self.failures.success(X), 1e-3, 1.0)
        return mean + self.kappa * spread + self._scale * np.log(p_ok)
