"""A planned search that keeps a cost model fitted to every measurement so far.

Subclasses decide how to turn the model into the next batch (`plan_with_model`); this
base takes care of the initial random sample, refitting, scoring points, the
epsilon-greedy random share, and of falling back to random points when there is nothing
to learn from yet (no successful measurement, or a model that cannot be fitted).

The first points are a space-filling random sample: many uniform draws, from which
points are picked greedily to be far apart (in how many parameters they differ), so a
small initial sample covers every parameter's values.

Failures: a failed measurement ranks below every success in the cost model. A candidate
the builder rejected (`MeasureResult.rejected_by_build`: it did not compile, or needs
more shared memory than the device has) is different: it says where the space stops, not
how fast anything is, and it cost no measurement. Once there are such rejections, the
ranking model learns from the configurations that ran only, a failure classifier
(`tensortune.model.failures`) learns where candidates fail, and points it predicts to
fail rank below all others. (Teaching a ranking model that the largest tiles are the
"slowest" hides that the fastest configurations sit right beside them; on the H100
matmul grid this split doubles how often a cold 32-measurement search ends within 2% of
the best, docs/benchmarks/triton.md.)

Example:
    >>> from tensortune.space import Space
    >>> from tensortune.search.evolutionary import EvolutionarySearch
    >>> s = EvolutionarySearch(Space({"a": list(range(20)), "b": [1, 2]}), seed=0, budget=10)
    >>> len(s.ask(4))
    4
"""

from __future__ import annotations

import math
import time
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from ..measure import MeasureResult
from ..model.base import CostModel
from ..model.ensemble import BootstrapEnsemble
from ..model.failures import FailureClassifier
from ..model.features import FeatureExtractor
from ..model.xgb_rank import XGBParams, XGBRankModel
from ..space import Space
from .planned import PlannedSearch
from .points import Point, unique


MAX_PLAN = 8  # points per plan once data are plenty


def initial_size(budget: int | None, low: int = 8, high: int = 24, fraction: float = 0.1) -> int:
    """How many random points to measure before trusting a model, for a budget."""
    if budget is None:
        return high
    return int(min(high, max(low, round(fraction * budget))))


