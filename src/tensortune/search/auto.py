"""The default strategy: exhaustive when the budget covers the space, else random.

The strategies issue replaces the fallback with the best performer on the benchmark.

Example:
    >>> from tensortune.space import Space
    >>> type(AutoSearch(Space({"a": [1, 2]}), budget=10).inner).__name__
    'ExhaustiveSearch'
"""

from __future__ import annotations

from collections.abc import Sequence

from ..measure import MeasureResult
from ..space import Config, Space
from .base import SearchStrategy
from .exhaustive import ExhaustiveSearch
from .random_search import RandomSearch


class AutoSearch(SearchStrategy):
    name = "auto"

    def __init__(self, space: Space, seed: int | None = None, budget: int | None = None) -> None:
        super().__init__(space, seed, budget)
        covers = budget is None or (space.size_is_exact and space.size <= budget)
        self.inner: SearchStrategy = (ExhaustiveSearch if covers else RandomSearch)(space, seed, budget)

    def ask(self, n: int) -> list[Config]:
        return self.inner.ask(n)

    def tell(self, results: Sequence[MeasureResult]) -> None:
        super().tell(results)
        self.inner.tell(results)
