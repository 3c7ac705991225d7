"""Gradient boosted trees trained to rank configurations, as AutoTVM's cost model.

XGBoost's `rank:pairwise` objective learns which of two configurations is faster, which
is all a search needs, and is robust to times that span orders of magnitude. Labels are
best time / time within each group of rows measured together (a workload on a target);
failed configurations rank below every successful one. Trees are few and shallow and
fitting uses one thread, so refitting after every batch costs milliseconds.

A model can start from another (`base`): it is pre-trained on records of other shapes or
devices, and its scores are added to the new model's with a weight that halves every
`base_halflife` new measurements (AutoTVM's transfer scheme), so new measurements take
over as they arrive.

Example:
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.random((200, 3))
    >>> times = 1.0 + X[:, 0] + 0.1 * X[:, 1]
    >>> m = XGBRankModel(seed=0)
    >>> m.fit(X[:100], times[:100])
    >>> pred = m.predict(X[100:])
    >>> bool(np.corrcoef(pred, -times[100:])[0, 1] > 0.8)
    True
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .base import CostModel, relevance


OBJECTIVES = {"rank": "rank:pairwise", "regression": "reg:squarederror"}


@dataclass(frozen=True)
class XGBParams:
    """Booster settings; the defaults are cheap (tens of shallow trees, one thread)."""

    rounds: int = 60
    max_depth: int = 5
    eta: float = 0.2
    subsample: float = 1.0
    colsample_bytree: float = 1.0
    min_child_weight: float = 0.0
    pairs_per_row: int = 8
    # extra ranking groups made of each group's best fraction, so that the order among
    # good configurations (what a search needs) weighs more than the order in the bulk
    emphasis: tuple[float, ...] = (0.3, 0.1)
    nthread: int = 1
    # "rank": pairwise ranking; "regression": squared error on the relevance labels
    objective: str = "rank"

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ValueError(f"unknown cost-model objective {self.objective!r}; choose one of {sorted(OBJECTIVES)}")


class XGBRankModel(CostModel):
    """XGBoost with a pairwise ranking objective over named feature columns."""

    def __init__(self, params: XGBParams | None = None, seed: int | None = 0,
                 feature_names: Sequence[str] | None = None, base: "XGBRankModel | None" = None,
                 base_halflife: float = 64.0) -> None:
        self.params = params or XGBParams()
        self.seed = seed
        self.feature_names = list(feature_names) if feature_names is not None else None
        self.base = base
        self.base_halflife = base_halflife
        self.booster: Any = None
        self.trained_rows = 0

    # ---- training -----------------------------------------------------------------------
    def _xgb_params(self) -> dict[str, Any]:
        p = self.params
        ranking = {"lambdarank_pair_method": "mean", "lambdarank_num_pair_per_sample": p.pairs_per_row} \
            if p.objective == "rank" else {}
        return {
            "objective": OBJECTIVES[p.objective], **ranking,
            "max_depth": p.max_depth, "eta": p.eta, "subsample": p.subsample,
            "colsample_bytree": p.colsample_bytree, "min_child_weight": p.min_child_weight,
            "tree_method": "hist", "nthread": p.nthread, "verbosity": 0,
            "seed": 0 if self.seed is None else int(self.seed) % (2**31),
        }

    def fit(self, features: np.ndarray, times: np.ndarray, groups: Sequence[int] | None = None) -> None:
        import xgboost as xgb

        X = np.asarray(features, dtype=np.float64)
        times = np.asarray(times, dtype=np.float64)
        sizes = list(groups) if groups is not None else [len(X)]
        if sum(sizes) != len(X):
            raise ValueError(f"group sizes add up to {sum(sizes)}, but there are {len(X)} rows")
        labels = np.concatenate([relevance(times[s:s + n]) for s, n in
                                 zip(np.cumsum([0] + sizes[:-1]), sizes)]) if len(X) else times
        self.trained_rows = len(X)
        if len(X) < 2 or len(np.unique(labels)) < 2:
            self.booster = None  # nothing to rank yet: the base model (or nothing) decides
            return
        if self.params.objective == "rank":
            X, labels, qid = self._with_emphasis(X, times, labels, sizes)
            dtrain = xgb.DMatrix(X, label=labels, qid=qid, nthread=self.params.nthread)
        else:
            dtrain = xgb.DMatrix(X, label=labels, nthread=self.params.nthread)
        margin = self._base_margin(X)
        if margin is not None:
            dtrain.set_base_margin(margin)
        self.booster = xgb.train(self._xgb_params(), dtrain, num_boost_round=self.params.rounds)

    def _with_emphasis(self, X: np.ndarray, times: np.ndarray, labels: np.ndarray,
                       sizes: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rows, labs, qids = [X], [labels], [np.repeat(np.arange(len(sizes)), sizes)]
        q = len(sizes)
        for start, n in zip(np.cumsum([0] + sizes[:-1]), sizes):
            t = times[start:start + n]
            order = np.argsort(t, kind="stable")
            ok = int(np.isfinite(t).sum())
            for frac in self.params.emphasis:
                k = int(frac * ok)
                if k < 4:
                    continue
                idx = start + order[:k]
                rows.append(X[idx])
                labs.append(relevance(times[idx]))
                qids.append(np.full(k, q))
                q += 1
        return np.concatenate(rows), np.concatenate(labs), np.concatenate(qids)

    def _base_weight(self) -> float:
        return 0.5 ** (self.trained_rows / self.base_halflife)

    def _base_margin(self, X: np.ndarray) -> np.ndarray | None:
        if self.base is None or not self.base.fitted:
            return None
        return self._base_weight() * self.base.predict(X, self.feature_names)

    # ---- scoring ------------------------------------------------------------------------
    @property
    def fitted(self) -> bool:
        return self.booster is not None or (self.base is not None and self.base.fitted)

    def predict(self, features: np.ndarray, names: Sequence[str] | None = None) -> np.ndarray:
        """Scores (higher = faster). With `names`, columns are matched to the model's by name,
        and columns the model knows but `features` lack are missing values."""
        X = self._align(np.asarray(features, dtype=np.float64), names)
        out = np.zeros(len(X))
        margin = self._base_margin(X)
        if margin is not None:
            out += margin
        if self.booster is not None:
            out += self.booster.inplace_predict(X, predict_type="margin")
        return out

    def _align(self, X: np.ndarray, names: Sequence[str] | None) -> np.ndarray:
        if names is None or self.feature_names is None or list(names) == self.feature_names:
            return X
        where = {n: i for i, n in enumerate(names)}
        out = np.full((len(X), len(self.feature_names)), np.nan)
        for j, n in enumerate(self.feature_names):
            if n in where:
                out[:, j] = X[:, where[n]]
        return out

    # ---- persistence --------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "xgb_rank", "params": asdict(self.params), "seed": self.seed,
            "feature_names": self.feature_names, "trained_rows": self.trained_rows,
            "base_halflife": self.base_halflife,
            "booster": bytes(self.booster.save_raw("json")).decode() if self.booster is not None else None,
            "base": self.base.to_json() if self.base is not None else None,
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> "XGBRankModel":
        import xgboost as xgb

        if data.get("kind") != "xgb_rank":
            raise ValueError(f"not a saved XGBRankModel (kind {data.get('kind')!r})")
        base = XGBRankModel.from_json(data["base"]) if data.get("base") else None
        params = dict(data["params"], emphasis=tuple(data["params"].get("emphasis", ())))
        m = XGBRankModel(XGBParams(**params), data.get("seed"), data.get("feature_names"),
                         base, data.get("base_halflife", 64.0))
        m.trained_rows = int(data.get("trained_rows", 0))
        if data.get("booster"):
            m.booster = xgb.Booster()
            m.booster.load_model(bytearray(data["booster"].encode()))
        return m

    def save(self, path: str | os.PathLike[str]) -> None:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_json(), f)

    @staticmethod
    def load(path: str | os.PathLike[str]) -> "XGBRankModel":
        try:
            with open(path, encoding="utf-8") as f:
                return XGBRankModel.from_json(json.load(f))
        except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}: not a saved cost model ({exc})") from exc
