"""A Gaussian process over the choice indices of a space, scored by its upper confidence bound.

Trees rank what they have seen well but cannot extrapolate: beyond the largest tile they
were shown, they predict flat. A Gaussian process with a smooth kernel over each
parameter's position in its range (index / (choices - 1), so every parameter spans 0..1)
carries a trend to the edges of the ranges and is most uncertain where nothing near was
measured, which is where the fastest tiles of many spaces lie (docs/benchmarks/strategies.md:
pnpoly's trap and the conv2d sketch needle). It is fitted on log times, standardized; a
failed configuration counts as half a unit of log time worse than the slowest success.
Matérn 5/2 kernel, fixed length scale, numpy only; the `max_points` best measurements
at most (Cholesky costs n^3).

`ucb` returns -mean + beta * std of the predicted log time: higher is more promising, as
a cost model's scores.

Example:
    >>> import numpy as np
    >>> X = np.linspace(0, 1, 9)[:, None]
    >>> gp = GaussianProcess().fit(X[:5], np.exp(-X[:5, 0]))   # faster towards the right
    >>> int(np.argmax(gp.ucb(X)))                              # extrapolates past the last point
    8
"""

from __future__ import annotations

import math

import numpy as np

FAILURE_PENALTY = 0.5  # log-time units beyond the slowest success


class GaussianProcess:
    """GP regression of log time on normalized choice indices."""

    def __init__(self, length_scale: float = 1.0, beta: float = 2.0, noise: float = 1e-3,
                 max_points: int = 1024) -> None:
        self.length_scale = length_scale
        self.beta = beta
        self.noise = noise
        self.max_points = max_points
        self._train: np.ndarray | None = None

    @property
    def fitted(self) -> bool:
        return self._train is not None

    def _kernel(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        sq = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * a @ b.T
        d = np.sqrt(np.clip(sq, 0.0, None)) * (math.sqrt(5.0) / self.length_scale)
        return (1.0 + d + d * d / 3.0) * np.exp(-d)

    def fit(self, X: np.ndarray, times: np.ndarray) -> "GaussianProcess":
        """Fit on rows in [0, 1] and their times (inf = failed)."""
        X = np.asarray(X, dtype=np.float64)
        times = np.asarray(times, dtype=np.float64)
        ok = np.isfinite(times) & (times > 0)
        if not ok.any():
            self._train = None
            return self
        y = np.empty(len(times))
        y[ok] = np.log(times[ok])
        y[~ok] = y[ok].max() + FAILURE_PENALTY
        if len(y) > self.max_points:
            keep = np.argsort(y, kind="stable")[: self.max_points]
            X, y = X[keep], y[keep]
        self._mean, self._scale = float(y.mean()), float(y.std()) or 1.0
        y = (y - self._mean) / self._scale
        K = self._kernel(X, X) + self.noise * np.eye(len(X))
        self._chol = np.linalg.cholesky(K)
        self._alpha = np.linalg.solve(self._chol.T, np.linalg.solve(self._chol, y))
        self._train = X
        return self

    def predict(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and standard deviation of the standardized log time."""
        if self._train is None:
            raise RuntimeError("GaussianProcess.predict before a successful fit")
        X = np.asarray(X, dtype=np.float64)
        k = self._kernel(X, self._train)
        v = np.linalg.solve(self._chol, k.T)
        var = np.clip(1.0 - (v * v).sum(0), 1e-12, None)
        return k @ self._alpha, np.sqrt(var)

    def ucb(self, X: np.ndarray) -> np.ndarray:
        """Upper confidence bound on speed: -mean + beta * std (higher is better)."""
        mean, std = self.predict(X)
        return -mean + self.beta * std


def normalized(points: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Choice indices scaled to 0..1 per parameter (a parameter with one choice is 0)."""
    return np.asarray(points, dtype=np.float64) / np.maximum(np.asarray(sizes, dtype=np.float64) - 1.0, 1.0)
