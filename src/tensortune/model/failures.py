"""A classifier of which configurations fail: the other half of a cost model.

A ranking model answers "which is faster"; whether a configuration runs at all (does it
fit in shared memory, does it compile) is a boundary, better learned on its own. This is
gradient boosted trees with a logistic loss on failed versus successful points.

Example:
    >>> import numpy as np
    >>> X = np.arange(40, dtype=float).reshape(-1, 1)
    >>> c = FailureClassifier(seed=0)
    >>> c.fit(X, X[:, 0] > 30)
    >>> p = c.success(np.array([[5.0], [38.0]]))
    >>> bool(p[0] > 0.5 > p[1])
    True
"""

from __future__ import annotations

import numpy as np


class FailureClassifier:
    """P(success) of feature rows, from xgboost's logistic loss on failed versus successful."""

    def __init__(self, seed: int | None = 0, rounds: int = 20, max_depth: int = 3) -> None:
        self.seed, self.rounds, self.max_depth = seed, rounds, max_depth
        self.booster = None

    @property
    def fitted(self) -> bool:
        return self.booster is not None

    def fit(self, features: np.ndarray, failed: np.ndarray) -> None:
        import xgboost as xgb

        failed = np.asarray(failed, dtype=bool)
        if failed.all() or not failed.any():
            self.booster = None  # nothing to tell apart
            return
        d = xgb.DMatrix(features, label=(~failed).astype(float), nthread=1)
        self.booster = xgb.train({"objective": "binary:logistic", "max_depth": self.max_depth, "eta": 0.3,
                                  "nthread": 1, "verbosity": 0, "tree_method": "hist",
                                  "seed": int(self.seed or 0) % (2**31)}, d, self.rounds)

    def success(self, features: np.ndarray) -> np.ndarray:
        """The predicted chance that each row runs (1 where nothing has failed yet)."""
        if self.booster is None:
            return np.ones(len(features))
        return self.booster.inplace_predict(features)
