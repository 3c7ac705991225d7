"""The knob collector `cfg` a template receives: it declares knobs and hands out their values.

A template runs twice in two roles. Collecting (`KnobCollector.collecting()`), every
`define_*` records a knob and `cfg[name]` gives the knob's first option, so the template
runs through and every knob it declares is seen; the knobs become a `tt.Space`.
Applying (`KnobCollector.applying(knobs, config)`), each `define_*` must declare the same
knob with the same options as when collected, and `cfg[name]` gives the configuration's
value. A knob declared twice, declared with other options than collected (its options
depending on another knob's value), or read before it is declared is a `TemplateError`
naming it.

Example:
    >>> cfg = KnobCollector.collecting()
    >>> cfg.define_split("tile_i", 8, num_outputs=2)
    >>> cfg.define_knob("unroll", [0, 16])
    >>> space = cfg.space()
    >>> space.size
    8
    >>> run = KnobCollector.applying(cfg.knobs, {"tile_i_0": 2, "tile_i_1": 4, "unroll": 16})
    >>> run.define_split("tile_i", 8, num_outputs=2); run.define_knob("unroll", [0, 16])
    >>> run["tile_i"].size, run["unroll"]
    ((2, 4), 16)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..space import Space, SpaceError
from ..te.schedule import Loop
from .knobs import Annotate, Choice, Knob, Reorder, Split, TemplateError


class KnobCollector:
    """What a template calls `cfg`: `define_split`, `define_reorder`, `define_annotate`,
    `define_knob`, and `cfg[name]` for a declared knob's value."""

    def __init__(self, known: Mapping[str, Knob] | None, config: Mapping[str, Any] | None) -> None:
        self._known = dict(known) if known is not None else None
        self._config = config
        self.knobs: dict[str, Knob] = {}

    @staticmethod
    def collecting() -> KnobCollector:
        return KnobCollector(None, None)

    @staticmethod
    def applying(knobs: Mapping[str, Knob], config: Mapping[str, Any]) -> KnobCollector:
        return KnobCollector(knobs, config)

    @property
    def is_collecting(self) -> bool:
        return self._known is None

    # -- declarations --

    def define_split(self, name: str, loop: Loop | int, num_outputs: int = 2, *, policy: str = "factors",
                     candidate: Sequence[Sequence[int]] | None = None, max_factor: int | None = None) -> None:
        """Split `loop` (or an extent) into `num_outputs` factors, outermost first, that
        multiply to its extent: every factorization (`policy="factors"`), those listed in
        `candidate`, or those whose inner factors are at most `max_factor`."""
        if policy != "factors":
            raise TemplateError(f"knob {name!r}: unknown split policy {policy!r} (use 'factors', candidate= or "
                                "max_factor=)")
        extent = loop.extent if isinstance(loop, Loop) else loop
        self._declare(Split.of(name, extent, num_outputs, candidate, max_factor))

    def define_reorder(self, name: str, loops: Sequence[Loop | str], policy: str = "all", *,
                       candidate: Sequence[Sequence[Any]] | None = None) -> None:
        """Orders of `loops`: all permutations, or the `candidate` orders (loops or their
        positions in `loops`)."""
        self._declare(Reorder.of(name, loops, policy, candidate))

    def define_annotate(self, name: str, loops: Sequence[Loop | str], policy: str) -> None:
        """`policy="unroll"`: any subset of `loops` unrolled; `"vectorize"` or `"parallel"`:
        one of `loops` (or none) annotated."""
        self._declare(Annotate.of(name, loops, policy))

    def define_knob(self, name: str, values: Sequence[Any]) -> None:
        """A plain list of values (`cfg[name]` is the value itself)."""
        self._declare(Choice.of(name, values))

    def _declare(self, knob: Knob) -> None:
        if not isinstance(knob.name, str) or not knob.name.isidentifier():
            raise TemplateError(f"knob name {knob.name!r} is not a valid identifier")
        if knob.name in self.knobs:
            raise TemplateError(f"knob {knob.name!r} is defined twice in one run of the template")
        if self._known is not None:
            before = self._known.get(knob.name)
            if before is None:
                raise TemplateError(f"knob {knob.name!r} was not declared when the template's space was collected "
                                    "(with every knob at its first option); a template must declare the same knobs "
                                    "whatever their values")
            if before != knob:
                raise TemplateError(f"knob {knob.name!r} is declared with other options than when the space was "
                                    f"collected ({_describe(knob)} instead of {_describe(before)}); a knob's options "
                                    "cannot depend on another knob's value")
        self.knobs[knob.name] = knob

    # -- values --

    def __getitem__(self, name: str) -> Any:
        knob = self.knobs.get(name)
        if knob is None:
            declared = ", ".join(self.knobs) or "none yet"
            raise TemplateError(f"knob {name!r} is read before it is defined (defined so far: {declared})")
        if self._config is None:
            return knob.first()
        return knob.value(self._config)

    def __contains__(self, name: str) -> bool:
        return name in self.knobs

    # -- the space --

    def space(self) -> Space:
        """The knobs as a `tt.Space`, with each split's product constraint."""
        if not self.knobs:
            raise TemplateError("the template declared no knobs; there is nothing to tune")
        params = [p for k in self.knobs.values() for p in k.params()]
        constraints = [c for k in self.knobs.values() for c in k.constraints()]
        try:
            return Space(params, constraints)
        except SpaceError as exc:
            raise TemplateError(f"the template's knobs do not make a space: {exc}") from exc


def _describe(knob: Knob) -> str:
    if isinstance(knob, Split):
        return f"a split of extent {knob.extent} into {knob.outputs}"
    if isinstance(knob, Reorder):
        return f"orders of {list(knob.loops)}"
    if isinstance(knob, Annotate):
        return f"{knob.kind} over {list(knob.loops)}"
    if isinstance(knob, Choice):
        return f"values {list(knob.options)}"
    return repr(knob)