class ModelGuidedSearch(PlannedSearch):
    """Base of strategies whose batches come from a cost model over all measurements."""

    classify_failures: ClassVar[bool] = False  # fit the failure classifier without rejections too

    def __init__(self, space: Space, seed: int | None = None, budget: int | None = None, *,
                 plan_size: int | None = None, initial: int | None = None, epsilon: float = 0.05,
                 members: int = 1, model_params: XGBParams | None = None,
                 cost_model: CostModel | None = None, base_model: XGBRankModel | None = None,
                 workload_key: Mapping[str, Any] | None = None) -> None:
        super().__init__(space, seed, budget, plan_size or MAX_PLAN)
        self.adaptive_plan = plan_size is None
        self.initial = initial if initial is not None else initial_size(budget)
        self.epsilon = epsilon
        self.features = FeatureExtractor(space, workload_key)
        if cost_model is not None:
            self.model: CostModel = cost_model
        elif members > 1:
            self.model = BootstrapEnsemble(members, model_params, seed, self.features.names, base_model)
        else:
            self.model = XGBRankModel(model_params, seed, self.features.names, base_model)
        self.failures = FailureClassifier(seed)
        self._fitted_on = -1
        self._prior = False
        self.random_start = self.initial  # random points measured before the model leads
        self._pace: tuple[float, float] | None = None  # (share, seconds): see pace_model
        self._fit_seconds = 0.0  # how long the last refit took
        self._cost_since_fit = 0.0  # measuring seconds reported since the last refit
        self._told_since_fit = 0

    def pace_model(self, share: float, seconds: float) -> None:
        self._pace = (share, seconds)

    def tell(self, results: Sequence[MeasureResult]) -> None:
        super().tell(results)
        for r in results:
            self._cost_since_fit += r.run_seconds + r.compile_seconds
            self._told_since_fit += 1

    def _refit_due(self) -> bool:
        """With a pace: whether the last refit's time, spread over the measurements since,
        fits the pace (a share of their measuring time, or a floor per measurement).
        Measurements that report no cost (a replay) keep a refit per measurement."""
        if self._pace is None or not self.model.fitted or self._cost_since_fit <= 0:
            return True
        share, seconds = self._pace
        return self._fit_seconds <= max(share * self._cost_since_fit, seconds * self._told_since_fit)

    def _members(self) -> list[CostModel]:
        return list(self.model.models) if isinstance(self.model, BootstrapEnsemble) else [self.model]

    @property
    def accepts_prior(self) -> bool:
        """A prior fits only XGBoost models over the space's own parameters (not, say, a
        search whose model sees program features)."""
        return type(self.features) is FeatureExtractor and \
            all(isinstance(m, XGBRankModel) for m in self._members())

    def use_prior(self, model: XGBRankModel, workload_key: Mapping[str, Any] | None = None, *,
                  explore: bool = False) -> bool:
        """Start from `model` (pre-trained on other shapes or devices): its scores guide the
        first plans and fade as this search's own measurements arrive. The random start is
        skipped, or halved with `explore` (a model from other devices only, whose fastest
        region may lie elsewhere on this one)."""
        if not self.accepts_prior:
            return False
        self.features = FeatureExtractor(self.space, workload_key)
        for m in self._members():
            m.base, m.feature_names = model, self.features.names  # type: ignore[union-attr]
        self._fitted_on = -1
        self._prior = True
        self.random_start = self.initial // 2 if explore else 0
        return True

    # ---- to implement --------------------------------------------------------------------
    @abstractmethod
    def plan_with_model(self, n: int) -> list[Point]:
        """About `n` unseen points chosen with the fitted model."""

    def next_plan_size(self) -> int:
        """Small batches while data are few (each refit teaches much), up to MAX_PLAN."""
        if not self.adaptive_plan:
            return self.plan_size
        return int(min(MAX_PLAN, max(2, len(self.measured) // 8)))

    # ---- planning ------------------------------------------------------------------------
    def plan(self, n: int) -> list[Point]:
        ok = sum(1 for t in self.measured.values() if math.isfinite(t))
        starting = len(self.measured) < self.random_start or (ok < 2 and not self._prior)
        if starting:
            return self.space_filling(min(n, max(1, self.random_start - len(self.measured))) if ok >= 2 else n)
        self.refit()
        if not self.model.fitted:
            return []
        chosen = self.plan_with_model(n)
        explore = sum(self.rng.random() < self.epsilon for _ in range(len(chosen)))
        if explore:
            chosen = chosen[: len(chosen) - explore] + self.fresh_random(explore, set(chosen))
        return chosen

    def refit(self) -> None:
        if self._fitted_on == len(self.measured) or not self._refit_due():
            return
        start = time.perf_counter()
        points, times = self.arrays()
        X = self.features.points(points)
        if self.rejected or self.classify_failures:
            self.failures.fit(X, ~np.isfinite(times))
        if self.rejected:
            ran = np.asarray([p not in self.rejected for p in points], dtype=bool)
            self.model.fit(X[ran], times[ran])
        else:
            self.model.fit(X, times)
        first = self._fitted_on < 0
        self._fitted_on = len(self.measured)
        # the first fit's time is mostly importing the model's library: not a fit's cost
        self._fit_seconds = 0.0 if first else time.perf_counter() - start
        self._cost_since_fit = 0.0
        self._told_since_fit = 0

    def score(self, points: list[Point]) -> np.ndarray:
        if not points:
            return np.zeros(0)
        return self.model.predict(self.features.points(points))

    def acquisition(self, points: list[Point]) -> np.ndarray:
        """What a plan maximizes: the model's score, with points predicted to be rejected
        by the builder ranked below every other (once there were rejections)."""
        if not points:
            return np.zeros(0)
        X = self.features.points(points)
        scores = self.model.predict(X)
        if not self.rejected or not self.failures.fitted:
            return scores
        doomed = self.failures.success(X) < 0.5
        return np.where(doomed, scores - (np.ptp(scores) + 1.0), scores)

    def top_unseen(self, candidates: list[Point], scores: np.ndarray, n: int) -> list[Point]:
        """The `n` best-scored candidates not measured or queued yet."""
        order = np.argsort(-scores, kind="stable")
        return unique((candidates[i] for i in order), self.seen_points)[:n]
