"""The cut of a lowered graph into kernels, as data: per edge, fused or not.

An edge (producer, consumer) between two te stages is *fused* when the producer is
computed inside the consumer's kernel. A stage is *materialized* (written to memory by
a kernel of its own) when it is a graph output, feeds a torch call, or has an edge
that is not fused; its kernel is itself plus everything that reaches it through fused
edges. A stage fused into several consumers is computed in each of them. A reshape of
a value that is in memory anyway costs nothing: it is an alias of that buffer.

`Partition` is what graph-level search varies (which edges to fuse); `default_partition`
is the rule-based cut: cheap stages of inputs and weights are fused into every consumer,
then groups of stages are merged pairwise, producer into consumer, while the merged
group has one output, stays acyclic and is a kernel the target accepts (a contraction
with its prologue and epilogue, reductions over the same rows, or elementwise work).

Example:
    >>> import torch
    >>> from tensortune.graph.capture import capture
    >>> from tensortune.graph.lower import lower
    >>> [cap] = capture(lambda x, w, b: torch.relu(x @ w + b), [torch.randn(8, 4), torch.randn(4, 6),
    ...                                                       torch.randn(6)])
    >>> g = lower(cap.gm, cap.example_inputs)
    >>> [k.describe(g) for k in default_partition(g, lambda g, nodes: True).kernels(g)]
    ['aten.mm.default+aten.add.Tensor+aten.relu.default']
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .ir import Graph

Legal = Callable[[Graph, frozenset[int]], bool]


@dataclass(frozen=True)
class KernelSpec:
    """One kernel: its output stage, its stages in order, and the values it reads from memory."""

    root: int
    nodes: tuple[int, ...]
    inputs: tuple[int, ...]

    def describe(self, graph: Graph) -> str:
        return "+".join(dict.fromkeys(graph.nodes[i].op for i in self.nodes))


@dataclass(frozen=True)
class Partition:
    """Which te edges are fused (see the module docstring)."""

    fused: frozenset[tuple[int, int]]

    def materialized(self, graph: Graph) -> set[int]:
        """te stages written to memory."""
        outputs = set(graph.output_ids())
        out: set[int] = set()
        for n in graph:
            if n.kind != "te":
                continue
            if n.id in outputs:
                out.add(n.id)
        for n in graph:
            for i in n.inputs:
                if graph.nodes[i].kind == "te" and (n.kind != "te" or (i, n.id) not in self.fused):
                    out.add(i)
        return out

    def aliases(self, graph: Graph) -> set[int]:
        """Materialized reshapes whose input is in memory: no kernel, the same buffer."""
        mat = self.materialized(graph)
        return {i for i in mat if graph.nodes[i].alias and _in_memory(graph, graph.nodes[i].inputs[0], mat)}

    def region(self, graph: Graph, root: int) -> set[int]:
        """The stages computed by `root`'s kernel."""
        seen = {root}
        stack = [root]
        while stack:
            c = stack.pop()
            for p in graph.nodes[c].inputs:
                if p not in seen and graph.nodes[p].kind == "te" and (p, c) in self.fused:
                    seen.add(p)
                    stack.append(p)
        return seen

    def kernels(self, graph: Graph) -> list[KernelSpec]:
        """The kernels, in an order that respects their dependences."""
        mat = self.materialized(graph)
        free = self.aliases(graph)
        out = []
        for r in sorted(mat - free):
            nodes = sorted(self.region(graph, r))
            inside = set(nodes)
            reads = [p for n in nodes for p in graph.nodes[n].inputs if p not in inside]
            out.append(KernelSpec(r, tuple(nodes), tuple(dict.fromkeys(reads))))
        return out

    def with_edges(self, fuse: Iterable[tuple[int, int]] = (), cut: Iterable[tuple[int, int]] = ()) -> "Partition":
        return Partition(frozenset((set(self.fused) | set(fuse)) - set(cut)))


