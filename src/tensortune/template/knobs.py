"""The knobs a schedule template declares, and the values a configuration gives them.

A knob is declared once (its options fixed) and becomes parameters of a `tt.Space`:

- `Split`: a loop of extent E into `num_outputs` loops, parameters `<name>_0` (outermost)
  .. `<name>_{n-1}` over E's divisors, with the constraint that they multiply to E (or a
  table constraint listing the allowed tuples when `candidate=` bounds them);
- `Reorder`: one parameter whose values are orders of named loops;
- `Annotate`: one parameter whose values are the loops that get the annotation
  (`unroll`: any subset; `vectorize`, `parallel`: one loop or none);
- `Choice`: one parameter over a plain list (`define_knob`).

Example:
    >>> k = Split.of("tile_i", 12, 2)
    >>> [p.name for p in k.params()], k.constraints()[0].text
    (['tile_i_0', 'tile_i_1'], 'tile_i_0 * tile_i_1 == 12')
    >>> k.value({"tile_i_0": 3, "tile_i_1": 4}).size
    (3, 4)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..space import Constraint
from ..space.params import Categorical, Ordinal, Param, infer_param
from ..te.schedule import Loop, Schedule, Stage

MAX_CHOICES = 40_320  # 8! orders; a knob with more options is refused


class TemplateError(ValueError):
    """A template that declares or uses its knobs inconsistently; the message names the knob."""


def divisors(n: int) -> tuple[int, ...]:
    return tuple(d for d in range(1, n + 1) if n % d == 0)


def loop_name(loop: Any) -> str:
    if isinstance(loop, Loop):
        return loop.name
    if isinstance(loop, str):
        return loop
    raise TemplateError(f"expected a loop (a te Loop or its name), got {loop!r}")


def stage_of(knob: str, s: Any, tensor: Any = None) -> Stage:
    """`apply(s[T], ...)` or AutoTVM's `apply(s, T, ...)`."""
    if isinstance(s, Stage) and tensor is None:
        return s
    if isinstance(s, Schedule) and tensor is not None:
        return s[tensor]
    raise TemplateError(f"knob {knob!r}: apply takes a stage (s[T]) or a schedule and a tensor (s, T)")


@dataclass(frozen=True)
class SplitValue:
    """A split knob's factors, outermost first (they multiply to the extent)."""

    knob: str
    extent: int
    size: tuple[int, ...]

    def apply(self, s: Any, tensor_or_loop: Any, loop: Any = None) -> tuple[Loop, ...]:
        """Split `loop` of the stage by these factors: `apply(s[T], loop)` or `apply(s, T, loop)`."""
        stage = stage_of(self.knob, s, tensor_or_loop if loop is not None else None)
        loop = tensor_or_loop if loop is None else loop
        actual = stage.loop(loop_name(loop)).extent
        if actual != self.extent:
            raise TemplateError(f"knob {self.knob!r} was defined over extent {self.extent} but is applied to loop "
                                f"{loop_name(loop)!r} of {stage.name!r}, whose extent is {actual}")
        return stage.split(loop_name(loop), factors=list(self.size[1:]))


@dataclass(frozen=True)
class OrderValue:
    """A reorder knob's order of its loops, by name."""

    knob: str
    loops: tuple[str, ...]  # as declared
    order: tuple[str, ...]

    def apply(self, s: Any, tensor_or_loops: Any, loops: Sequence[Any] | None = None) -> list[Loop]:
        """Reorder the declared loops into this order; returns them in the new order."""
        stage = stage_of(self.knob, s, tensor_or_loops if loops is not None else None)
        given = tuple(loop_name(x) for x in (tensor_or_loops if loops is None else loops))
        if given != self.loops:
            raise TemplateError(f"knob {self.knob!r} was defined over loops {list(self.loops)} but is applied to "
                                f"{list(given)}")
        stage.reorder(*self.order)
        return [stage.loop(n) for n in self.order]


@dataclass(frozen=True)
class AnnotateValue:
    """An annotate knob's choice: which of its loops get the annotation."""

    knob: str
    kind: str
    loops: tuple[str, ...]  # as declared
    chosen: tuple[str, ...]

    def apply(self, s: Any, tensor: Any = None) -> tuple[str, ...]:
        """Annotate the chosen loops of the stage; returns their names."""
        stage = stage_of(self.knob, s, tensor)
        for name in self.chosen:
            getattr(stage, self.kind)(name)
        return self.chosen


@dataclass(frozen=True)
class Knob:
    """A declared knob: its name and kind, and how it maps to space parameters."""

    name: str

    def params(self) -> list[Param]:
        raise NotImplementedError

    def constraints(self) -> list[Constraint]:
        return []

    def value(self, config: Mapping[str, Any]) -> Any:
        raise NotImplementedError

    def first(self) -> Any:
        """The value used while the space is collected (the first option)."""
        raise NotImplementedError


