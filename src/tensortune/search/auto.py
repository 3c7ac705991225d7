"""The default strategy: exhaustive when the budget covers the space, else model-guided.

How it chooses:

- the budget covers every valid configuration (the space's size is exact and at most
  the budget): `exhaustive`, since nothing can beat measuring everything;
- a budget of `SCREENED_FROM` (100) measurements or more: `screened_tpe`, TPE screened by
  the cost model, which ties or leads `evolutionary` there on the replay benchmark and
  raises its worst spaces (docs/benchmarks/strategies_experiments.md, "The default from 100
  measurements up");
- fewer measurements, or a time budget with no trial count: `evolutionary`, the
  cost-model-guided evolutionary search, best at 20 and 50 measurements.

A pre-trained model (transfer, `use_prior`) on a budget of 100 or more is taken only when
it was learned on this device (other shapes): then `evolutionary` replaces `screened_tpe`,
since its large population ranked by the model is what makes transfer pay (a prior only
screening a few TPE draws scored below a cold start in both directions between two GPUs).
A model from other devices only is declined there: across GPUs it scored below
`screened_tpe`'s cold start at 100 measurements (docs/benchmarks/strategies_experiments.md,
"The default from 100 measurements up"). Options given to `auto` go to the strategy it
chose; one that the chosen strategy does not take is an error that names the strategy to
ask for instead, an option no candidate takes is an error at once, and a prior that would
need a strategy the options do not fit is declined. With `exhaustive` the options cannot
matter and are ignored.

Example:
    >>> from tensortune.space import Space
    >>> type(AutoSearch(Space({"a": [1, 2]}), budget=10).inner).__name__
    'ExhaustiveSearch'
    >>> type(AutoSearch(Space({"a": list(range(1000))}), budget=50).inner).__name__
    'EvolutionarySearch'
    >>> type(AutoSearch(Space({"a": list(range(1000))}), budget=100).inner).__name__
    'ScreenedTPESearch'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..measure import MeasureResult
from ..space import Config, Space
from .base import SearchStrategy, WrappingStrategy
from .evolutionary import EvolutionarySearch
from .exhaustive import ExhaustiveSearch
from .screened_tpe import ScreenedTPESearch

SCREENED_FROM = 100  # measurements from which `screened_tpe` is chosen


class AutoSearch(WrappingStrategy):
    name = "auto"
    candidates: tuple[type[SearchStrategy], ...] = (EvolutionarySearch, ScreenedTPESearch)

    def __init__(self, space: Space, seed: int | None = None, budget: int | None = None,
                 **options: Any) -> None:
        super().__init__(space, seed, budget)
        unknown = set(options) - self.option_names()
        if unknown:
            raise TypeError(f"auto does not take the option(s) {sorted(unknown)}: none of the strategies it "
                            f"chooses from ({', '.join(k.name for k in self.candidates)}) does")
        self.options = options
        covers = budget is not None and space.size_is_exact and space.size <= budget
        if covers:
            self.inner: SearchStrategy = ExhaustiveSearch(space, seed, budget)
        elif budget is not None and budget >= SCREENED_FROM:
            self.inner = self._chosen(ScreenedTPESearch)
        else:
            self.inner = self._chosen(EvolutionarySearch)

    @classmethod
    def option_names(cls) -> set[str]:
        return set().union(*(k.option_names() for k in cls.candidates))

    def _fits(self, kind: type[SearchStrategy]) -> bool:
        return set(self.options) <= kind.option_names()

    def _chosen(self, kind: type[SearchStrategy]) -> SearchStrategy:
        if not self._fits(kind):
            foreign = sorted(set(self.options) - kind.option_names())
            owners = [k.name for k in self.candidates if set(foreign) <= k.option_names()]
            hint = f"; pass strategy={owners[0]!r} to use them" if owners else ""
            raise TypeError(f"auto chose {kind.name} for a budget of {self.budget}, which does not take "
                            f"the option(s) {foreign}{hint}")
        return kind(self.space, self.seed, self.budget, **self.options)

    def use_prior(self, model: Any, workload_key: Mapping[str, Any] | None = None, *,
                  explore: bool = False) -> bool:
        if isinstance(self.inner, ScreenedTPESearch):
            if explore or self.inner.history or self.inner.seen or not self._fits(EvolutionarySearch):
                return False
            self.inner = self._chosen(EvolutionarySearch)
        return super().use_prior(model, workload_key, explore=explore)

    def ask(self, n: int) -> list[Config]:
        out = self.inner.ask(n)
        self.seen.update(out)
        return out

    def tell(self, results: Sequence[MeasureResult]) -> None:
        super().tell(results)
        self.inner.tell(results)
