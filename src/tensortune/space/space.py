"""Search spaces: parameters, constraints, lazy enumeration, uniform sampling, encodings.

Parameters linked by constraints form independent groups ("components"). A valid
configuration is one valid point per group, so the space counts, enumerates and
samples group by group: a 10^12-point product with tight constraints over pairs of
parameters is sampled exactly uniformly by enumerating each small group once.

Example:
    >>> s = Space({"BLOCK_M": [16, 32, 64], "BLOCK_K": [16, 32, 64], "order": ["ijk", "ikj"]},
    ...           constraints=["BLOCK_M * BLOCK_K <= 1024"])
    >>> s.cartesian_size, s.size
    (18, 12)
    >>> cfg = s.sample(seed=0)[0]
    >>> s.is_valid(cfg)
    True
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import cached_property
from typing import Any

import numpy as np

from .config import Config
from .constraints import Constraint
from .params import Param, SpaceError, infer_param

Point = tuple[int, ...]  # one choice index per parameter
ENUMERATE_LIMIT = 1_000_000  # groups up to this cartesian size are enumerated once when needed


class _Group:
    """Parameters tied together by constraints; enumerated on demand when small."""

    def __init__(self, space: "Space", param_ids: list[int], constraints: list[Constraint]) -> None:
        self.space = space
        self.param_ids = param_ids
        self.constraints = constraints
        self.cartesian_size = math.prod(len(space.params[i]) for i in param_ids)
        # check each constraint right after the last parameter it reads is assigned
        self._checks_at: list[list[Constraint]] = [[] for _ in param_ids]
        position = {name: k for k, i in enumerate(param_ids) for name in space.params[i].names}
        for c in constraints:
            at = max((position[n] for n in c.names), default=0)
            self._checks_at[at].append(c)

    @property
    def enumerable(self) -> bool:
        return self.cartesian_size <= ENUMERATE_LIMIT

    @cached_property
    def valid(self) -> list[tuple[int, ...]]:
        return list(self.iterate())

    def iterate(self, order: Callable[[int], Sequence[int]] | None = None) -> Iterator[tuple[int, ...]]:
        """Depth-first over the group's choices, pruning as soon as a constraint fails."""
        params = [self.space.params[i] for i in self.param_ids]
        values: dict[str, Any] = {}
        chosen: list[int] = []

        def walk(k: int) -> Iterator[tuple[int, ...]]:
            if k == len(params):
                yield tuple(chosen)
                return
            indices = order(len(params[k])) if order else range(len(params[k]))
            for idx in indices:
                values.update(params[k].assignment(idx))
                if all(c(values) for c in self._checks_at[k]):
                    chosen.append(idx)
                    yield from walk(k + 1)
                    chosen.pop()

        if not params:
            return iter([()])
        return walk(0)

    def sample(self, rng: np.random.Generator) -> tuple[int, ...]:
        if self.enumerable:
            valid = self.valid
            return valid[int(rng.integers(len(valid)))]
        params = [self.space.params[i] for i in self.param_ids]
        for _ in range(256):  # rejection sampling is exactly uniform when it succeeds
            point = tuple(int(rng.integers(len(p))) for p in params)
            if self.is_valid(point):
                return point
        # tight constraints over a huge group: a random-order depth-first search
        for point in self.iterate(order=lambda n: _random_order(rng, n)):
            return point
        raise SpaceError("no valid configuration for parameters "
                         f"{[self.space.params[i].names for i in self.param_ids]}")

    def is_valid(self, point: Sequence[int]) -> bool:
        values: dict[str, Any] = {}
        for i, idx in zip(self.param_ids, point):
            values.update(self.space.params[i].assignment(idx))
        return all(c(values) for c in self.constraints)


def _random_order(rng: np.random.Generator, n: int) -> Iterator[int]:
    if n <= 1 << 20:
        yield from (int(i) for i in rng.permutation(n))
    else:  # sample with replacement from huge ranges rather than permuting them
        for _ in range(1 << 16):
            yield int(rng.integers(n))