def _in_memory(graph: Graph, i: int, mat: set[int]) -> bool:
    return graph.nodes[i].kind != "te" or i in mat


def te_edges(graph: Graph) -> list[tuple[int, int]]:
    return [(p, n.id) for n in graph if n.kind == "te" for p in dict.fromkeys(n.inputs)
            if graph.nodes[p].kind == "te"]


def floating_nodes(graph: Graph) -> set[int]:
    """Cheap elementwise stages of inputs, weights and constants only (reshapes, casts,
    masks): fused into every consumer. One that calls a math function is computed once."""
    out: set[int] = set()
    for n in graph:
        if n.kind == "te" and n.role == "elementwise" and not n.expensive and all(
                graph.nodes[i].kind != "te" or i in out for i in n.inputs):
            out.add(n.id)
    return out


class _Groups:
    """Disjoint groups of stages, merged under the rules of `default_partition`."""

    def __init__(self, graph: Graph, floating: set[int], legal: Legal) -> None:
        self.graph = graph
        self.floating = floating
        self.legal = legal
        self.group: dict[int, int] = {n.id: n.id for n in graph if n.kind == "te" and n.id not in floating}
        self.members: dict[int, set[int]] = {g: {g} for g in self.group}
        self.consumers = graph.consumers()
        self.outputs = set(graph.output_ids())
        self._legal: dict[frozenset[int], bool] = {}

    def outside_readers(self, nodes: set[int]) -> int:
        """How many members are read from outside `nodes` (or are graph outputs)."""
        count = 0
        for m in nodes:
            if m in self.outputs or any(c not in nodes for c in self.consumers[m]):
                count += 1
        return count

    def reaches(self, start: set[int], target: set[int], avoid: set[int]) -> bool:
        """Whether a path leaves `start` and reaches `target` through nodes outside `avoid`
        (node ids are topological: nothing past the last target can lead back to it)."""
        if not target:
            return False
        last = max(target)
        stack = [c for m in start for c in self.consumers[m] if c not in avoid and c <= last]
        seen: set[int] = set()
        while stack:
            x = stack.pop()
            if x in target:
                return True
            if x in seen:
                continue
            seen.add(x)
            stack.extend(c for c in self.consumers[x] if (c not in avoid or c in target) and c <= last)
        return False

    def with_floating(self, nodes: set[int]) -> frozenset[int]:
        out = set(nodes)
        stack = list(nodes)
        while stack:
            for p in self.graph.nodes[stack.pop()].inputs:
                if p in self.floating and p not in out:
                    out.add(p)
                    stack.append(p)
        return frozenset(out)

    def is_legal(self, nodes: set[int]) -> bool:
        key = self.with_floating(nodes)
        if key not in self._legal:
            self._legal[key] = self.legal(self.graph, key)
        return self._legal[key]

    def try_merge(self, ids: list[int]) -> bool:
        union: set[int] = set().union(*(self.members[g] for g in ids))
        if self.outside_readers(union) != 1:
            return False
        for g in ids:
            if self.reaches(self.members[g], union - self.members[g], union):
                return False
        if not self.is_legal(union):
            return False
        keep = ids[0]
        for g in ids[1:]:
            for m in self.members.pop(g):
                self.group[m] = keep
            self.members[keep] |= set()
        self.members[keep] = union
        return True

    def anchored(self, alias: int) -> bool:
        """Whether a reshape that needs index arithmetic (`//`, `%`) reads the output of a
        contraction or reduction (so its input is in memory and the reshape is free)."""
        spec = self.graph.nodes[alias].spec
        if getattr(spec, "affine", False):
            return False
        src = self.graph.nodes[alias].inputs[0]
        g = self.group.get(src)
        return g is not None and self.has_anchor(g)

    def costly(self, g: int) -> bool:
        return any(self.graph.nodes[m].expensive for m in self.members[g])

    def has_anchor(self, g: int) -> bool:
        return any(self.graph.nodes[m].role != "elementwise" for m in self.members[g])

    def has_contraction(self, g: int) -> bool:
        return any(self.graph.nodes[m].role == "contraction" for m in self.members[g])


