"""Start a key's search from what other keys of the same kernel taught.

Shapes of one kernel tend to share their good configurations, so a budget-limited
search of a new key first measures the best configurations recorded for the nearest
tuned keys (same kernel source, target and dtypes), then lets the strategy go on from
there; the strategy is told those results like any other.

Example:
    >>> from tensortune.space import Space, Config
    >>> from tensortune.search import create_strategy
    >>> space = Space({"B": [16, 32, 64, 128]})
    >>> s = Seeded(create_strategy("random", space, seed=0, budget=3), [Config(B=64)])
    >>> s.ask(2)[0]
    Config(B=64)
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

from ...db import Database, Target, Workload
from ...measure import MeasureResult
from ...search.base import SearchStrategy, WrappingStrategy
from ...space import Config, Space
from .keys import TuningKey
from .records import _in_space


class Seeded(WrappingStrategy):
    """Proposes `seeds` first (those in the space and not yet seen), then asks `inner`."""

    def __init__(self, inner: SearchStrategy, seeds: Sequence[Config]) -> None:
        super().__init__(inner.space, inner.seed, inner.budget)
        self.inner = inner
        self.seeds = list(dict.fromkeys(seeds))
        self.name = f"{inner.name or 'custom'}+seeded"

    def ask(self, n: int) -> list[Config]:
        out: list[Config] = []
        while self.seeds and len(out) < n:
            c = self.seeds.pop(0)
            if c not in self.inner.seen and _in_space(self.space, c):
                self.inner.seen.add(c)  # so the inner strategy does not propose it as well
                out.append(c)
        if len(out) < n:
            out += self.inner.ask(n - len(out))
        self.seen.update(out)
        return out

    def tell(self, results: Sequence[MeasureResult]) -> None:
        super().tell(results)
        self.inner.tell(results)


def seed_configs(db: Database, workload: Workload, target: Target, key: TuningKey, space: Space,
                 limit: int, keys_considered: int = 3) -> list[Config]:
    """The best recorded configurations of the nearest other keys (nearest key first)."""
    near: list[tuple[float, Workload]] = []
    for other, n, best in db.workloads():
        if (other.name, other.source_hash) != (workload.name, workload.source_hash) or other.key_json == \
                workload.key_json or not n or best is None:
            continue
        d = key.distance(TuningKey.from_dict(key.names, json.loads(other.key_json)))
        if math.isfinite(d):
            near.append((d, other))
    seeds: list[Config] = []
    per_key = max(1, limit // max(1, min(keys_considered, len(near))))
    for _, other in sorted(near, key=lambda x: x[0])[:keys_considered]:
        ranked = [r.config for r in db.top_k(other, target, k=4 * per_key) if _in_space(space, r.config)]
        seeds += [c for c in ranked if c not in seeds][:per_key]
    return seeds[:limit]
