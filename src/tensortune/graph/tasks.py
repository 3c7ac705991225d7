"""Tasks of a model: its kernels, identical ones merged, each with a weight.

Kernels with the same text (the same stages on the same shapes: every layer of a
transformer) are one task whose weight is how many times the model runs it; the task
scheduler spreads one budget of trials over the tasks to minimise the weighted sum of
their latencies, so a kernel that runs twelve times gets the trials that matter most.

Example:
    >>> import torch
    >>> from tensortune.graph.capture import capture
    >>> from tensortune.graph.lower import lower
    >>> from tensortune.graph.partition import default_partition
    >>> from tensortune.graph.targets import CpuTarget
    >>> layer = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8), torch.nn.ReLU())
    >>> [cap] = capture(layer, [torch.randn(4, 8)])
    >>> g = lower(cap.gm, cap.example_inputs)
    >>> [(t.weight, t.label) for t in collect_tasks(g, default_partition(g, CpuTarget().legal).kernels(g))]
    [(2, 'addmm+relu 4x8')]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .ir import Graph
from .kernel import KernelGraph, build_kernel
from .partition import KernelSpec


@dataclass
class GraphTask:
    """One distinct kernel of the model and where it occurs."""

    key: str
    kernel: KernelGraph  # the first occurrence, tuned for all of them
    occurrences: list[KernelGraph] = field(default_factory=list)
    label: str = ""

    @property
    def weight(self) -> int:
        return len(self.occurrences)


def label_of(graph: Graph, spec: KernelSpec) -> str:
    """A short name: the kernel's anchor ops (matmul, reductions, attention), then the
    elementwise work fused around them, then the output's shape."""
    def name(op: str) -> str:
        if op.startswith("attention."):
            return "attention"
        return op.split(".")[1] if op.startswith("aten.") else op
    nodes = [graph.nodes[i] for i in spec.nodes]
    anchors = [name(n.op) for n in nodes if n.role != "elementwise"]
    rest = [name(n.op) for n in nodes if n.role == "elementwise"]
    shown = [o for o in dict.fromkeys(anchors + rest) if o not in _QUIET] or [name(nodes[-1].op)]
    info = graph.nodes[spec.root].info
    shape = "x".join(str(s) for s in info.shape) if info and info.shape else "scalar"
    return f"{'+'.join(shown[:4])}{'+...' if len(shown) > 4 else ''} {shape}"


_QUIET = {"view", "permute", "expand", "t", "clone", "unsqueeze", "_to_copy", "squeeze", "slice", "select",
          "split_with_sizes", "cat", "index", "bitwise_and", "logical_and"}


def collect_tasks(graph: Graph, kernels: Sequence[KernelSpec]) -> list[GraphTask]:
    """The model's distinct kernels in order of first appearance."""
    tasks: dict[str, GraphTask] = {}
    for spec in kernels:
        k = build_kernel(graph, spec)
        task = tasks.get(k.key)
        if task is None:
            task = tasks[k.key] = GraphTask(k.key, k, label=label_of(graph, spec))
        task.occurrences.append(k)
    return list(tasks.values())
