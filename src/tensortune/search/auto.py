"""The default strategy: exhaustive when the budget covers the space, else model-guided.

How it chooses:

- the budget covers every valid configuration (the space's size is exact and at most
  the budget): `exhaustive`, since nothing can beat measuring everything;
- otherwise: `evolutionary`, the cost-model-guided evolutionary search, which scored
  best on the replay benchmark (docs/benchmarks/strategies.md) at 20, 50 and 200
  measurements and tied `model_based` at 100 for less search time; options given to
  `auto` go to it.

Example:
    >>> from tensortune.space import Space
    >>> type(AutoSearch(Space({"a": [1, 2]}), budget=10).inner).__name__
    'ExhaustiveSearch'
    >>> type(AutoSearch(Space({"a": list(range(100))}), budget=10).inner).__name__
    'EvolutionarySearch'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..measure import MeasureResult
from ..space import Config, Space
from .base import SearchStrategy, WrappingStrategy
from .evolutionary import EvolutionarySearch
from .exhaustive import ExhaustiveSearch


class AutoSearch(WrappingStrategy):
    name = "auto"

    def __init__(self, space: Space, seed: int | None = None, budget: int | None = None,
                 **options: Any) -> None:
        super().__init__(space, seed, budget)
        covers = budget is not None and space.size_is_exact and space.size <= budget
        self.inner: SearchStrategy = ExhaustiveSearch(space, seed, budget) if covers else \
            EvolutionarySearch(space, seed, budget, **options)

    def ask(self, n: int) -> list[Config]:
        out = self.inner.ask(n)
        self.seen.update(out)
        return out

    def tell(self, results: Sequence[MeasureResult]) -> None:
        super().tell(results)
        self.inner.tell(results)