@dataclass(frozen=True)
class Split(Knob):
    extent: int
    outputs: int
    options: tuple[tuple[int, ...], ...]  # every allowed factor tuple, outermost first
    bounded: bool  # options given (or filtered) rather than every factorization

    @staticmethod
    def of(name: str, extent: int, num_outputs: int = 2, candidate: Sequence[Sequence[int]] | None = None,
           max_factor: int | None = None) -> Split:
        if not isinstance(extent, int) or extent < 1:
            raise TemplateError(f"knob {name!r}: a split needs a loop or a positive extent, got {extent!r}")
        if not isinstance(num_outputs, int) or num_outputs < 2:
            raise TemplateError(f"knob {name!r}: num_outputs must be an integer of at least 2, got {num_outputs!r}")
        every = [t for t in itertools.product(divisors(extent), repeat=num_outputs) if math.prod(t) == extent]
        if candidate is not None:
            options = []
            for row in candidate:
                t = tuple(row)
                if len(t) != num_outputs or not all(isinstance(x, int) and x > 0 for x in t):
                    raise TemplateError(f"knob {name!r}: candidate {list(t)} is not {num_outputs} positive integers")
                if math.prod(t) != extent:
                    raise TemplateError(f"knob {name!r}: candidate {list(t)} multiplies to {math.prod(t)}, "
                                        f"not to the extent {extent}")
                options.append(t)
        else:
            options = every
        if max_factor is not None:
            options = [t for t in options if max(t[1:]) <= max_factor]
        if not options:
            raise TemplateError(f"knob {name!r}: no split of extent {extent} into {num_outputs} factors is left")
        return Split(name, extent, num_outputs, tuple(dict.fromkeys(options)),
                     candidate is not None or max_factor is not None)

    @property
    def names(self) -> list[str]:
        return [f"{self.name}_{k}" for k in range(self.outputs)]

    def params(self) -> list[Param]:
        return [Ordinal(n, sorted({t[k] for t in self.options})) for k, n in enumerate(self.names)]

    def constraints(self) -> list[Constraint]:
        if self.bounded:
            return [Constraint.allowed(self.names, self.options, f"{self.name}: one of {len(self.options)} splits")]
        return [Constraint.make(" * ".join(self.names) + f" == {self.extent}", set(self.names))]

    def value(self, config: Mapping[str, Any]) -> SplitValue:
        return SplitValue(self.name, self.extent, tuple(int(config[n]) for n in self.names))

    def first(self) -> SplitValue:
        return SplitValue(self.name, self.extent, self.options[0])


@dataclass(frozen=True)
class Reorder(Knob):
    loops: tuple[str, ...]
    options: tuple[tuple[str, ...], ...]

    @staticmethod
    def of(name: str, loops: Sequence[Any], policy: str = "all",
           candidate: Sequence[Sequence[Any]] | None = None) -> Reorder:
        names = tuple(loop_name(x) for x in loops)
        if len(names) < 2 or len(set(names)) != len(names):
            raise TemplateError(f"knob {name!r}: a reorder needs two or more distinct loops, got {list(names)}")
        if candidate is not None:
            options = []
            for row in candidate:
                order = tuple(names[x] if isinstance(x, int) and 0 <= x < len(names) else loop_name(x) for x in row)
                if sorted(order) != sorted(names):
                    raise TemplateError(f"knob {name!r}: candidate {list(row)} is not an order of {list(names)}")
                options.append(order)
        elif policy == "all":
            if math.factorial(len(names)) > MAX_CHOICES:
                raise TemplateError(f"knob {name!r}: {len(names)} loops have too many orders; give candidate=")
            options = list(itertools.permutations(names))
        else:
            raise TemplateError(f"knob {name!r}: unknown reorder policy {policy!r} (use 'all' or candidate=)")
        return Reorder(name, names, tuple(dict.fromkeys(options)))

    def params(self) -> list[Param]:
        return [Categorical(self.name, list(self.options))]

    def value(self, config: Mapping[str, Any]) -> OrderValue:
        return OrderValue(self.name, self.loops, tuple(config[self.name]))

    def first(self) -> OrderValue:
        return OrderValue(self.name, self.loops, self.options[0])


ANNOTATIONS = ("unroll", "vectorize", "parallel")


@dataclass(frozen=True)
class Annotate(Knob):
    kind: str
    loops: tuple[str, ...]
    options: tuple[tuple[str, ...], ...]

    @staticmethod
    def of(name: str, loops: Sequence[Any], policy: str) -> Annotate:
        names = tuple(loop_name(x) for x in loops)
        if not names or len(set(names)) != len(names):
            raise TemplateError(f"knob {name!r}: an annotation needs distinct loops, got {list(names)}")
        if policy not in ANNOTATIONS:
            raise TemplateError(f"knob {name!r}: unknown annotation {policy!r}; use one of {', '.join(ANNOTATIONS)}")
        if policy == "unroll":
            if 2 ** len(names) > MAX_CHOICES:
                raise TemplateError(f"knob {name!r}: too many loops to choose subsets of")
            options = [c for r in range(len(names) + 1) for c in itertools.combinations(names, r)]
        else:  # one loop or none: a stage has one parallel loop, and only its innermost vectorizes
            options = [()] + [(n,) for n in names]
        return Annotate(name, policy, names, tuple(options))

    def params(self) -> list[Param]:
        return [Categorical(self.name, list(self.options))]

    def value(self, config: Mapping[str, Any]) -> AnnotateValue:
        return AnnotateValue(self.name, self.kind, self.loops, tuple(config[self.name]))

    def first(self) -> AnnotateValue:
        return AnnotateValue(self.name, self.kind, self.loops, self.options[0])


@dataclass(frozen=True)
class Choice(Knob):
    options: tuple[Any, ...]

    @staticmethod
    def of(name: str, values: Sequence[Any]) -> Choice:
        values = tuple(values)
        if not values:
            raise TemplateError(f"knob {name!r}: define_knob needs at least one value")
        return Choice(name, values)

    def params(self) -> list[Param]:
        return [infer_param(self.name, list(self.options))]

    def value(self, config: Mapping[str, Any]) -> Any:
        return config[self.name]

    def first(self) -> Any:
        return self.options[0]
