"""The cost-model interface: fit on measured times, score unmeasured configurations.

A cost model only has to rank: `predict` returns scores where higher means faster.
Failed configurations are told as infinite times, so a model learns to avoid them.

Example:
    >>> import numpy as np
    >>> m = RandomModel(seed=0)
    >>> m.fit(np.zeros((2, 1)), np.array([1.0, np.inf]))
    >>> m.predict(np.zeros((3, 1))).shape
    (3,)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np


class CostModel(ABC):
    """Scores feature rows; higher scores are predicted faster."""

    @abstractmethod
    def fit(self, features: np.ndarray, times: np.ndarray, groups: Sequence[int] | None = None) -> None:
        """Learn from rows and their times (inf = failed); `groups` gives the size of each
        run of rows measured on one workload and target (ranked among themselves)."""

    @abstractmethod
    def predict(self, features: np.ndarray) -> np.ndarray:
        """One score per row; only the order matters."""

    @property
    def fitted(self) -> bool:
        return True


class RandomModel(CostModel):
    """Random scores: the baseline a learned model must beat."""

    def __init__(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng(seed)

    def fit(self, features: np.ndarray, times: np.ndarray, groups: Sequence[int] | None = None) -> None:
        pass

    def predict(self, features: np.ndarray) -> np.ndarray:
        return self.rng.random(len(features))


def relevance(times: np.ndarray) -> np.ndarray:
    """Ranking labels in [0, 1]: best time / time, and 0 for failures."""
    times = np.asarray(times, dtype=np.float64)
    ok = np.isfinite(times) & (times > 0)
    out = np.zeros(len(times))
    if ok.any():
        out[ok] = times[ok].min() / times[ok]
    return out
