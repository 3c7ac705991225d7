"""Pre-train a cost model on the records database: start a new tuning from what was learned.

Records of other workloads (shapes) and targets (devices) are turned into features of
the new space by name (configuration values and workload key), one ranking group per
(workload, target), so the model learns orderings that transfer rather than absolute
times. Pass the result as `base_model` to a model-guided strategy: its scores start the
search and fade as the new workload's own measurements arrive.

Example:
    >>> from tensortune.db import Database, Workload, Target
    >>> from tensortune.measure import MeasureResult
    >>> from tensortune.space import Space, Config
    >>> db = Database(":memory:")
    >>> space = Space({"BLOCK": [16, 32, 64, 128]})
    >>> for n in (256, 512):
    ...     for b in (16, 32, 64, 128):
    ...         _ = db.add(Workload.make("mm", key={"N": n}), Target.make("cpu", "x"),
    ...                MeasureResult(Config(BLOCK=b), (abs(b - 64) + 1.0,)))
    >>> model = pretrain_from_db(db, FeatureExtractor(space, {"N": 1024}), name="mm")
    >>> scores = model.predict(FeatureExtractor(space, {"N": 1024}).configs(list(space)))
    >>> [c["BLOCK"] for c in list(space)][int(scores.argmax())]
    64
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ..db import Database, Record, Target, Workload
from .features import FeatureExtractor
from .xgb_rank import XGBParams, XGBRankModel


def training_groups(records: Iterable[Record], extractor: FeatureExtractor,
                    max_per_group: int = 2000) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Feature rows, times (inf = failed) and group sizes, one group per (workload, target)."""
    groups: dict[tuple[Workload, Target], list[Record]] = {}
    for rec in records:
        groups.setdefault((rec.workload, rec.target), []).append(rec)
    rows, times, sizes = [], [], []
    for (workload, _target), recs in groups.items():
        latest = {r.config: r for r in recs}  # one record per configuration
        recs = list(latest.values())[-max_per_group:]
        if len(recs) < 2:
            continue
        rows.append(extractor.foreign([r.config for r in recs], workload.key))
        times.append(np.asarray([r.time for r in recs], dtype=np.float64))
        sizes.append(len(recs))
    if not sizes:
        return np.zeros((0, extractor.width)), np.zeros(0), []
    return np.concatenate(rows), np.concatenate(times), sizes


def pretrain_from_db(db: Database, extractor: FeatureExtractor, name: str | None = None,
                     exclude: Workload | None = None, params: XGBParams | None = None,
                     seed: int | None = 0) -> XGBRankModel:
    """A model fitted to the records of workloads called `name` (all when None),
    leaving out `exclude` (typically the workload about to be tuned)."""
    records: list[Record] = []
    for workload, _count, _best in db.workloads():
        if (name is not None and workload.name != name) or workload == exclude:
            continue
        records.extend(db.records(workload))
    return _fitted(records, extractor, params, seed)


def transfer_records(db: Database, workload: Workload, target: Target) -> list[Record]:
    """The records that apply to tuning `workload` on `target`: the other keys (shapes) of
    the same kernel (same name and source) on any target, and this key on other targets.
    The records of this very workload and target are left out: the search is told them
    directly."""
    records: list[Record] = []
    for other, _count, _best in db.workloads():
        if (other.name, other.source_hash) != (workload.name, workload.source_hash):
            continue
        records.extend(r for r in db.records(other) if other != workload or r.target != target)
    return records


def transfer_model(db: Database, extractor: FeatureExtractor, workload: Workload, target: Target,
                   params: XGBParams | None = None, seed: int | None = 0,
                   min_records: int = 8) -> XGBRankModel | None:
    """A model fitted to `transfer_records`; None when fewer than `min_records` exist."""
    return model_of_records(transfer_records(db, workload, target), extractor, params, seed, min_records)


def model_of_records(records: list[Record], extractor: FeatureExtractor, params: XGBParams | None = None,
                     seed: int | None = 0, min_records: int = 8) -> XGBRankModel | None:
    """A model fitted to `records`; None when there are fewer than `min_records` or
    nothing could be learned from them."""
    if len(records) < min_records:
        return None
    model = _fitted(records, extractor, params, seed)
    return model if model.fitted else None


def _fitted(records: list[Record], extractor: FeatureExtractor, params: XGBParams | None,
            seed: int | None) -> XGBRankModel:
    X, times, sizes = training_groups(records, extractor)
    model = XGBRankModel(params, seed, extractor.names)
    if sizes:
        model.fit(X, times, sizes)
    return model
