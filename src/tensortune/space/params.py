"""Parameter kinds. Each knows its values, its neighbours and its numeric encoding.

A parameter holds an ordered list of choices; a choice assigns one value to each of
the parameter's names (one name for most kinds, several for `Coupled`). Everything
else in a space works with choice indices.

Example:
    >>> p = PowerOfTwo("BLOCK", 16, 128)
    >>> p.values
    (16, 32, 64, 128)
    >>> p.neighbour_indices(1)
    [0, 2]
"""

from __future__ import annotations

import json
import keyword
import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import Any

from .config import _normalize


class SpaceError(ValueError):
    """An invalid search space: names the parameter or constraint at fault."""


_SCALARS = (int, float, str, bool, type(None))


def value_key(value: Any) -> str:
    """How a choice is looked up: the same for a value as given and as it comes back from
    the records database (lists become tuples, numpy scalars Python ones). TypeError for a
    value the database cannot store and give back as the same choice."""
    value = _normalize(value)
    if type(value) in _SCALARS:
        return repr(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=_unstorable)


def _unstorable(value: Any) -> Any:
    if isinstance(value, (set, frozenset)):
        raise TypeError("a set has no fixed order; use a sorted tuple")
    raise TypeError(f"{type(value).__name__} is not a number, string, boolean, None, tuple, list or dict")


def _check_name(name: Any) -> None:
    """Constraints are Python expressions over the names, so a name must be usable in one."""
    if not isinstance(name, str) or not name.isidentifier():
        raise SpaceError(f"parameter name {name!r} is not a valid identifier")
    if keyword.iskeyword(name):
        raise SpaceError(f"parameter name {name!r} is a Python keyword; constraints could not name it")


def _keys(label: str, values: Sequence[Any]) -> list[str]:
    keys = []
    for v in values:
        try:
            keys.append(value_key(v))
        except (TypeError, ValueError) as exc:
            raise SpaceError(f"parameter {label!r}: value {v!r} cannot be recorded ({exc})") from None
    return keys


class Param(ABC):
    """One dimension of a search space."""

    names: tuple[str, ...]

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def assignment(self, index: int) -> dict[str, Any]:
        """The values this choice gives to the parameter's names."""

    @abstractmethod
    def index_of(self, values: dict[str, Any]) -> int:
        """The choice index of the given values; KeyError if not a choice."""

    @abstractmethod
    def neighbour_indices(self, index: int) -> list[int]:
        """Choices one step away."""

    def encode(self, index: int) -> list[float]:
        """Numeric features of a choice, for cost models (values where numeric)."""
        out: list[float] = []
        for v in self.assignment(index).values():
            out.append(float(v) if isinstance(v, (int, float)) else float(index))
        return out

    @property
    def width(self) -> int:
        return len(self.names)


class _Choices(Param):
    """Shared machinery of single-name parameters over an explicit value list."""

    def __init__(self, name: str, values: Sequence[Any]) -> None:
        _check_name(name)
        values = tuple(values)
        if not values:
            raise SpaceError(f"parameter {name!r} has no values")
        keys = _keys(name, values)
        if len(set(keys)) != len(values):
            raise SpaceError(f"parameter {name!r} has duplicate values: {values}")
        self.names = (name,)
        self.name = name
        self.values = values
        self._index = {k: i for i, k in enumerate(keys)}

    def __len__(self) -> int:
        return len(self.values)

    def assignment(self, index: int) -> dict[str, Any]:
        return {self.name: self.values[index]}

    def index_of(self, values: dict[str, Any]) -> int:
        return self._index[_lookup_key(values[self.name])]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {list(self.values)!r})"


class Categorical(_Choices):
    """Unordered choices (loop orders, algorithm names): every other choice is a neighbour."""

    def neighbour_indices(self, index: int) -> list[int]:
        return [i for i in range(len(self.values)) if i != index]

    def encode(self, index: int) -> list[float]:
        v = self.values[index]
        return [float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else float(index)]


class Ordinal(_Choices):
    """Ordered values (tile sizes): neighbours are the adjacent values."""

    def neighbour_indices(self, index: int) -> list[int]:
        return [i for i in (index - 1, index + 1) if 0 <= i < len(self.values)]


