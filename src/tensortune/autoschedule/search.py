"""The search over a sketch space: evolutionary, guided by a cost model on program features.

`SketchSearch` is the strategies package's `EvolutionarySearch` with three things
changed for programs: the cost model sees features of each candidate's lowered loop
nest (not its raw parameters); mutations are Ansor's (move a factor between the tile
levels of one loop, change the parallel granularity, the unroll step or the compute
location, weighted 0.85 / 0.05 / 0.05 / 0.05); and proposals are canonical, so two
configurations that build the same program are measured once.

Example:
    >>> from tensortune.te import workloads
    >>> from tensortune.autoschedule.holes import SketchSpace
    >>> sp = SketchSpace.of(workloads.matmul(32, 32, 32).outputs)
    >>> s = SketchSearch(sp, seed=0, budget=16)
    >>> batch = s.ask(4)
    >>> len(batch), all(sp.canonical(c) == c for c in batch)
    (4, True)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..model.xgb_rank import XGBRankModel
from ..space import Config
from ..search.evolutionary import EvolutionarySearch
from ..search.points import Point, PointOps
from .apply import apply_config
from .features import LoopNestFeatures
from .tiles import move_factor
from .holes import SketchSpace, hole
from .seeds import register_tile_seeds

MUTATION_WEIGHTS = {"tile": 0.85, "par": 0.05, "unroll": 0.05, "at": 0.05}


class ProgramFeatures(LoopNestFeatures):
    """Feature rows of points, from their canonical programs' loop nests (cached)."""

    def __init__(self, sp: SketchSpace, cores: int = 2) -> None:
        super().__init__(sp.space, cores)
        self.sp = sp

    def key(self, config: Config) -> Config:
        return self.sp.canonical(config)

    def lowered(self, config: Config) -> Any:
        return apply_config(self.sp, config).lower()


class SketchPointOps(PointOps):
    """Point moves that know what the parameters of a sketch space mean."""

    def __init__(self, sp: SketchSpace, rng: np.random.Generator, tries: int = 16) -> None:
        super().__init__(sp.space, rng, tries)
        self.sp = sp
        self._index = {p.name: k for k, p in enumerate(sp.space.params)}
        self._extent = {hole(p.prefix, f"tile_{a.name}"): a.extent
                        for sketch in sp.sketches.values() for p in sketch.plans
                        for a in sp.graph[p.stage].spatial + sp.graph[p.stage].reduce}

    def canonical(self, point: Point | None) -> Point | None:
        """The point of the same program with the holes its sketch does not use reset, so
        that the evolution does not spend its population on copies of one program."""
        if point is None:
            return None
        canon = self.space.to_point(self.sp.canonical(self.space.to_config(point)))
        return canon if self.valid(canon) else point

    def random(self, n: int) -> list[Point]:
        return [self.canonical(p) for p in super().random(n)]

    def crossover(self, a: Point, b: Point) -> Point | None:
        return self.canonical(super().crossover(a, b))

    def mutate_many(self, parents: Sequence[Point], extra_gene: float = 0.25) -> list[Point | None]:
        """Program-aware mutations (`mutate`) of each parent; a share `extra_gene` change
        two genes."""
        return [self.mutate(p, 2 if self.rng.random() < extra_gene else 1) for p in parents]

    def mutate(self, point: Point, genes: int = 1) -> Point | None:
        config = self.space.to_config(point)
        used = sorted(self.sp.used(config))
        groups = {kind: [n for n in used if _kind(n) == kind and len(self.space.params[self._index[n]]) > 1]
                  for kind in MUTATION_WEIGHTS}
        kinds = [k for k, names in groups.items() if names]
        if not kinds:
            return super().mutate(point, genes)
        weights = np.asarray([MUTATION_WEIGHTS[k] for k in kinds])
        for _ in range(self.tries):
            new = list(point)
            for _ in range(genes):
                kind = kinds[int(self.rng.choice(len(kinds), p=weights / weights.sum()))]
                name = groups[kind][int(self.rng.integers(len(groups[kind])))]
                k = self._index[name]
                param = self.space.params[k]
                moved = None
                if kind == "tile" and name in self._extent:
                    moved = move_factor(tuple(param.values[new[k]]), self._extent[name], self.rng)
                if moved is not None and moved in param.values:
                    new[k] = param.values.index(moved)
                else:
                    new[k] = self._step(k, new[k])
            cand = self.canonical(tuple(new))
            if cand != point and self.valid(cand):
                return cand
        return None


def _kind(name: str) -> str:
    if "_tile_" in name or name.endswith(("_vec", "_rf", "_rfvec", "_dot_rows", "_dot_lanes", "_dot_block")):
        return "tile"  # a dot sketch's shape moves like a tile size: one step to a neighbouring value
    return name.rsplit("_", 1)[-1]


class SketchSearch(EvolutionarySearch):
    """Evolutionary search over a sketch space with program features and canonical proposals."""

    name = "sketch-evolutionary"

    def __init__(self, sp: SketchSpace, seed: int | None = None, budget: int | None = None, *,
                 cores: int = 2, population: int = 128, seeds: bool = True, **options) -> None:
        features = ProgramFeatures(sp, cores)
        options.setdefault("cost_model", XGBRankModel(seed=seed, feature_names=features.names))
        # per-switch exploring was chosen on template spaces; docs/benchmarks/cpu.md was measured without it
        options.setdefault("explore_switches", False)
        super().__init__(sp.space, seed, budget, population=population, **options)
        self.sp = sp
        self.features = features
        self.ops = SketchPointOps(sp, self.rng)
        self._proposed: set[Config] = set()
        self._seeds = register_tile_seeds(sp) if seeds else []

    def ask(self, n: int) -> list[Config]:
        out: list[Config] = []
        while self._seeds and len(out) < n:
            cfg = self._seeds.pop(0)
            if cfg not in self._proposed and cfg not in self.seen:
                self._proposed.add(cfg)
                self.propose(cfg)
                out.append(cfg)
        for _ in range(32):
            if len(out) >= n:
                break
            batch = super().ask(n - len(out))
            if not batch:
                break
            for cfg in batch:
                canon = self.sp.canonical(cfg)
                if canon in self._proposed or canon in self.seen and canon != cfg:
                    continue
                if np.isnan(self.features.config_row(canon)[0]):
                    continue  # te refuses this schedule: nothing to measure
                self._proposed.add(canon)
                self.seen.add(canon)
                out.append(canon)
        return out

    def tell(self, results) -> None:
        """Learn from each candidate's fastest run: on a shared machine a neighbour's load
        only ever adds time, so the fastest run ranks kernels more faithfully than the
        median (the records keep every run)."""
        for r in results:
            self._proposed.add(self.sp.canonical(r.config) if r.config.get("sketch") in self.sp.sketches
                               else r.config)
        super().tell([dataclasses.replace(r, times=(min(r.times),)) if r.ok else r for r in results])