def default_partition(graph: Graph, legal: Legal, *, multi_anchor: bool = False,
                      prologues: bool = True) -> Partition:
    """The rule-based cut (see the module docstring); `legal(graph, nodes)` says whether
    a set of stages makes one kernel on the target; `multi_anchor` also tries a
    contraction, the reductions after it and the contraction after those as one kernel
    (fused attention), where the target has such a kernel; `prologues=False` keeps cheap
    elementwise work that several kernels read (a norm's scaling) in a kernel of its own
    instead of recomputing it in the loads of the contractions that read it."""
    floating = floating_nodes(graph)
    groups = _Groups(graph, floating, legal)
    edges = te_edges(graph)
    for epilogues_only in (True, False):  # elementwise work joins the kernel that produces its input first
        changed = True
        while changed:
            changed = False
            for p, c in edges:
                gp, gc = groups.group.get(p), groups.group.get(c)
                if gp is None or gc is None or gp == gc:
                    continue
                if epilogues_only and groups.has_anchor(gc):
                    continue
                if groups.has_contraction(gc) and not groups.has_anchor(gp) and groups.costly(gp):
                    continue  # math functions in a matmul's loads run once per tile, not once per element
                if graph.nodes[p].alias and groups.has_contraction(gc) and groups.anchored(p):
                    continue  # a matmul reads a reshape of another kernel's output: an alias, not index arithmetic
                if groups.try_merge([gc, gp]):
                    changed = True
    _dissolve(graph, groups, prologues)
    if multi_anchor:
        _merge_chains(graph, groups)
    fused = {(p, c) for p, c in edges if p in floating or
             (p in groups.group and c in groups.group and groups.group[p] == groups.group[c])}
    return Partition(frozenset(fused))


def _dissolve(graph: Graph, groups: _Groups, into_contractions: bool = True) -> None:
    """Cheap elementwise work left in a kernel of its own (a cast or a norm's scaling read
    by kernels that could not take it whole: a rows kernel and the matmuls after it) is
    computed in each of its readers instead, where every reader stays a kernel."""
    changed = True
    while changed:
        changed = False
        for g in list(groups.members):
            members = groups.members.get(g)
            if members is None:
                continue
            nodes = [graph.nodes[m] for m in members]
            if any(n.role != "elementwise" or n.expensive or n.id in groups.outputs for n in nodes):
                continue
            readers = {c for m in members for c in groups.consumers[m] if c not in members}
            if not readers or any(c not in groups.group for c in readers):
                continue
            targets = {groups.group[c] for c in readers}
            if not into_contractions and any(groups.has_contraction(t) for t in targets):
                continue
            if any(n.alias and groups.anchored(n.id) for n in nodes) and any(
                    groups.has_contraction(t) for t in targets):
                continue  # a reshape of a kernel's output stays an alias of its buffer
            groups.floating.update(members)
            if all(groups.is_legal(groups.members[t]) for t in targets):
                del groups.members[g]
                for m in members:
                    del groups.group[m]
                changed = True
            else:
                groups.floating.difference_update(members)


def _merge_chains(graph: Graph, groups: _Groups) -> None:
    """Contraction -> reductions -> contraction, merged as one kernel where legal."""
    for g in list(groups.members):
        if g not in groups.members or not groups.has_contraction(g):
            continue
        parents = {groups.group[p] for m in groups.members[g] for p in graph.nodes[m].inputs
                   if p in groups.group and groups.group[p] != g}
        for p1 in parents:
            if groups.has_contraction(p1):
                continue
            grand = {groups.group[p] for m in groups.members[p1] for p in graph.nodes[m].inputs
                     if p in groups.group and groups.group[p] not in (p1, g)}
            for p2 in grand:
                if groups.has_contraction(p2) and groups.try_merge([g, p1, p2]):
                    break
            else:
                continue
            break
