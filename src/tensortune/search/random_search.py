"""Uniform random sampling without replacement.

Small spaces are shuffled once; large ones are sampled and de-duplicated.

Example:
    >>> from tensortune.space import Space
    >>> s = RandomSearch(Space({"a": list(range(10))}), seed=1)
    >>> len(set(s.ask(10)))
    10
"""

from __future__ import annotations

from ..space import Config, Space
from .base import SearchStrategy

SHUFFLE_LIMIT = 200_000


class RandomSearch(SearchStrategy):
    name = "random"

    def __init__(self, space: Space, seed: int | None = None, budget: int | None = None) -> None:
        super().__init__(space, seed, budget)
        self._order: list[Config] | None = None
        if space.size_is_exact and space.size <= SHUFFLE_LIMIT:
            pool = list(space)
            self._order = [pool[i] for i in self.rng.permutation(len(pool))]

    def ask(self, n: int) -> list[Config]:
        out: list[Config] = []
        if self._order is not None:
            while self._order and len(out) < n:
                cfg = self._order.pop()
                if self.propose(cfg):
                    out.append(cfg)
            return out
        misses = 0
        while len(out) < n and misses < 1000:
            cfg = self.space.sample(1, self.rng)[0]
            if self.propose(cfg):
                out.append(cfg)
                misses = 0
            else:
                misses += 1
        return out