class PowerOfTwo(Ordinal):
    """Powers of two from `low` to `high` inclusive."""

    def __init__(self, name: str, low: int, high: int) -> None:
        if low < 1 or high < low:
            raise SpaceError(f"parameter {name!r}: need 1 <= low <= high, got {low}..{high}")
        lo, hi = math.ceil(math.log2(low)), math.floor(math.log2(high))
        if lo > hi:
            raise SpaceError(f"parameter {name!r} has no power of two in {low}..{high}")
        super().__init__(name, [2**e for e in range(lo, hi + 1)])


class IntRange(Ordinal):
    """Integers low, low+step, ..., up to high inclusive (kept as a lazy range)."""

    def __init__(self, name: str, low: int, high: int, step: int = 1) -> None:
        if step < 1 or high < low:
            raise SpaceError(f"parameter {name!r}: empty range {low}..{high} step {step}")
        self._range = range(low, high + 1, step)
        super().__init__(name, [low])  # validates the name
        self.values = self._range  # type: ignore[assignment]

    def index_of(self, values: dict[str, Any]) -> int:
        return self._range.index(values[self.name])

    def __repr__(self) -> str:
        r = self._range
        return f"IntRange({self.name!r}, {r.start}, {r.stop - 1}, {r.step})"


class Boolean(Categorical):
    """False or True."""

    def __init__(self, name: str) -> None:
        super().__init__(name, (False, True))

    def encode(self, index: int) -> list[float]:
        return [float(index)]


class Coupled(Param):
    """Several names that vary together, e.g. ("BLOCK_M, BLOCK_N", [(128, 64), (64, 128)]).

    Choices are treated as ordered in the order given (neighbours are adjacent tuples).
    """

    def __init__(self, names: str | Sequence[str], values: Sequence[Sequence[Any]]) -> None:
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",")]
        names = tuple(names)
        for n in names:
            _check_name(n)
        if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
            raise SpaceError(f"coupled parameter {', '.join(names)!r}: values must be a list of tuples, "
                             f"got {values!r}")
        for v in values:
            if isinstance(v, (str, bytes)) or not isinstance(v, Iterable):
                raise SpaceError(f"coupled parameter {', '.join(names)!r}: value {v!r} is not a tuple")
        values = tuple(tuple(v) for v in values)
        if not values:
            raise SpaceError(f"coupled parameter {', '.join(names)!r} has no values")
        for v in values:
            if len(v) != len(names):
                raise SpaceError(
                    f"coupled parameter {', '.join(names)!r}: value {v} has {len(v)} "
                    f"entries for {len(names)} names"
                )
        keys = _keys(", ".join(names), values)
        if len(set(keys)) != len(values):
            raise SpaceError(f"coupled parameter {', '.join(names)!r} has duplicate values: {values}")
        self.names = names
        self.values = values
        self._index = {k: i for i, k in enumerate(keys)}

    def __len__(self) -> int:
        return len(self.values)

    def assignment(self, index: int) -> dict[str, Any]:
        return dict(zip(self.names, self.values[index]))

    def index_of(self, values: dict[str, Any]) -> int:
        return self._index[_lookup_key(tuple(values[n] for n in self.names))]

    def neighbour_indices(self, index: int) -> list[int]:
        return [i for i in (index - 1, index + 1) if 0 <= i < len(self.values)]

    def __repr__(self) -> str:
        return f"Coupled({', '.join(self.names)!r}, {list(self.values)!r})"


def _lookup_key(value: Any) -> str:
    try:
        return value_key(value)
    except (TypeError, ValueError):
        raise KeyError(value) from None


def infer_param(name: str, values: Any) -> Param:
    """A parameter from a plain value list: numbers are ordered, other values categorical.

    A name with commas makes a `Coupled` parameter; an existing `Param` passes through.
    """
    if isinstance(values, Param):
        return values
    if not isinstance(name, str):
        raise SpaceError(f"parameter name {name!r} is not a string")
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise SpaceError(f"parameter {name!r}: values must be a list of choices, got {values!r}")
    if "," in name:
        return Coupled(name, values)
    if isinstance(values, range):
        return IntRange(name, values.start, values.stop - 1, values.step) if values.step > 0 \
            else Ordinal(name, list(values))
    values = list(values)
    if values and all(isinstance(v, bool) for v in values) and len(values) == 2:
        return Categorical(name, values)
    numeric = values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    if numeric:
        return Ordinal(name, sorted(values))
    return Categorical(name, values)
