"""What the records database already knows about a kernel's keys.

A key is *settled* when tuning it finished: the database holds a final record (the
winner, re-timed after the search, marked `extra["final"]`) or a finished tuning session
whose best configuration is still in the space. A settled key is never measured again.
For a key never tuned, the nearest settled key of the same kernel source (by log2
distance over the key values, same dtypes) can answer at once.

Example:
    >>> from tensortune.db import Database, Workload, Target
    >>> from tensortune.space import Space
    >>> db = Database(":memory:")
    >>> settled_config(db, Workload.make("k"), Target.make("cpu", "x"), Space({"B": [1, 2]})) is None
    True
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

from ...db import Database, Record, Target, Workload
from ...space import Config, Space
from .keys import TuningKey


def _in_space(space: Space, config: Config) -> bool:
    try:
        return space.is_valid(config)
    except Exception:  # noqa: BLE001 - a record of another space's shape is simply not usable
        return False


def final_record(db: Database, workload: Workload, target: Target, space: Space) -> Record | None:
    """The latest final record whose configuration is in `space`."""
    finals = [r for r in db.records(workload, target) if r.ok and r.extra.get("final")]
    for rec in reversed(finals):
        if _in_space(space, rec.config):
            return rec
    return None


def best_in_space(db: Database, workload: Workload, target: Target, space: Space) -> Record | None:
    for rec in db.top_k(workload, target, k=1_000_000):
        if _in_space(space, rec.config):
            return rec
    return None


def settled_config(db: Database, workload: Workload, target: Target, space: Space) -> Config | None:
    """The decided configuration of a key whose tuning finished, else None."""
    final = final_record(db, workload, target, space)
    if final is not None:
        return final.config
    if db.finished_sessions(workload, target):
        best = best_in_space(db, workload, target, space)
        if best is not None:
            return best.config
    return None


def recorded_config(db: Database, workload: Workload, target: Target, space: Space) -> Config | None:
    """The best configuration known for a key, settled or not."""
    settled = settled_config(db, workload, target, space)
    if settled is not None:
        return settled
    best = best_in_space(db, workload, target, space)
    return best.config if best is not None else None


def nearest_config(db: Database, workload: Workload, target: Target, key: TuningKey,
                   space: Space) -> tuple[Config, TuningKey] | None:
    """The recorded configuration of the nearest other key of the same kernel source."""
    candidates: list[tuple[float, Workload, TuningKey]] = []
    for other, n, best in db.workloads():
        if other.name != workload.name or other.source_hash != workload.source_hash:
            continue
        if other.key_json == workload.key_json or not n or best is None:
            continue
        other_key = TuningKey.from_dict(key.names, json.loads(other.key_json))
        d = key.distance(other_key)
        if math.isfinite(d):
            candidates.append((d, other, other_key))
    for _, other, other_key in sorted(candidates, key=lambda c: c[0]):
        config = recorded_config(db, other, target, space)
        if config is not None:
            return config, other_key
    return None


def workloads_of(db: Database, name: str, source_hash: str) -> Sequence[Workload]:
    return [w for w, _, _ in db.workloads() if w.name == name and w.source_hash == source_hash]
