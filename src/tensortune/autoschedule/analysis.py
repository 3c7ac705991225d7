"""What the sketch rules need to know about each stage of an expression graph.

For every computed tensor: its spatial and reduce axes, its consumers, whether it is
elementwise (reads its inputs at its own index, possibly broadcast), injective (no
reduction, any affine index, e.g. padding), or a reduction; whether tiling it gives data
reuse (some input is read without some spatial axis, as A in matmul is read without n),
how many floating-point operations it does, and which of its axes is contiguous in the
output (the one to vectorize).

Example:
    >>> from tensortune.te.tensor import placeholder, compute
    >>> from tensortune.te.ops import reduce_axis, sum
    >>> A, B = placeholder((64, 32), name="A"), placeholder((32, 48), name="B")
    >>> k = reduce_axis(32, "k")
    >>> C = compute((64, 48), lambda m, n: sum(A[m, k] * B[k, n], axis=k), name="C")
    >>> g = analyze(C)
    >>> g["C"].kind, g["C"].has_reuse, g["C"].flops
    ('reduction', True, 196608)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from ..te.affine import Affine
from ..te.expr import Binary, Call, Expr, IterVar, Reduce, Select, TensorRead
from ..te.tensor import Tensor, graph
from ..te.visit import reads, walk

EXPENSIVE = frozenset({"exp", "log", "tanh", "erf", "sigmoid", "sqrt", "cos", "sin"})


@dataclass(frozen=True)
class StageInfo:
    """One computed tensor of the graph, as the sketch rules see it."""

    tensor: Tensor
    spatial: tuple[IterVar, ...]
    reduce: tuple[IterVar, ...]
    kind: str  # "elementwise", "injective", "reduction" or "opaque"
    is_output: bool
    consumers: tuple[str, ...]
    producers: tuple[str, ...]  # computed tensors it reads (not placeholders)
    has_reuse: bool
    has_branch: bool
    expensive: bool
    flops: int

    @property
    def name(self) -> str:
        return self.tensor.name

    @property
    def spatial_size(self) -> int:
        return _prod(a.extent for a in self.spatial)

    @property
    def reduce_size(self) -> int:
        return _prod(a.extent for a in self.reduce)

    @property
    def is_reduction(self) -> bool:
        return bool(self.reduce)


class GraphInfo(Mapping[str, StageInfo]):
    """The stages of a graph by name, producers before consumers."""

    def __init__(self, outputs: list[Tensor], stages: list[StageInfo], inputs: list[Tensor]) -> None:
        self.outputs = outputs
        self.inputs = inputs
        self._stages = {s.name: s for s in stages}

    def __getitem__(self, name: str) -> StageInfo:
        return self._stages[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._stages)

    def __len__(self) -> int:
        return len(self._stages)

    @property
    def flops(self) -> int:
        return sum(s.flops for s in self._stages.values())

    def describe(self) -> str:
        lines = []
        for s in self._stages.values():
            axes = ", ".join(f"{a.name}:{a.extent}" for a in s.spatial)
            red = ", ".join(f"{a.name}:{a.extent}" for a in s.reduce)
            lines.append(f"{s.name}[{axes}]" + (f" reduce[{red}]" if red else "") + f" {s.kind}"
                         + (" output" if s.is_output else "") + (" reuse" if s.has_reuse else ""))
        return "\n".join(lines)


def analyze(outputs: Tensor | Iterable[Tensor]) -> GraphInfo:
    outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    order = graph(outs)
    names = [t.name for t in order]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError(f"tensor names must be unique for auto-scheduling; repeated: {sorted(dup)}")
    consumers: dict[str, list[str]] = {t.name: [] for t in order}
    for t in order:
        if t.op is not None:
            for p in t.op.inputs:
                consumers[p.name].append(t.name)
    out_names = {t.name for t in outs}
    stages = [_stage(t, t.name in out_names, tuple(consumers[t.name])) for t in order if t.op is not None]
    return GraphInfo(outs, stages, [t for t in order if t.op is None])


def _stage(t: Tensor, is_output: bool, consumers: tuple[str, ...]) -> StageInfo:
    op = t.op
    assert op is not None
    body = op.body
    source = body.source if isinstance(body, Reduce) else body
    rd = reads(source)
    spatial = {a for a in op.axes if a.extent > 1}
    has_reuse = False
    if op.reduce_axes:
        kind = "reduction"
        for r in rd:
            used = {v for ix in r.indices for v in walk(ix) if isinstance(v, IterVar)}
            if spatial - used:
                has_reuse = True
    elif all(_is_own_index(r, op.axes) for r in rd):
        kind = "elementwise"
    elif all(_is_affine(r) for r in rd):
        kind = "injective"
    else:
        kind = "opaque"
    nodes = list(walk(source))
    flops_per_point = sum(1 for x in nodes if isinstance(x, (Binary, Call)) and x.dtype != "int32"
                          and not _is_index(x))
    if isinstance(body, Reduce):
        flops_per_point += 1  # the combine
    size = _prod(a.extent for a in op.axes) * _prod(a.extent for a in op.reduce_axes)
    return StageInfo(
        tensor=t, spatial=op.axes, reduce=op.reduce_axes, kind=kind, is_output=is_output,
        consumers=consumers, producers=tuple(p.name for p in op.inputs if p.op is not None),
        has_reuse=has_reuse, has_branch=any(isinstance(x, Select) for x in nodes),
        expensive=any(isinstance(x, Call) and x.name in EXPENSIVE for x in nodes),
        flops=size * max(1, flops_per_point))


def _is_index(e: Expr) -> bool:
    return any(isinstance(x, TensorRead) for x in walk(e)) is False and e.dtype == "int32"


def _is_own_index(r: TensorRead, axes: tuple[IterVar, ...]) -> bool:
    """Reads `tensor[axes...]` or a broadcast of it (a trailing subset, as bias[n])."""
    idx = r.indices
    if not all(isinstance(i, IterVar) for i in idx):
        return False
    positions = [axes.index(i) for i in idx if i in axes]  # type: ignore[arg-type]
    return len(positions) == len(idx) and positions == sorted(positions) and len(set(positions)) == len(idx)


def _is_affine(r: TensorRead) -> bool:
    for ix in r.indices:
        for atom, _ in Affine.of(ix).terms:
            if not isinstance(atom, IterVar):
                return False
    return True


def _prod(xs: Iterable[int]) -> int:
    n = 1
    for x in xs:
        n *= x
    return n
