"""Schedules: how a computation runs, transformed by checked primitives and recorded as steps.

Example:
    >>> from tensortune import te
    >>> A = te.placeholder((64, 64), name="A")
    >>> B = te.compute((64, 64), lambda i, j: A[j, i] * 2, name="B")
    >>> s = te.create_schedule(B)
    >>> io, jo, ii, ji = s[B].tile("i", "j", 8, 16)
    >>> s[B].parallel(io)
    >>> s[B].vectorize(ji)
    >>> [l.name for l in s[B].loops]
    ['i.0', 'j.0', 'i.1', 'j.1']
    >>> len(s.steps)
    5
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .bound import StageBounds, infer_bounds
from .dtype import TEError
from .expr import Expr
from .state import StageState, inline_reads, reads_of
from .steps import Step, steps_from_json, steps_to_json
from .tensor import Tensor, graph

ANNOTATIONS = ("parallel", "vectorize", "unroll", "none")
MAX_UNROLL = 512  # iterations of an unrolled loop and of the loops inside it


@dataclass(frozen=True)
class Loop:
    """A snapshot of one loop of a stage; primitives accept it or its name."""

    stage: str
    name: str
    extent: int
    kind: str  # "spatial" or "reduce"
    annotation: str  # "", "parallel", "vectorize" or "unroll"

    def __str__(self) -> str:
        return self.name


def _name(x: Any) -> str:
    if isinstance(x, (Loop, Stage)):
        return x.name
    if isinstance(x, Tensor):
        return x.name
    if isinstance(x, str):
        return x
    raise TEError(f"expected a loop, a stage, a tensor or a name, got {x!r}")


class Schedule:
    """The schedule of the computation that produces `outputs`; starts as the default
    (every stage at the root, loops in axis order, nothing annotated), which is correct."""

    def __init__(self, outputs: Tensor | Sequence[Tensor]) -> None:
        outs = (outputs,) if isinstance(outputs, Tensor) else tuple(outputs)
        tensors = graph(outs)
        seen: dict[str, Tensor] = {}
        for t in tensors:
            if t.name in seen:
                raise TEError(f"two different tensors are named {t.name!r}; give every tensor its own name")
            seen[t.name] = t
        for t in outs:
            if t.is_placeholder:
                raise TEError(f"output {t.name!r} is a placeholder; outputs must be computed tensors")
        self.outputs = outs
        self.inputs = tuple(t for t in tensors if t.is_placeholder)
        self._stages = {t.name: StageState.of(t, is_output=any(t is o for o in outs))
                        for t in tensors if not t.is_placeholder}
        self._steps: list[Step] = []
        self._bounds: dict[str, StageBounds] | None = None
        self._bodies: dict[str, Expr] | None = None

    # -- access --

    def __getitem__(self, key: Any) -> Stage:
        name = _name(key)
        if name not in self._stages:
            if any(t.name == name for t in self.inputs):
                raise TEError(f"{name!r} is an input placeholder; it has no loops to schedule")
            raise TEError(f"no stage named {name!r}; stages: {', '.join(self._stages)}")
        return Stage(self, name)

    @property
    def stages(self) -> list[Stage]:
        """Every computed stage, producers before consumers (inlined ones included)."""
        return [Stage(self, n) for n in self._stages]

    @property
    def steps(self) -> tuple[Step, ...]:
        return tuple(self._steps)

    def state(self, name: str) -> StageState:
        return self._stages[name]

    def bodies(self) -> dict[str, Expr]:
        """Each non-inlined stage's body with inlined producers substituted."""
        if self._bodies is None:
            inlined = {id(st.tensor): st for st in self._stages.values() if st.inlined}
            self._bodies = {n: inline_reads(st.body, inlined) for n, st in self._stages.items() if not st.inlined}
        return self._bodies

    def bounds(self) -> dict[str, StageBounds]:
        if self._bounds is None:
            self._bounds = infer_bounds(self._stages, self.bodies())
        return self._bounds

    def consumers(self, name: str) -> list[str]:
        """The non-inlined stages that read `name` (through inlined stages too)."""
        t = self._stages[name].tensor if name in self._stages else next(x for x in self.inputs if x.name == name)
        return [n for n, body in self.bodies().items() if n != name and reads_of(body, t)]

    def producers(self, name: str) -> list[str]:
        """The non-inlined computed stages that `name` reads (through inlined stages too)."""
        body = self.bodies()[name]
        return [n for n, st in self._stages.items() if not st.inlined and n != name and reads_of(body, st.tensor)]

    def attach_problem(self, name: str, target: str, loop: str) -> str | None:
        """Why `name` cannot be computed at `loop` of `target` (None if it can): each of its
        consumers must be the target, or run inside `loop` (computed at it or inside it)."""
        consumers = self.consumers(name)
        if not consumers:
            return f"{name!r} has no consumer"
        for q in consumers:
            if q == target:
                continue
            cur, inside = q, False
            while self._stages[cur].attach is not None:
                t, l = self._stages[cur].attach  # type: ignore[misc]
                if t == target:
                    leaves = self._stages[t].leaves
                    if leaves.index(l) < leaves.index(loop):
                        return (f"{name!r} is read by {q!r}, which runs at loop {l!r} of {target!r}, outside loop "
                                f"{loop!r}; compute {name!r} at {l!r} or a loop around it")
                    inside = True
                    break
                cur = t
            if not inside:
                return (f"{name!r} is read by {', '.join(consumers)}; each reader must be {target!r} or be computed "
                        f"inside loop {loop!r} of {target!r}, and {q!r} is not")
        return None

    def attached_at(self, stage: str, loop: str) -> list[str]:
        return [n for n, st in self._stages.items() if st.attach == (stage, loop)]

    # -- steps, serialization, replay --

    def apply(self, steps: Step | Iterable[Step]) -> Schedule:
        for step in [steps] if isinstance(steps, Step) else steps:
            step.apply(self)
        return self

    def to_json(self) -> list[dict[str, Any]]:
        return steps_to_json(self._steps)

    @classmethod
    def from_steps(cls, outputs: Tensor | Sequence[Tensor], steps: Iterable[Step] | str) -> Schedule:
        """Replay recorded steps (or their JSON) on a fresh default schedule."""
        steps = steps_from_json(steps) if isinstance(steps, str) else [
            s if isinstance(s, Step) else steps_from_json([s])[0] for s in steps]
        return cls(outputs).apply(steps)

    def copy(self) -> Schedule:
        return Schedule.from_steps(self.outputs, self._steps)

    def lower(self, name: str = "kernel", args: Sequence[Tensor] | None = None):
        from .lower import lower
        return lower(self, args, name)

    def __str__(self) -> str:
        return str(self.lower())

    # -- the transaction every primitive runs in --

    def _run(self, step: Step, change: Any) -> Any:
        saved = {n: st.copy() for n, st in self._stages.items()}
        try:
            result = change()
            self._bounds = self._bodies = None
            self._check()
        except Exception:
            self._stages, self._bounds, self._bodies = saved, None, None
            raise
        self._steps.append(step)
        return result

    def _check(self) -> None:
        for st in self._stages.values():
            if st.attach is not None:
                problem = self.attach_problem(st.name, *st.attach)
                if problem:
                    raise TEError(f"{st.name!r} is computed at loop {st.attach[1]!r} of {st.attach[0]!r}, "
                                  f"which is no longer possible: {problem}")
        bounds = self.bounds()
        for st in self._stages.values():
            if st.inlined:
                continue
            par = [x for x in st.leaves if st.annotations.get(x) == "parallel"]
            if len(par) > 1:
                raise TEError(f"stage {st.name!r} has several parallel loops ({', '.join(par)}); fuse them and "
                              "parallelize the fused loop")
            for loop, ann in st.annotations.items():
                if ann == "vectorize":
                    if st.leaves[-1] != loop:
                        raise TEError(f"vectorized loop {loop!r} of {st.name!r} must be the innermost loop (the "
                                      f"loops are {', '.join(st.leaves)})")
                    if self.attached_at(st.name, loop):
                        raise TEError(f"vectorized loop {loop!r} of {st.name!r} has stages computed inside it")
                if ann == "unroll":
                    ext = bounds[st.name].extents
                    inner = st.leaves[st.leaves.index(loop):]
                    steps = 1
                    for x in inner:
                        steps *= 1 if st.annotations.get(x) == "vectorize" else ext[x]  # (one vector op)
                    if steps > MAX_UNROLL:
                        raise TEError(f"unrolling loop {loop!r} of {st.name!r} would copy its body {steps} times "
                                      f"(its extent times those of the non-vectorized loops inside it); the limit is "
                                      f"{MAX_UNROLL}, split it or unroll an inner loop")
            if par and st.attach is not None:
                target, loop = st.attach
                while True:
                    t = self._stages[target]
                    pos = t.leaves.index(loop)
                    if any(t.annotations.get(x) == "parallel" for x in t.leaves[:pos + 1]):
                        raise TEError(f"stage {st.name!r} has parallel loop {par[0]!r} but is computed inside "
                                      f"the parallel loops of {t.name!r}; nested parallelism is not supported")
                    if t.attach is None:
                        break
                    target, loop = t.attach

    # -- stage-creating primitives (see rewrite.py) --

    def cache_write(self, tensor: Any, scope: str = "local") -> Tensor:
        """Compute `tensor` into a new stage `<name>.<scope>` (an accumulator to compute
        at a loop of the original stage, which then only copies it out)."""
        from .rewrite import cache_write
        return cache_write(self, _name(tensor), scope)

    def cache_read(self, tensor: Any, readers: Any, scope: str = "local") -> Tensor:
        """Copy `tensor` into a new stage `<name>.<scope>` that `readers` read instead;
        computed at a loop of a reader, the copy is a packed tile."""
        from .rewrite import cache_read
        names = [_name(r) for r in (readers if isinstance(readers, (list, tuple)) else [readers])]
        return cache_read(self, _name(tensor), names, scope)

    def rfactor(self, tensor: Any, loop: Any) -> Tensor:
        """Turn reduction loop `loop` (a reduce axis, or a part of one just split) into a
        spatial axis of a new stage `<name>.rf` of partial results, which the original
        stage then reduces: the partial reductions can run in parallel or vectorized."""
        from .rewrite import rfactor
        return rfactor(self, _name(tensor), _name(loop))

    # -- helpers --

    def _stage(self, name: str, what: str) -> StageState:
        if name not in self._stages:
            self[name]  # raises the right error
        st = self._stages[name]
        if st.inlined:
            raise TEError(f"{what}: stage {name!r} is inlined; it has no loops")
        return st

    def _attached_to(self, name: str) -> list[str]:
        return [n for n, st in self._stages.items() if st.attach is not None and st.attach[0] == name]

    def _fresh_name(self, base: str) -> str:
        taken = set(self._stages) | {t.name for t in self.inputs}
        name, n = base, 1
        while name in taken:
            name, n = f"{base}{n}", n + 1
        return name

    def _insert(self, st: StageState, before: str | list[str]) -> None:
        firsts = [before] if isinstance(before, str) else before
        order = list(self._stages)
        pos = min(order.index(b) for b in firsts)
        order.insert(pos, st.name)
        stages = dict(self._stages)
        stages[st.name] = st
        self._stages = {n: stages[n] for n in order}


def create_schedule(outputs: Tensor | Sequence[Tensor]) -> Schedule:
    """The default schedule of a computation (see `Schedule`)."""
    return Schedule(outputs)


from .stage import Stage  # noqa: E402  (the stage handle uses Schedule's helpers)

__all__ = ["ANNOTATIONS", "Loop", "Schedule", "Stage", "create_schedule"]
