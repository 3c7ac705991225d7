"""The ask/tell interface every search strategy implements, and a lazy registry.

A strategy proposes configurations (`ask`) and learns from results (`tell`). It never
proposes a configuration it has already proposed or been told about, so the tuner's
trial count is the number of unique configurations measured.

Example:
    >>> from tensortune.space import Space
    >>> s = create_strategy("random", Space({"a": [1, 2, 3]}), seed=0)
    >>> len(s.ask(5))
    3
"""

from __future__ import annotations

import importlib
import inspect
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from ..measure import MeasureResult
from ..space import Config, Space


class SearchStrategy(ABC):
    """Base of all strategies: keeps the history and the set of configurations seen."""

    name: ClassVar[str] = ""

    def __init__(self, space: Space, seed: int | None = None, budget: int | None = None) -> None:
        self.space = space
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.budget = budget  # the number of trials the tuner will allow, when known
        self.history: list[MeasureResult] = []
        self.seen: set[Config] = set()

    @classmethod
    def option_names(cls) -> set[str]:
        """The keyword options this strategy takes: those of its `__init__` and, where that
        passes `**options` on, of its bases'."""
        names: set[str] = set()
        for klass in cls.__mro__:
            init = klass.__dict__.get("__init__")
            if init is None:
                continue
            params = inspect.signature(init).parameters.values()
            names |= {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
            if not any(p.kind is p.VAR_KEYWORD for p in params):
                break
        return names - {"self", "space", "seed", "budget"}

    @abstractmethod
    def ask(self, n: int) -> list[Config]:
        """Up to `n` new configurations to measure; an empty list means the space is exhausted."""

    def tell(self, results: Sequence[MeasureResult]) -> None:
        """Learn from measured results (also results recorded earlier, on resume)."""
        for r in results:
            self.seen.add(r.config)
            self.history.append(r)

    @property
    def accepts_prior(self) -> bool:
        """Whether `use_prior` would take a pre-trained cost model (asked before one is
        fitted, so strategies without a model cost nothing)."""
        return False

    def use_prior(self, model: Any, workload_key: Mapping[str, Any] | None = None, *,
                  explore: bool = False) -> bool:
        """Take a cost model pre-trained on other shapes or devices as a starting point;
        False when this strategy has no use for one (the default). `explore`: the model
        comes from other devices only, so measure part of the usual random start first."""
        return False

    def exclude(self, configs: Sequence[Config]) -> None:
        """Never propose `configs`: another searcher sharing this history will measure them."""
        self.seen.update(configs)

    def run_ended(self, unmeasured: Sequence[Config]) -> None:
        """The tuner's run ended without measuring `unmeasured`, which this strategy
        proposed in it (the run ran out of time mid-batch, or ended before measuring again
        a candidate the environment failed). Nothing by default: they stay seen."""

    def pace_model(self, share: float, seconds: float) -> None:
        """Let a cost model's refits take at most `share` of the measuring time, or
        `seconds` per measurement, whichever is more, by refitting after several
        measurements instead of each (a no-op for strategies without a model). A tuner of
        cheap measurements calls it, so that the search's own cost stays small beside
        them; measurements that report no cost (replays) keep a refit per measurement."""

    def propose(self, config: Config) -> bool:
        """Mark `config` as proposed; False if it was already seen."""
        if config in self.seen:
            return False
        self.seen.add(config)
        return True

    @property
    def best(self) -> MeasureResult | None:
        ok = [r for r in self.history if r.ok]
        return min(ok, key=lambda r: r.time) if ok else None


class WrappingStrategy(SearchStrategy):
    """A strategy around another one (`inner`, set by the subclass), to which it hands a
    pre-trained cost model: a wrapper that adds seeds or picks the strategy by the space
    must not cut its inner search off from transfer."""

    inner: SearchStrategy

    @property
    def accepts_prior(self) -> bool:
        return self.inner.accepts_prior

    def use_prior(self, model: Any, workload_key: Mapping[str, Any] | None = None, *,
                  explore: bool = False) -> bool:
        return self.inner.use_prior(model, workload_key, explore=explore)

    def exclude(self, configs: Sequence[Config]) -> None:
        super().exclude(configs)
        self.inner.exclude(configs)

    def pace_model(self, share: float, seconds: float) -> None:
        self.inner.pace_model(share, seconds)

    def run_ended(self, unmeasured: Sequence[Config]) -> None:
        self.inner.run_ended(unmeasured)


# name -> "module:Class" (imported on first use) or a class
_REGISTRY: dict[str, "str | type[SearchStrategy]"] = {
    "exhaustive": "tensortune.search.exhaustive:ExhaustiveSearch",
    "random": "tensortune.search.random_search:RandomSearch",
    "auto": "tensortune.search.auto:AutoSearch",
    "evolutionary": "tensortune.search.evolutionary:EvolutionarySearch",
    "model_based": "tensortune.search.model_based:ModelBasedSearch",
    "annealing": "tensortune.search.annealing:SimulatedAnnealing",
    "genetic": "tensortune.search.genetic:GeneticSearch",
    "local": "tensortune.search.local:LocalSearch",
    "bandit": "tensortune.search.bandit:BanditSearch",
    "tpe": "tensortune.search.tpe:TPESearch",
    "screened_tpe": "tensortune.search.screened_tpe:ScreenedTPESearch",
}
# name -> options bound at registration, for names registered with some
_BOUND_OPTIONS: dict[str, dict[str, Any]] = {}


def register_strategy(name: str, target: "str | type[SearchStrategy]", **options: Any) -> None:
    """Make a strategy creatable by name. `target` is a class, "module:Class" or the name
    of a registered strategy; `options` are bound to the name, and options given at
    creation override them.

    Example:
        >>> register_strategy("bandit_two_searches", "bandit", arms=("screened_tpe", "evolutionary"))
        >>> from tensortune.space import Space
        >>> create_strategy("bandit_two_searches", Space({"a": list(range(9))}), seed=0).arms.keys()
        dict_keys(['screened_tpe', 'evolutionary'])
    """
    bound: dict[str, Any] = {}
    if isinstance(target, str) and target in _REGISTRY:
        bound = dict(_BOUND_OPTIONS.get(target, {}))
        target = _REGISTRY[target]
    elif isinstance(target, str):
        if target.count(":") != 1:
            raise ValueError(f"strategy target {target!r} is neither a registered strategy "
                             f"({', '.join(strategy_names())}) nor 'module:Class'")
    elif not (isinstance(target, type) and issubclass(target, SearchStrategy)):
        raise TypeError(f"strategy target must be a SearchStrategy class, 'module:Class' or a registered "
                        f"name, got {target!r}; bind options with register_strategy(name, target, **options)")
    bound.update(options)
    if bound:  # import a lazy target now, so that a wrong option fails here
        _check_options(name, _resolved(target), bound)
    _REGISTRY[name] = target
    if bound:
        _BOUND_OPTIONS[name] = bound
    else:
        _BOUND_OPTIONS.pop(name, None)


def strategy_names() -> list[str]:
    return sorted(_REGISTRY)


def strategy_class(name: str) -> "type[SearchStrategy]":
    if name not in _REGISTRY:
        raise ValueError(f"unknown strategy {name!r}; known: {', '.join(strategy_names())}")
    return _resolved(_REGISTRY[name])


def _resolved(target: "str | type[SearchStrategy]") -> "type[SearchStrategy]":
    if isinstance(target, str):
        module, cls = target.split(":")
        return getattr(importlib.import_module(module), cls)
    return target


def _check_options(name: str, kind: "type[SearchStrategy]", options: Mapping[str, Any]) -> None:
    known = kind.option_names()
    if unknown := set(options) - known:
        raise TypeError(f"strategy {name!r} does not take the option(s) {sorted(unknown)}; "
                        f"its options are {sorted(known)}")


def create_strategy(name: "str | SearchStrategy", space: Space, seed: int | None = None,
                    budget: int | None = None, **options: Any) -> SearchStrategy:
    """A strategy by name, with its options as keyword arguments (over any bound to the name)."""
    if isinstance(name, SearchStrategy):
        return name
    kind = strategy_class(name)
    options = {**_BOUND_OPTIONS.get(name, {}), **options}
    _check_options(name, kind, options)
    return kind(space, seed=seed, budget=budget, **options)
