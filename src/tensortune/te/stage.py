"""The stage handle `s[T]`: loop primitives with their legality checks.

Example:
    >>> from tensortune import te
    >>> A = te.placeholder((100,), name="A")
    >>> B = te.compute((100,), lambda i: A[i] + 1, name="B")
    >>> s = te.create_schedule(B)
    >>> o, i = s[B].split("i", 16)          # 16 does not divide 100: the tail is guarded
    >>> (o.extent, i.extent)
    (7, 16)
    >>> s[B].vectorize(i)
    >>> s[B].fuse(i, o)
    Traceback (most recent call last):
    ...
    tensortune.te.dtype.TEError: fuse: loops i.1, i.0 of 'B' are not adjacent and in order (the loops are i.0, i.1); reorder them first
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .dtype import TEError
from .state import FuseRel, SplitRel, StageState
from .steps import Annotate, ComputeAt, ComputeInline, ComputeRoot, Fuse, Reorder, ReorderStorage, Split
from .tensor import Tensor

if TYPE_CHECKING:
    from .schedule import Loop, Schedule


class Stage:
    """A view of one stage of a schedule; every primitive is recorded as a step."""

    def __init__(self, schedule: Schedule, name: str) -> None:
        self.schedule = schedule
        self.name = name

    def __repr__(self) -> str:
        return f"Stage({self.name!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stage) and other.schedule is self.schedule and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    @property
    def _st(self) -> StageState:
        return self.schedule.state(self.name)

    # -- what the stage is --

    @property
    def tensor(self) -> Tensor:
        return self._st.tensor

    @property
    def op(self) -> Any:
        return self._st.tensor.op

    @property
    def is_output(self) -> bool:
        return self._st.is_output

    @property
    def is_reduction(self) -> bool:
        return self._st.is_reduction

    @property
    def inlined(self) -> bool:
        return self._st.inlined

    @property
    def attach(self) -> tuple[str, str] | None:
        """(target stage, loop) when computed at another stage's loop."""
        return self._st.attach

    @property
    def origin(self) -> str:
        return self._st.origin

    @property
    def loops(self) -> list[Loop]:
        """The current loops, outermost first."""
        return [self.loop(n) for n in self._st.leaves] if not self._st.inlined else []

    @property
    def axis(self) -> list[Loop]:
        """The spatial root loops (valid while they have not been split or fused)."""
        return [self.loop(a.name) for a in self._st.axes]

    @property
    def reduce_axis(self) -> list[Loop]:
        return [self.loop(a.name) for a in self._st.reduce_axes]

    def loop(self, name: Any) -> Loop:
        from .schedule import Loop, _name
        name = _name(name)
        st = self._st
        if st.inlined:
            raise TEError(f"stage {self.name!r} is inlined; it has no loops")
        if name not in st.leaves:
            raise TEError(self._missing(name))
        ext = self.schedule.bounds()[self.name].extents[name]
        return Loop(self.name, name, ext, st.kinds[name], st.annotations.get(name, ""))

    def _missing(self, name: str) -> str:
        st = self._st
        for rel in st.relations:
            if isinstance(rel, SplitRel) and rel.parent == name:
                return f"loop {name!r} of {self.name!r} was split into {', '.join(rel.children)}"
            if isinstance(rel, FuseRel) and name in rel.parents:
                return f"loop {name!r} of {self.name!r} was fused into {rel.child!r}"
        return f"stage {self.name!r} has no loop {name!r}; its loops are {', '.join(st.leaves)}"

    def _leaf(self, loop: Any) -> str:
        return self.loop(loop).name

    def _free(self, loop: str, what: str) -> None:
        st = self._st
        if st.annotations.get(loop):
            raise TEError(f"{what}: loop {loop!r} of {self.name!r} is annotated {st.annotations[loop]!r}; "
                          "annotate loops after splitting and fusing them")
        users = self.schedule.attached_at(self.name, loop)
        if users:
            raise TEError(f"{what}: stage(s) {', '.join(users)} are computed at loop {loop!r} of {self.name!r}; "
                          "transform the loop before compute_at")

    # -- loop primitives --

    def split(self, loop: Any, factor: int | None = None, nparts: int | None = None,
              factors: Any = None) -> tuple[Loop, ...]:
        """Split a loop: by `factor` (inner extent) into (outer, inner), by `nparts`
        (outer extent), or by a list of inner `factors` into len(factors) + 1 loops.
        Factors need not divide the extent: the tail is guarded."""
        name = self._leaf(loop)
        given = [x is not None for x in (factor, nparts, factors)]
        if sum(given) != 1:
            raise TEError("split takes exactly one of factor=, nparts= or factors=")
        if nparts is not None:
            _positive(nparts, "nparts")
            factors = (-(-self.loop(name).extent // nparts),)
        elif factor is not None:
            factors = (factor,)
        factors = tuple(factors)
        if not factors:
            raise TEError("split needs at least one factor")
        for f in factors:
            _positive(f, "split factor")
        self._free(name, "split")
        children = self.schedule._run(Split(self.name, name, factors), lambda: self._st.split(name, factors))
        return tuple(self.loop(c) for c in children)

    def tile(self, x: Any, y: Any, x_factor: int, y_factor: int) -> tuple[Loop, Loop, Loop, Loop]:
        """Split two nested loops and reorder to (x.0, y.0, x.1, y.1)."""
        xo, xi = self.split(x, x_factor)
        yo, yi = self.split(y, y_factor)
        self.reorder(xo, yo, xi, yi)
        return self.loop(xo), self.loop(yo), self.loop(xi), self.loop(yi)

    def fuse(self, *loops: Any) -> Loop:
        """Fuse consecutive loops (outermost first) into one."""
        if len(loops) == 1 and isinstance(loops[0], (list, tuple)):
            loops = tuple(loops[0])
        names = tuple(self._leaf(x) for x in loops)
        if len(names) < 2:
            raise TEError("fuse needs at least two loops")
        st = self._st
        pos = [st.leaves.index(n) for n in names]
        if pos != list(range(pos[0], pos[0] + len(pos))):
            raise TEError(f"fuse: loops {', '.join(names)} of {self.name!r} are not adjacent and in order "
                          f"(the loops are {', '.join(st.leaves)}); reorder them first")
        kinds = {st.kinds[n] for n in names}
        if len(kinds) > 1:
            raise TEError(f"fuse: cannot fuse spatial and reduction loops ({', '.join(names)})")
        for n in names:
            self._free(n, "fuse")
        fused = self.schedule._run(Fuse(self.name, names), lambda: st.fuse(names))
        return self.loop(fused)

    def reorder(self, *loops: Any) -> None:
        """Put these loops, in this order, into the positions they occupy now."""
        if len(loops) == 1 and isinstance(loops[0], (list, tuple)):
            loops = tuple(loops[0])
        names = tuple(self._leaf(x) for x in loops)
        if len(set(names)) != len(names):
            raise TEError(f"reorder: repeated loop in {names}")
        self.schedule._run(Reorder(self.name, names), lambda: self._st.reorder(names))

    def annotate(self, loop: Any, annotation: str) -> None:
        """Mark a loop "parallel", "vectorize", "unroll" (or "none")."""
        from .schedule import ANNOTATIONS
        name = self._leaf(loop)
        if annotation not in ANNOTATIONS:
            raise TEError(f"unknown annotation {annotation!r}; use one of {', '.join(ANNOTATIONS)}")
        st = self._st
        if annotation in ("parallel", "vectorize") and st.kinds[name] == "reduce":
            why = ("iterations would race on the same outputs" if annotation == "parallel"
                   else "it carries the accumulation")
            raise TEError(f"cannot {annotation} reduction loop {name!r} of {self.name!r}: {why}; {annotation} a "
                          "spatial loop instead, or make this one spatial with schedule.rfactor")

        def change() -> None:
            if annotation == "none":
                st.annotations.pop(name, None)
            else:
                st.annotations[name] = annotation

        self.schedule._run(Annotate(self.name, name, annotation), change)

    def parallel(self, loop: Any) -> None:
        self.annotate(loop, "parallel")

    def vectorize(self, loop: Any) -> None:
        self.annotate(loop, "vectorize")

    def unroll(self, loop: Any) -> None:
        self.annotate(loop, "unroll")

    def reorder_storage(self, *axes: Any) -> None:
        """Lay out this stage's buffer with its dimensions in this order (axis names or
        root loops, outermost first; the default is the axes' order). Loops are unchanged;
        every read and write of the buffer follows. A packed copy (`cache_read`) whose
        reader vectorizes along one of its axes wants that axis last; so does a local
        accumulator tile vectorized along an axis that is not the tensor's last."""
        from .schedule import _name
        if len(axes) == 1 and isinstance(axes[0], (list, tuple)):
            axes = tuple(axes[0])
        order = tuple(_name(a) for a in axes)
        st = self._st
        names = [a.name for a in st.axes]
        if st.is_output:
            raise TEError(f"reorder_storage: {self.name!r} is an output; its layout is the caller's array")
        if st.inlined:
            raise TEError(f"reorder_storage: {self.name!r} is inlined; it has no buffer")
        if sorted(order) != sorted(names) or len(set(order)) != len(order):
            raise TEError(f"reorder_storage: {', '.join(order) or 'nothing'} is not an order of the axes of "
                          f"{self.name!r} ({', '.join(names)}); name each axis once")

        def change() -> None:
            st.storage = None if list(order) == names else order

        self.schedule._run(ReorderStorage(self.name, order), change)

    # -- compute location --

    def compute_at(self, target: Any, loop: Any) -> None:
        """Compute this stage inside `loop` of its consumer `target`, only the region
        that one iteration of `loop` reads."""
        from .schedule import _name
        st = self._st
        tname = _name(target)
        tstage = self.schedule[tname]
        lname = tstage._leaf(loop)
        if st.is_output:
            raise TEError(f"compute_at: {self.name!r} is an output; outputs are computed at the root")
        if st.inlined:
            raise TEError(f"compute_at: {self.name!r} is inlined")
        if tname == self.name:
            raise TEError("compute_at: a stage cannot be computed inside itself")
        problem = self.schedule.attach_problem(self.name, tname, lname)
        if problem:
            raise TEError(f"compute_at: {problem}")
        if tstage._st.annotations.get(lname) == "vectorize":
            raise TEError(f"compute_at: loop {lname!r} of {tname!r} is vectorized")

        def change() -> None:
            st.attach = (tname, lname)

        self.schedule._run(ComputeAt(self.name, tname, lname), change)

    def compute_root(self) -> None:
        st = self._st
        if st.inlined:
            raise TEError(f"compute_root: {self.name!r} is inlined")

        def change() -> None:
            st.attach = None

        self.schedule._run(ComputeRoot(self.name), change)

    def compute_inline(self) -> None:
        """Substitute this elementwise stage into its consumers (no buffer, no loops)."""
        st = self._st
        if st.is_output:
            raise TEError(f"compute_inline: {self.name!r} is an output")
        if st.is_reduction:
            raise TEError(f"compute_inline: {self.name!r} is a reduction; only elementwise stages can be inlined")
        if st.inlined:
            raise TEError(f"compute_inline: {self.name!r} is already inlined")
        if st.transformed or st.attach is not None:
            raise TEError(f"compute_inline: {self.name!r} was already scheduled; inline it first")
        users = [n for n, x in self.schedule._stages.items() if x.attach is not None and x.attach[0] == self.name]
        if users:
            raise TEError(f"compute_inline: stage(s) {', '.join(users)} are computed at {self.name!r}")

        def change() -> None:
            st.inlined = True

        self.schedule._run(ComputeInline(self.name), change)


def _positive(x: Any, what: str) -> None:
    if not isinstance(x, int) or isinstance(x, bool) or x <= 0:
        raise TEError(f"{what} must be a positive integer, got {x!r}")

