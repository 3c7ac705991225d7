"""How well the cost model ranks a measured space it saw only part of.

For each of several random splits, the model is trained on `train_fraction` of a
dataset's configurations (failures included, as the search would see them) and scores
the rest. Reported, averaged over splits: Kendall's tau between scores and true speed
on the successful held-out configurations, and the top-1 / top-5 error: how much slower
(in percent) the best of the model's k highest-scored held-out configurations is than
the best held-out configuration. A split where all k of them fail has no such figure:
it is counted apart (`top1_failed_splits`, `top5_failed_splits`), and the error is the
mean over the other splits.

Example:
    >>> r = evaluate_model("../shared/datasets/kernel_tuner/pnpoly-RTX_3090.json.gz", splits=1)
    >>> r.kendall_tau > 0.5
    True
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from ..datasets import load_kernel_tuner_cache
from ..model import BootstrapEnsemble, CostModel, FeatureExtractor, XGBParams, XGBRankModel, kendall_tau, top_k_error
from ..space import Config


@dataclass(frozen=True)
class ModelQuality:
    dataset: str
    train_fraction: float
    splits: int
    kendall_tau: float
    top1_error_pct: float
    top5_error_pct: float
    fit_seconds: float
    train_rows: int
    top1_failed_splits: int = 0
    top5_failed_splits: int = 0

    def to_json(self) -> dict[str, float | int | None]:
        d = asdict(self)
        d.pop("dataset")
        return {k: (round(v, 4) if math.isfinite(v) else None) if isinstance(v, float) else v
                for k, v in d.items()}


def _mean_of_ran(errors: list[float]) -> tuple[float, int]:
    """The mean of the finite errors, and how many were not (every pick failed)."""
    ran = [e for e in errors if math.isfinite(e)]
    return (float(np.mean(ran)) if ran else math.inf), len(errors) - len(ran)


def evaluate_model(path: str | os.PathLike[str], train_fraction: float = 0.1, splits: int = 10,
                   seed: int = 0, params: XGBParams | None = None, members: int = 1,
                   extra_features: Callable[[Sequence[Config]], np.ndarray] | None = None) -> ModelQuality:
    """Train on a random `train_fraction` of the dataset, score the rest; average over splits.
    With `members` > 1 the model is a bootstrap ensemble of that many (scored by their mean).
    `extra_features` maps the configurations to more columns (one row each), appended to the
    extractor's features."""
    if not 0 < train_fraction < 1:
        raise ValueError(f"train fraction must be between 0 and 1, got {train_fraction}")
    ds = load_kernel_tuner_cache(path)
    fx = FeatureExtractor(ds.space)
    configs = list(ds.results)
    times = np.asarray([ds.results[c].time for c in configs])
    X = fx.configs(configs)
    names = list(fx.names)
    if extra_features is not None:
        extra = np.asarray(extra_features(configs), dtype=float).reshape(len(configs), -1)
        X = np.hstack([X, extra])
        names += [f"extra.{i}" for i in range(extra.shape[1])]
    n_train = max(2, int(round(train_fraction * len(configs))))
    taus, top1, top5, fit = [], [], [], []
    for split in range(splits):
        order = np.random.default_rng(seed + split).permutation(len(configs))
        train, test = order[:n_train], order[n_train:]
        model: CostModel = XGBRankModel(params, seed=seed + split, feature_names=names) if members == 1 \
            else BootstrapEnsemble(members, params, seed + split, names)
        start = time.perf_counter()
        model.fit(X[train], times[train])
        fit.append(time.perf_counter() - start)
        scores = model.predict(X[test])
        ok = np.isfinite(times[test])
        taus.append(kendall_tau(scores[ok], -times[test][ok]))
        top1.append(top_k_error(scores, times[test], 1))
        top5.append(top_k_error(scores, times[test], 5))
    (err1, failed1), (err5, failed5) = _mean_of_ran(top1), _mean_of_ran(top5)
    return ModelQuality(ds.name, train_fraction, splits, float(np.mean(taus)), err1, err5,
                        float(np.median(fit)), n_train, failed1, failed5)
