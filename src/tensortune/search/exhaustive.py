"""Every valid configuration, in the space's order.

Example:
    >>> from tensortune.space import Space
    >>> s = ExhaustiveSearch(Space({"a": [1, 2]}))
    >>> s.ask(10)
    [Config(a=1), Config(a=2)]
"""

from __future__ import annotations

from ..space import Config, Space
from .base import SearchStrategy


class ExhaustiveSearch(SearchStrategy):
    name = "exhaustive"

    def __init__(self, space: Space, seed: int | None = None, budget: int | None = None) -> None:
        super().__init__(space, seed, budget)
        self._iter = iter(space)

    def ask(self, n: int) -> list[Config]:
        out: list[Config] = []
        for cfg in self._iter:
            if self.propose(cfg):
                out.append(cfg)
                if len(out) == n:
                    break
        return out
