"""The mutable state behind a schedule: stages, their loops, splits and fusions.

A stage computes one tensor. Its loops start as the tensor's axes (spatial, then
reduce); splits and fusions are recorded as relations, so loop extents are derived
from the root extents that bound inference gives (a stage computed inside another
one's loop covers only the region that loop needs).

Example:
    >>> from tensortune import te
    >>> A = te.placeholder((10,), name="A")
    >>> B = te.compute((10,), lambda i: A[i] * 2, name="B")
    >>> st = StageState.of(B, is_output=True)
    >>> st.split("i", (4,))
    ['i.0', 'i.1']
    >>> st.loop_extents({"i": 10})
    {'i': 10, 'i.0': 3, 'i.1': 4}
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .dtype import TEError
from .expr import Binary, Expr, IterVar, Reduce, TensorRead, Var, compare, const
from .tensor import Tensor
from .visit import map_expr, reads, substitute


@dataclass(frozen=True)
class SplitRel:
    parent: str
    children: tuple[str, ...]
    factors: tuple[int, ...]  # inner extents; children[0] takes ceil(parent / prod(factors))


@dataclass(frozen=True)
class FuseRel:
    parents: tuple[str, ...]
    child: str


@dataclass
class StageState:
    name: str
    tensor: Tensor
    axes: tuple[IterVar, ...]
    reduce_axes: tuple[IterVar, ...]
    body: Expr
    is_output: bool = False
    origin: str = "compute"  # "compute", "cache_write" or "cache_read"
    leaves: list[str] = field(default_factory=list)
    kinds: dict[str, str] = field(default_factory=dict)
    relations: list[SplitRel | FuseRel] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)
    attach: tuple[str, str] | None = None  # (target stage, target loop)
    inlined: bool = False
    storage: tuple[str, ...] | None = None  # the buffer's dimension order (axis names), default the axes'

    @staticmethod
    def of(t: Tensor, is_output: bool = False, origin: str = "compute", name: str | None = None) -> StageState:
        assert t.op is not None
        st = StageState(name or t.name, t, t.op.axes, t.op.reduce_axes, t.op.body, is_output, origin)
        st.reset_loops()
        return st

    def reset_loops(self) -> None:
        self.leaves = [a.name for a in self.axes + self.reduce_axes]
        self.kinds = {a.name: ("reduce" if a.kind == "reduce" else "spatial") for a in self.axes + self.reduce_axes}
        self.relations, self.annotations = [], {}

    def copy(self) -> StageState:
        return StageState(
            self.name, self.tensor, self.axes, self.reduce_axes, self.body, self.is_output, self.origin,
            list(self.leaves), dict(self.kinds), list(self.relations), dict(self.annotations), self.attach,
            self.inlined, self.storage)

    @property
    def is_reduction(self) -> bool:
        return bool(self.reduce_axes)

    @property
    def transformed(self) -> bool:
        return bool(self.relations) or bool(self.annotations) or self.storage is not None or self.leaves != [
            a.name for a in self.axes + self.reduce_axes]

    @property
    def storage_perm(self) -> tuple[int, ...] | None:
        """The buffer's dimensions as positions among the axes (None: axis order)."""
        if self.storage is None:
            return None
        names = [a.name for a in self.axes]
        return tuple(names.index(n) for n in self.storage)

    def root_axes(self) -> tuple[IterVar, ...]:
        return self.axes + self.reduce_axes

    # -- loop transformations (no legality checks here; Schedule does those) --

    def split(self, loop: str, factors: tuple[int, ...]) -> list[str]:
        pos = self.leaves.index(loop)
        children = [f"{loop}.{n}" for n in range(len(factors) + 1)]
        self.relations.append(SplitRel(loop, tuple(children), tuple(factors)))
        self.leaves[pos:pos + 1] = children
        for c in children:
            self.kinds[c] = self.kinds[loop]
        return children

    def fuse(self, loops: tuple[str, ...]) -> str:
        pos = self.leaves.index(loops[0])
        name = "@".join(loops)
        self.relations.append(FuseRel(tuple(loops), name))
        self.leaves[pos:pos + len(loops)] = [name]
        self.kinds[name] = self.kinds[loops[0]]
        return name

    def reorder(self, order: tuple[str, ...]) -> None:
        slots = sorted(self.leaves.index(x) for x in order)
        for slot, name in zip(slots, order):
            self.leaves[slot] = name

    # -- derived quantities --

    def loop_extents(self, root: dict[str, int]) -> dict[str, int]:
        """Extent of every loop (root, intermediate and leaf) given the root extents."""
        ext = dict(root)
        for rel in self.relations:
            if isinstance(rel, SplitRel):
                inner = _prod(rel.factors)
                ext[rel.children[0]] = -(-ext[rel.parent] // inner)
                for c, f in zip(rel.children[1:], rel.factors):
                    ext[c] = f
            else:
                ext[rel.child] = _prod([ext[p] for p in rel.parents])
        return ext

    def loop_var(self, loop: str) -> Var:
        return Var(f"{self.name}/{loop}")

    def loop_values(self, ext: dict[str, int]) -> tuple[dict[str, Expr], list[Expr]]:
        """Each loop's value in terms of the leaf loop variables, and the guards that
        non-dividing splits need (`parent < extent`)."""
        vals: dict[str, Expr] = {leaf: self.loop_var(leaf) for leaf in self.leaves}
        guards: list[Expr] = []
        for rel in reversed(self.relations):
            if isinstance(rel, SplitRel):
                value: Expr | None = None
                stride = 1
                for c, f in zip(reversed(rel.children), (*reversed(rel.factors), None)):
                    term = vals[c] if stride == 1 else Binary("mul", vals[c], const(stride))
                    value = term if value is None else Binary("add", term, value)
                    stride *= f or 1
                assert value is not None
                vals[rel.parent] = value
                if ext[rel.parent] % _prod(rel.factors):
                    guards.append(compare("lt", value, ext[rel.parent]))
            else:
                inner = 1
                for k in range(len(rel.parents) - 1, -1, -1):
                    p = rel.parents[k]
                    v = vals[rel.child]
                    if inner > 1:
                        v = Binary("floordiv", v, const(inner))
                    if k > 0:
                        v = Binary("mod", v, const(ext[p]))
                    vals[p] = v
                    inner *= ext[p]
        return vals, guards


def _prod(xs) -> int:
    n = 1
    for x in xs:
        n *= x
    return n


def reads_of(body: Expr, tensor: Tensor) -> list[TensorRead]:
    return [r for r in reads(body) if r.tensor is tensor]


def replace_reads(body: Expr, old: Tensor, new: Tensor) -> Expr:
    return map_expr(body, lambda x: TensorRead(new, x.indices) if isinstance(x, TensorRead) and x.tensor is old
                    else None)


def inline_reads(body: Expr, inlined: dict[int, StageState]) -> Expr:
    """`body` with every read of an inlined stage replaced by that stage's body."""
    if not inlined:
        return body

    def fn(x: Expr) -> Expr | None:
        if isinstance(x, TensorRead) and id(x.tensor) in inlined:
            st = inlined[id(x.tensor)]
            if isinstance(st.body, Reduce):
                raise TEError(f"cannot inline the reduction {st.name!r}")
            inner = inline_reads(st.body, inlined)
            return substitute(inner, dict(zip(st.axes, x.indices)))
        return None

    return map_expr(body, fn)
