"""Schedule steps: the serializable record of every primitive applied to a schedule.

A schedule is its list of steps. Steps name stages and loops, never positions, and
loop names are derived deterministically (`i` split in three is `i.0, i.1, i.2`; fusing
`i.0` and `j.0` gives `i.0@j.0`), so a search can change a split's factors and replay.

Example:
    >>> steps = [Split("C", "i", (8,)), Annotate("C", "i.0", "parallel")]
    >>> [s.to_json() for s in steps][0]
    {'step': 'split', 'stage': 'C', 'loop': 'i', 'factors': [8]}
    >>> steps_from_json([s.to_json() for s in steps]) == steps
    True
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

from .dtype import TEError


@dataclass(frozen=True)
class Step:
    kind: ClassVar[str] = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"step": self.kind}
        for k, v in asdict(self).items():
            out[k] = list(v) if isinstance(v, tuple) else v
        return out

    def apply(self, schedule: Any) -> Any:
        """Apply to a `te.Schedule` (through its public primitives, with their checks)."""
        raise NotImplementedError


@dataclass(frozen=True)
class Split(Step):
    kind: ClassVar[str] = "split"
    stage: str
    loop: str
    factors: tuple[int, ...]

    def apply(self, s: Any) -> Any:
        return s[self.stage].split(self.loop, factors=self.factors)


@dataclass(frozen=True)
class Fuse(Step):
    kind: ClassVar[str] = "fuse"
    stage: str
    loops: tuple[str, ...]

    def apply(self, s: Any) -> Any:
        return s[self.stage].fuse(*self.loops)


@dataclass(frozen=True)
class Reorder(Step):
    kind: ClassVar[str] = "reorder"
    stage: str
    order: tuple[str, ...]

    def apply(self, s: Any) -> Any:
        return s[self.stage].reorder(*self.order)


@dataclass(frozen=True)
class Annotate(Step):
    kind: ClassVar[str] = "annotate"
    stage: str
    loop: str
    annotation: str  # "parallel", "vectorize", "unroll" or "none"

    def apply(self, s: Any) -> Any:
        return s[self.stage].annotate(self.loop, self.annotation)


@dataclass(frozen=True)
class ReorderStorage(Step):
    kind: ClassVar[str] = "reorder_storage"
    stage: str
    order: tuple[str, ...]  # axis names, outermost dimension first

    def apply(self, s: Any) -> Any:
        return s[self.stage].reorder_storage(*self.order)


@dataclass(frozen=True)
class ComputeAt(Step):
    kind: ClassVar[str] = "compute_at"
    stage: str
    target: str
    loop: str

    def apply(self, s: Any) -> Any:
        return s[self.stage].compute_at(s[self.target], self.loop)


@dataclass(frozen=True)
class ComputeRoot(Step):
    kind: ClassVar[str] = "compute_root"
    stage: str

    def apply(self, s: Any) -> Any:
        return s[self.stage].compute_root()


@dataclass(frozen=True)
class ComputeInline(Step):
    kind: ClassVar[str] = "compute_inline"
    stage: str

    def apply(self, s: Any) -> Any:
        return s[self.stage].compute_inline()


@dataclass(frozen=True)
class CacheWrite(Step):
    kind: ClassVar[str] = "cache_write"
    stage: str
    scope: str = "local"

    def apply(self, s: Any) -> Any:
        return s.cache_write(self.stage, self.scope)


@dataclass(frozen=True)
class CacheRead(Step):
    kind: ClassVar[str] = "cache_read"
    stage: str  # the tensor read (a placeholder or a stage)
    readers: tuple[str, ...]
    scope: str = "local"

    def apply(self, s: Any) -> Any:
        return s.cache_read(self.stage, self.readers, self.scope)


@dataclass(frozen=True)
class RFactor(Step):
    kind: ClassVar[str] = "rfactor"
    stage: str
    loop: str

    def apply(self, s: Any) -> Any:
        return s.rfactor(self.stage, self.loop)


STEP_TYPES: dict[str, type[Step]] = {c.kind: c for c in (Split, Fuse, Reorder, Annotate, ReorderStorage, ComputeAt,
                                                          ComputeRoot, ComputeInline, CacheWrite, CacheRead, RFactor)}


def step_from_json(data: dict[str, Any]) -> Step:
    data = dict(data)
    kind = data.pop("step", None)
    cls = STEP_TYPES.get(kind)  # type: ignore[arg-type]
    if cls is None:
        raise TEError(f"unknown schedule step {kind!r}; known: {', '.join(STEP_TYPES)}")
    names = {f.name for f in fields(cls)}
    if set(data) - names or names - set(data) - {"scope"}:
        raise TEError(f"step {kind!r} takes fields {sorted(names)}, got {sorted(data)}")
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


def steps_from_json(data: str | Iterable[dict[str, Any]]) -> list[Step]:
    """Steps from their JSON form (a list of dicts, or its text)."""
    if isinstance(data, str):
        data = json.loads(data)
    return [step_from_json(d) for d in data]


def steps_to_json(steps: Sequence[Step]) -> list[dict[str, Any]]:
    return [s.to_json() for s in steps]