class Space:
    """A set of configurations: the product of parameters, filtered by constraints."""

    def __init__(
        self,
        params: Mapping[str, Any] | Sequence[Param],
        constraints: Sequence[str | Callable[..., bool] | Constraint] = (),
    ) -> None:
        if isinstance(params, Mapping):
            plist = [infer_param(name, values) for name, values in params.items()]
        else:
            plist = list(params)
        if not plist:
            raise SpaceError("a space needs at least one parameter")
        names: list[str] = []
        for p in plist:
            for n in p.names:
                if n in names:
                    raise SpaceError(f"parameter {n!r} is defined twice")
                names.append(n)
        self.params: tuple[Param, ...] = tuple(plist)
        self.names: tuple[str, ...] = tuple(names)
        self._param_of = {n: i for i, p in enumerate(self.params) for n in p.names}
        self.constraints = tuple(Constraint.make(c, set(names)) for c in constraints)
        self._groups = self._make_groups()
        self._check_not_empty()

    # ---- structure -------------------------------------------------------------
    def _make_groups(self) -> list[_Group]:
        parent = list(range(len(self.params)))

        def find(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        for c in self.constraints:
            ids = sorted({self._param_of[n] for n in c.names})
            for a, b in zip(ids, ids[1:]):
                parent[find(a)] = find(b)
        members: dict[int, list[int]] = {}
        for i in range(len(self.params)):
            members.setdefault(find(i), []).append(i)
        groups = []
        for ids in members.values():
            names = {n for i in ids for n in self.params[i].names}
            cons = [c for c in self.constraints if c.names and c.names <= names]
            groups.append(_Group(self, ids, cons))
        constant = [c for c in self.constraints if not c.names]
        if constant:
            groups[0].constraints.extend(constant)
            groups[0]._checks_at[0].extend(constant)
        return groups

    def _check_not_empty(self) -> None:
        for g in self._groups:
            if not g.constraints:
                continue
            found = next(iter(g.valid), None) if g.enumerable else self._try_sample(g)
            if found is None:
                raise SpaceError(
                    "the space has no valid configuration: "
                    + self._culprits(g)
                )

    def _try_sample(self, g: _Group) -> tuple[int, ...] | None:
        try:
            return g.sample(np.random.default_rng(0))
        except SpaceError:
            return None

    def _culprits(self, g: _Group) -> str:
        alone = []
        for c in g.constraints:
            if not c.names:
                if not c({}):
                    alone.append(c.text)
                continue
            ids = sorted({self._param_of[n] for n in c.names})
            sub = _Group(self, ids, [c])
            if sub.enumerable and next(sub.iterate(), None) is None:
                alone.append(c.text)
        if alone:
            return f"constraint(s) {alone} reject every value of their parameters"
        return f"constraints {[c.text for c in g.constraints]} together reject every configuration"

    @property
    def cartesian_size(self) -> int:
        """Size of the product of all parameters, before constraints."""
        return math.prod(len(p) for p in self.params)

    @cached_property
    def size(self) -> int:
        """Number of valid configurations (exact; groups larger than the enumeration
        limit are estimated by sampling, see `size_is_exact`)."""
        total = 1
        for g in self._groups:
            if not g.constraints:
                total *= g.cartesian_size
            elif g.enumerable:
                total *= len(g.valid)
            else:
                total *= max(1, round(g.cartesian_size * self._valid_fraction(g)))
        return total

    @property
    def size_is_exact(self) -> bool:
        return all(not g.constraints or g.enumerable for g in self._groups)

    def _valid_fraction(self, g: _Group, draws: int = 20000) -> float:
        rng = np.random.default_rng(0)
        params = [self.params[i] for i in g.param_ids]
        hits = sum(
            g.is_valid(tuple(int(rng.integers(len(p))) for p in params)) for _ in range(draws)
        )
        return hits / draws

    # ---- configurations ----------------------------------------------------------
    def to_config(self, point: Sequence[int]) -> Config:
        values: dict[str, Any] = {}
        for p, idx in zip(self.params, point):
            values.update(p.assignment(int(idx)))
        return Config(values)

    def to_point(self, config: Mapping[str, Any]) -> Point:
        """Choice indices of a configuration; a clear error for unknown names or values."""
        extra = set(config) - set(self.names)
        if extra:
            raise SpaceError(f"configuration names unknown parameter(s) {sorted(extra)}")
        missing = [n for n in self.names if n not in config]
        if missing:
            raise SpaceError(f"configuration lacks parameter(s) {missing}")
        point = []
        for p in self.params:
            try:
                point.append(p.index_of(dict(config)))
            except (KeyError, ValueError):
                got = {n: config[n] for n in p.names}
                raise SpaceError(f"value {got} is not a choice of parameter {p!r}") from None
        return tuple(point)

    def is_valid(self, config: Mapping[str, Any]) -> bool:
        """True if the configuration is in the space and passes every constraint."""
        try:
            point = self.to_point(config)
        except SpaceError:
            return False
        return self.is_valid_point(point)

    __contains__ = is_valid  # type: ignore[assignment]

    def is_valid_point(self, point: Sequence[int]) -> bool:
        """Like `is_valid`, for choice indices (cheaper: no configuration is built)."""
        return all(g.is_valid([point[i] for i in g.param_ids]) for g in self._groups)

    def config(self, values: Mapping[str, Any] | None = None, **kwargs: Any) -> Config:
        """A validated configuration; raises SpaceError naming what is wrong."""
        cfg = Config(values or {}, **kwargs)
        point = self.to_point(cfg)
        for g in self._groups:
            vals = cfg.as_dict()
            for c in g.constraints:
                if not c(vals):
                    raise SpaceError(f"configuration {cfg} violates constraint {c.text!r}")
        return self.to_config(point)

    def __iter__(self) -> Iterator[Config]:
        """Every valid configuration, lazily, in a fixed order."""
        point = [0] * len(self.params)

        def walk(k: int) -> Iterator[Config]:
            if k == len(self._groups):
                yield self.to_config(point)
                return
            g = self._groups[k]
            for sub in (g.valid if g.enumerable else g.iterate()):
                for i, idx in zip(g.param_ids, sub):
                    point[i] = idx
                yield from walk(k + 1)

        return walk(0)

    def sample_points(self, n: int, rng: np.random.Generator) -> list[Point]:
        out = []
        for _ in range(n):
            point = [0] * len(self.params)
            for g in self._groups:
                for i, idx in zip(g.param_ids, g.sample(rng)):
                    point[i] = idx
            out.append(tuple(point))
        return out

    def sample(self, n: int = 1, seed: int | np.random.Generator | None = None) -> list[Config]:
        """`n` valid configurations drawn uniformly (independently, with replacement)."""
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        return [self.to_config(p) for p in self.sample_points(n, rng)]

    def neighbours(self, config: Mapping[str, Any]) -> list[Config]:
        """Valid configurations that differ from `config` by one step in one parameter."""
        point = self.to_point(config)
        out = []
        for k, p in enumerate(self.params):
            for idx in p.neighbour_indices(point[k]):
                cand = point[:k] + (idx,) + point[k + 1:]
                if self.is_valid_point(cand):
                    out.append(self.to_config(cand))
        return out

    # ---- encodings ---------------------------------------------------------------
    def encode(self, config: Mapping[str, Any]) -> np.ndarray:
        """Choice indices as floats; `decode` inverts it."""
        return np.asarray(self.to_point(config), dtype=np.float64)

    def decode(self, vector: Sequence[float]) -> Config:
        point = [min(max(int(round(v)), 0), len(p) - 1) for v, p in zip(vector, self.params)]
        return self.to_config(point)

    def features(self, config: Mapping[str, Any]) -> np.ndarray:
        """Numeric features for cost models: numeric values as they are, others by index."""
        point = self.to_point(config)
        return np.asarray([x for p, i in zip(self.params, point) for x in p.encode(i)], dtype=np.float64)

    @cached_property
    def feature_names(self) -> list[str]:
        return [n for p in self.params for n in p.names]

    def __repr__(self) -> str:
        return (f"Space({len(self.params)} params, {self.cartesian_size} points, "
                f"{len(self.constraints)} constraints)")

