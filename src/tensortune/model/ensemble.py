"""A bootstrap ensemble of ranking models: where its members disagree, the model is unsure.

Each member is fitted on a resample (with replacement) of the measurements. The members'
mean score is a steadier estimate than any one model, and their spread says where the
data leave doubt (`model_based` adds it to the mean as an optimism bonus).

Example:
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.random((60, 2))
    >>> m = BootstrapEnsemble(members=3, seed=0)
    >>> m.fit(X, 1.0 + X[:, 0])
    >>> m.predict_members(X).shape
    (3, 60)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .base import CostModel
from .xgb_rank import XGBParams, XGBRankModel


class BootstrapEnsemble(CostModel):
    """`members` XGBRankModels, each on a bootstrap resample of the rows."""

    def __init__(self, members: int = 4, params: XGBParams | None = None, seed: int | None = 0,
                 feature_names: Sequence[str] | None = None, base: XGBRankModel | None = None) -> None:
        if members < 1:
            raise ValueError(f"an ensemble needs at least one member, got {members}")
        self.rng = np.random.default_rng(seed)
        self.models = [XGBRankModel(params, None if seed is None else seed * 1000 + i, feature_names, base)
                       for i in range(members)]

    def fit(self, features: np.ndarray, times: np.ndarray, groups: Sequence[int] | None = None) -> None:
        features = np.asarray(features, dtype=np.float64)
        times = np.asarray(times, dtype=np.float64)
        sizes = list(groups) if groups is not None else [len(features)]
        starts = np.cumsum([0] + sizes[:-1])
        for model in self.models:
            # resample within each group, so groups stay whole
            idx = np.concatenate([s + self.rng.integers(n, size=n) for s, n in zip(starts, sizes)]) \
                if len(features) else np.zeros(0, dtype=np.int64)
            model.fit(features[idx], times[idx], sizes)

    @property
    def fitted(self) -> bool:
        return all(m.fitted for m in self.models)

    def predict_members(self, features: np.ndarray) -> np.ndarray:
        """One row of scores per member."""
        return np.stack([m.predict(features) for m in self.models])

    def predict(self, features: np.ndarray) -> np.ndarray:
        """The members' mean score (members share an objective, so their scales agree)."""
        return self.predict_members(features).mean(axis=0)
