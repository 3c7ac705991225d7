"""The search over a template's knobs: evolutionary, with the auto-scheduler's program features.

`TemplateSearch` is the strategies package's `EvolutionarySearch` with two things
changed for templates:

- the cost model sees the features of each candidate's lowered loop nest
  (`autoschedule.features.program_features`, the auto-scheduler's own columns), not the
  knobs' raw values, so a model trained on one template's records ranks the candidates
  of another template of the same computation, or the auto-scheduler's (a GPU template:
  the columns of the pattern options each candidate resolves to, `cuda.PatternFeatures`);
- moves respect the knobs: a split mutates by moving a prime factor from one of its
  factors to another (the product stays the extent, as Ansor mutates tile sizes);
  crossover takes each knob whole from one parent or the other.

Example:
    >>> from tensortune.template.examples import matmul
    >>> task = matmul(32, 32, 32)
    >>> s = TemplateSearch(task, seed=0, budget=16)
    >>> batch = s.ask(4)
    >>> len(batch), all(task.space.is_valid(c) for c in batch)
    (4, True)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..autoschedule.features import LoopNestFeatures
from ..autoschedule.tiles import prime_factors
from ..model.xgb_rank import XGBRankModel
from ..search.evolutionary import EvolutionarySearch
from ..search.points import Point, PointOps
from ..space import Config
from .knobs import Split
from .template import TemplateTask


class TemplateFeatures(LoopNestFeatures):
    """Feature rows of configurations, from the loop nests their schedules lower to (cached).
    A configuration te refuses gets a row of NaN."""

    def __init__(self, task: TemplateTask, cores: int = 2) -> None:
        super().__init__(task.space, cores)
        self.task = task

    def lowered(self, config: Config) -> Any:
        s, args = self.task.instantiate(config)
        return s.lower("kernel", list(args))


class TemplatePointOps(PointOps):
    """Point moves that keep each knob's meaning (a split's product stays its extent)."""

    def __init__(self, task: TemplateTask, rng: np.random.Generator, tries: int = 16) -> None:
        super().__init__(task.space, rng, tries)
        index = {n: k for k, p in enumerate(task.space.params) for n in p.names}
        self.knobs = [(knob, [index[p.name] for p in knob.params()]) for knob in task.knobs.values()]
        self.movable = [(knob, ks) for knob, ks in self.knobs if any(self.sizes[k] > 1 for k in ks)]

    def mutate(self, point: Point, genes: int = 1) -> Point | None:
        if not self.movable:
            return None
        for _ in range(self.tries):
            new = list(point)
            for _ in range(genes):
                knob, ks = self.movable[int(self.rng.integers(len(self.movable)))]
                if isinstance(knob, Split):
                    # a bounded split (max_factor, candidate) may refuse the moved factor: then any allowed split
                    if not self._move_factor(new, ks) or (knob.bounded and self.rng.random() < 0.25):
                        row = knob.options[int(self.rng.integers(len(knob.options)))]
                        for k, v in zip(ks, row):
                            new[k] = self.space.params[k].index_of({self.space.params[k].names[0]: v})
                else:
                    new[ks[0]] = self._step(ks[0], new[ks[0]])
            cand = tuple(new)
            if cand != tuple(point) and self.valid(cand):
                return cand
        return None

    def _move_factor(self, new: list[int], ks: list[int]) -> bool:
        """Move one prime factor from one of the split's factors to another (False: no
        such move is among the knob's options)."""
        values = [self.space.params[k].values[new[k]] for k in ks]  # type: ignore[attr-defined]
        sources = [i for i, v in enumerate(values) if v > 1]
        if not sources:
            return False
        i = sources[int(self.rng.integers(len(sources)))]
        j = int(self.rng.integers(len(ks) - 1))
        j = j + 1 if j >= i else j
        primes = prime_factors(values[i])
        p = primes[int(self.rng.integers(len(primes)))]
        values[i] //= p
        values[j] *= p
        for k, v in zip(ks, values):
            param = self.space.params[k]
            if v not in param.values:  # type: ignore[attr-defined]
                return False  # a factor outside the knob's options (max_factor): leave the point as it was
        for k, v in zip(ks, values):
            new[k] = self.space.params[k].values.index(v)  # type: ignore[attr-defined]
        return True

    def crossover(self, a: Point, b: Point) -> Point | None:
        for _ in range(self.tries):
            cand = list(a)
            for _, ks in self.knobs:
                if self.rng.random() < 0.5:
                    for k in ks:
                        cand[k] = b[k]
            out = tuple(cand)
            if self.valid(out):
                return out
        return None


class TemplateSearch(EvolutionarySearch):
    """Evolutionary search over a template's knobs, its cost model on program features."""

    name = "template-evolutionary"

    def __init__(self, task: TemplateTask, seed: int | None = None, budget: int | None = None, *,
                 cores: int = 2, population: int = 128, **options) -> None:
        if task.cuda is not None:
            from .cuda import PatternFeatures
            features: Any = PatternFeatures(task)
        else:
            features = TemplateFeatures(task, cores)
        options.setdefault("cost_model", XGBRankModel(seed=seed, feature_names=features.names))
        super().__init__(task.space, seed, budget, population=population, **options)
        self.task = task
        self.features = features  # type: ignore[assignment]
        self.ops = TemplatePointOps(task, self.rng)

    @property
    def accepts_prior(self) -> bool:
        """The Tuner's transferred model is fitted on raw parameters, not these features;
        a model on program features comes in through `use_program_prior`."""
        return False

    def use_program_prior(self, model: XGBRankModel, *, explore: bool = False) -> None:
        """Start from `model`, fitted on the program features of other records of the same
        computation (another template or shape, the auto-scheduler): its scores pick the
        very first batch (half of it spread apart, as every plan's exploring share is) and
        fade as this search's own measurements arrive (the model becomes the base margin of
        the search's own). With `explore` (a model from other devices, whose fastest region
        may lie elsewhere here) half the usual random start is measured first."""
        for m in self._members():
            m.base = model  # type: ignore[union-attr]
        self._fitted_on = -1
        self._prior = True
        self.random_start = self.initial // 2 if explore else 0

    def tell(self, results) -> None:
        """Learn from each candidate's fastest run: on a shared machine a neighbour's load
        only ever adds time (the records keep every run)."""
        import dataclasses
        super().tell([dataclasses.replace(r, times=(min(r.times),)) if r.ok and r.times else r for r in results])
