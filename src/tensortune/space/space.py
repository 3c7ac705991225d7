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
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from .config import Config
from .constraints import Constraint
from .params import Param, SpaceError, infer_param

Point = tuple[int, ...]  # one choice index per parameter
ENUMERATE_LIMIT = 1_000_000  # groups of up to this many points to walk are enumerated once when needed
REJECTION_TRIES = 2048  # uniform draws before a huge group is searched depth-first instead
REJECTION_BLOCK = 32  # drawn at once


@dataclass(frozen=True)
class _Step:
    """One step of a group's walk: the group positions it assigns, and its choices (one
    parameter's indices, or a table's rows as index tuples for those positions)."""

    positions: tuple[int, ...]
    size: int
    rows: Sequence[tuple[int, ...]] | None = None

    def pick(self, choice: int) -> tuple[int, ...]:
        return self.rows[choice] if self.rows is not None else (choice,)


class _Group:
    """Parameters tied together by constraints; enumerated on demand when small.

    The group is walked in steps: one parameter per step, except that the parameters a
    table constraint covers are one step whose choices are the table's rows."""

    def __init__(self, space: "Space", param_ids: list[int], constraints: list[Constraint]) -> None:
        self.space = space
        self.param_ids = param_ids
        self.constraints = constraints
        self.cartesian_size = math.prod(len(space.params[i]) for i in param_ids)
        params = [space.params[i] for i in param_ids]
        table, rows, covered = self._table_rows(params)
        self._steps = [_Step(tuple(covered), len(rows), rows)] if table is not None else []
        self._steps += [_Step((k,), len(params[k])) for k in range(len(params)) if k not in covered]
        self.search_size = math.prod(step.size for step in self._steps)
        # check each constraint right after the last parameter it reads is assigned
        step_of = {name: s for s, step in enumerate(self._steps)
                   for k in step.positions for name in params[k].names}
        self._checks_at: list[list[Constraint]] = [[] for _ in self._steps]
        for c in constraints:
            if c is not table:  # its rows satisfy it by construction
                self._checks_at[max((step_of[n] for n in c.names), default=0)].append(c)

    def _table_rows(self, params: list[Param]) -> tuple[Constraint | None, list[tuple[int, ...]], list[int]]:
        """The table constraint with the fewest rows that covers whole parameters, its rows
        as choice indices of those parameters (rows naming no choice dropped), and their
        positions in the group."""
        tables = sorted((c for c in self.constraints if c.table is not None),
                        key=lambda c: len(c.table.rows))  # type: ignore[union-attr]
        for constraint in tables:
            names = constraint.table.names  # type: ignore[union-attr]
            covered = [k for k, p in enumerate(params) if set(p.names) <= set(names)]
            if {n for k in covered for n in params[k].names} != set(names):
                continue  # the table splits a coupled parameter: check it as a predicate
            lookups = [_choice_lookup(params[k], [names.index(n) for n in params[k].names]) for k in covered]
            points = (tuple(lookup(row) for lookup in lookups) for row in constraint.table.rows)  # type: ignore[union-attr]
            return constraint, sorted(p for p in points if None not in p), covered  # type: ignore[misc]
        return None, [], []

    @property
    def enumerable(self) -> bool:
        return self.search_size <= ENUMERATE_LIMIT

    @cached_property
    def valid(self) -> list[tuple[int, ...]]:
        return list(self.iterate())

    def iterate(self, order: Callable[[int], Iterable[int]] | None = None) -> Iterator[tuple[int, ...]]:
        """Depth-first over the group's choices, pruning as soon as a constraint fails."""
        params = [self.space.params[i] for i in self.param_ids]
        values: dict[str, Any] = {}
        chosen = [0] * len(params)
        checked = any(self._checks_at)  # a lone table needs no values to check

        def walk(s: int) -> Iterator[tuple[int, ...]]:
            if s == len(self._steps):
                yield tuple(chosen)
                return
            step = self._steps[s]
            for c in (order(step.size) if order else range(step.size)):
                for k, idx in zip(step.positions, step.pick(c)):
                    if checked:
                        values.update(params[k].assignment(idx))
                    chosen[k] = idx
                if all(check(values) for check in self._checks_at[s]):
                    yield from walk(s + 1)

        return walk(0)

    def random_points(self, rng: np.random.Generator, n: int) -> Iterator[tuple[int, ...]]:
        """`n` uniform draws over the group's steps (not necessarily valid)."""
        draws = rng.integers(0, [step.size for step in self._steps], size=(n, len(self._steps))).tolist()
        for row in draws:
            point = [0] * len(self.param_ids)
            for step, c in zip(self._steps, row):
                for k, idx in zip(step.positions, step.pick(c)):
                    point[k] = idx
            yield tuple(point)

    def sample(self, rng: np.random.Generator) -> tuple[int, ...]:
        if self.enumerable:
            valid = self.valid
            if valid:
                return valid[int(rng.integers(len(valid)))]
        else:  # every step has choices: an empty table makes the group enumerable (size 0)
            for _ in range(REJECTION_TRIES // REJECTION_BLOCK):
                for point in self.random_points(rng, REJECTION_BLOCK):  # the first valid draw is uniform
                    if self.is_valid(point):
                        return point
            # tight constraints over a huge group: a random-order depth-first search
            for point in self.iterate(order=lambda n: _random_order(rng, n)):
                return point
        raise SpaceError("no valid configuration for parameters "
                         f"{[self.space.params[i].names for i in self.param_ids]}")

    def valid_fraction(self, draws: int = 20000) -> float:
        """The share of uniform draws over the group's steps that are valid."""
        return sum(map(self.is_valid, self.random_points(np.random.default_rng(0), draws))) / draws

    def is_valid(self, point: Sequence[int]) -> bool:
        values: dict[str, Any] = {}
        for i, idx in zip(self.param_ids, point):
            values.update(self.space.params[i].assignment(idx))
        return all(c(values) for c in self.constraints)


def _choice_lookup(param: Param, columns: list[int]) -> Callable[[tuple[Any, ...]], int | None]:
    """Maps a table row (its values at `columns`) to a choice index of `param`, or None
    where the row names no choice; each distinct value is looked up once."""
    memo: dict[tuple[Any, ...], int | None] = {}

    def lookup(row: tuple[Any, ...]) -> int | None:
        key = tuple(row[j] for j in columns)
        if key not in memo:
            try:
                memo[key] = param.index_of(dict(zip(param.names, key)))
            except (KeyError, ValueError, TypeError):
                memo[key] = None
        return memo[key]

    return lookup


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
                total *= max(1, round(g.search_size * g.valid_fraction()))
        return total

    @property
    def size_is_exact(self) -> bool:
        return all(not g.constraints or g.enumerable for g in self._groups)

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

