"""Constraints over parameter names: Python expression strings, callables, or tables.

An expression string is parsed into a tree of allowed nodes (`expression.py`), never
evaluated with `eval`, so a constraint read from a file cannot run code.

A constraint knows which names it reads, so the space can check it as soon as those
names are assigned (pruning enumeration and sampling) and split independent groups.
A table (`Constraint.allowed`) lists the valid combinations outright, as a measured
cache or a list of hand-picked configurations does; the space then walks its rows
instead of the product of its parameters, however large that product is.

Example:
    >>> c = Constraint.make("BLOCK_M * BLOCK_K <= 8192", {"BLOCK_M", "BLOCK_K", "X"})
    >>> sorted(c.names), c({"BLOCK_M": 64, "BLOCK_K": 64})
    (['BLOCK_K', 'BLOCK_M'], True)
    >>> t = Constraint.allowed(["BLOCK_M", "BLOCK_K"], [(64, 32), (128, 16)])
    >>> t({"BLOCK_M": 64, "BLOCK_K": 32}), t({"BLOCK_M": 64, "BLOCK_K": 16})
    (True, False)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .expression import compile_expression
from .params import SpaceError


@dataclass(frozen=True)
class Table:
    """The valid combinations of some names: each row gives their values in `names` order."""

    names: tuple[str, ...]
    rows: frozenset[tuple[Any, ...]]


@dataclass(frozen=True)
class Constraint:
    """A predicate over some parameter names; `text` is how errors name it."""

    names: frozenset[str]
    text: str
    predicate: Callable[[Mapping[str, Any]], bool]
    table: Table | None = field(default=None, compare=False, repr=False)

    def __call__(self, values: Mapping[str, Any]) -> bool:
        try:
            return bool(self.predicate(values))
        except ZeroDivisionError:
            return False
        except Exception as exc:  # a broken constraint is the user's bug: say which
            raise SpaceError(f"constraint {self.text!r} raised {type(exc).__name__}: {exc}") from exc

    @staticmethod
    def make(spec: "str | Callable[..., bool] | Constraint", known: set[str]) -> "Constraint":
        if isinstance(spec, Constraint):
            unknown = spec.names - known
            if unknown:
                raise SpaceError(f"constraint {spec.text!r} names unknown parameter(s) {sorted(unknown)}")
            return spec
        if isinstance(spec, str):
            return _from_expression(spec, known)
        if callable(spec):
            return _from_callable(spec, known)
        raise SpaceError(f"a constraint must be an expression string or a callable, got {spec!r}")

    @staticmethod
    def allowed(names: Sequence[str], rows: Iterable[Sequence[Any]], text: str | None = None) -> "Constraint":
        """Only these combinations of `names` are valid (one row of values per combination)."""
        names = tuple(names)
        if not names or len(set(names)) != len(names):
            raise SpaceError(f"a table constraint needs distinct names, got {names}")
        table = Table(names, frozenset(_table_row(row, names) for row in rows))
        if not table.rows:
            raise SpaceError(f"the table constraint over {names} has no rows")

        def predicate(values: Mapping[str, Any]) -> bool:
            return tuple(values[n] for n in names) in table.rows

        label = text or f"({', '.join(names)}) in a table of {len(table.rows)} rows"
        return Constraint(frozenset(names), label, predicate, table)


def _table_row(row: Sequence[Any], names: tuple[str, ...]) -> tuple[Any, ...]:
    row = tuple(row)
    if len(row) != len(names):
        raise SpaceError(f"table row {row} has {len(row)} values for the {len(names)} names {names}")
    try:
        hash(row)
    except TypeError:
        raise SpaceError(f"table row {row} holds a value that cannot be hashed") from None
    return row


def _from_expression(text: str, known: set[str]) -> Constraint:
    predicate, names = compile_expression(text)
    unknown = names - known
    if unknown:
        raise SpaceError(
            f"constraint {text!r} names unknown parameter(s) {sorted(unknown)}; "
            f"known: {sorted(known)}"
        )
    return Constraint(names, text, predicate)


def _from_callable(fn: Callable[..., bool], known: set[str]) -> Constraint:
    """`lambda BLOCK_M, BLOCK_K: ...` reads those names; `lambda cfg: ...` reads all."""
    text = getattr(fn, "__name__", repr(fn))
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    named = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if named and all(n in known for n in named):
        names = frozenset(named)
        return Constraint(names, text, lambda values: fn(**{n: values[n] for n in names}))
    if len(params) == 1:
        return Constraint(frozenset(known), text, lambda values: fn(dict(values)))
    unknown = sorted(set(named) - known)
    raise SpaceError(f"constraint {text!r} names unknown parameter(s) {unknown}")
