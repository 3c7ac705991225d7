"""A kernel of the partition as a te graph: fresh placeholders, canonical names, a key.

The stages of a `KernelSpec` are built over placeholders `in0, in1, ...` (the values it
reads, in order of first use), named `t0, t1, ...` in order, the output `out`. Two
kernels that compute the same thing on the same shapes (every layer of a transformer)
therefore have the same text, which is what tasks are deduplicated and records keyed by.

Example:
    >>> import torch
    >>> from tensortune.graph.capture import capture
    >>> from tensortune.graph.lower import lower
    >>> from tensortune.graph.partition import default_partition
    >>> [cap] = capture(lambda x: torch.softmax(x, -1), [torch.randn(4, 8)])
    >>> g = lower(cap.gm, cap.example_inputs)
    >>> [spec] = default_partition(g, lambda g, nodes: True).kernels(g)
    >>> k = build_kernel(g, spec)
    >>> k.output.name, [t.name for t in k.placeholders], gpu_kind(k.output)
    ('out', ['in0'], 'rows')
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from .. import te
from ..te.tensor import Tensor
from .ir import Graph, bf16_te_dtype, te_dtype
from .lowering.context import te_shape
from .partition import KernelSpec


@dataclass(frozen=True, eq=False)
class KernelGraph:
    """A kernel's te graph: its placeholders (one per value it reads) and output."""

    spec: KernelSpec
    output: Tensor
    placeholders: tuple[Tensor, ...]
    text: str
    half: str = "float16"  # how the graph's float16 tensors are stored on the GPU (bfloat16 values)

    @property
    def key(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()[:16]


def build_kernel(graph: Graph, spec: KernelSpec) -> KernelGraph:
    """The te graph of `spec` over fresh placeholders (see the module docstring)."""
    tensors: dict[int, Tensor] = {}
    holders = []
    for k, i in enumerate(spec.inputs):
        info = graph.nodes[i].info
        assert info is not None
        holders.append(te.placeholder(te_shape(info.shape), te_dtype(info.dtype), f"in{k}"))
        tensors[i] = holders[-1]
    for k, i in enumerate(spec.nodes):
        n = graph.nodes[i]
        name = "out" if i == spec.root else f"t{k}"
        tensors[i] = n.build(name, *[tensors[p] for p in n.inputs])
    out = tensors[spec.root]
    from ..backends.triton.patterns import describe_graph
    text = describe_graph(out)
    half = "float16"
    if bf16_te_dtype() == "float16" and any(
            graph.nodes[i].info is not None and graph.nodes[i].info.dtype == "bfloat16"
            for i in spec.inputs + spec.nodes):
        half = "bfloat16"
        text = "float16 tensors stored as bfloat16\n" + text
    return KernelGraph(spec, out, tuple(holders), text, half)


def stage_nodes(graph: Graph, nodes: frozenset[int]) -> KernelSpec:
    """`nodes` as a kernel spec (its root is the member nothing else in it reads)."""
    read = {p for n in nodes for p in graph.nodes[n].inputs}
    roots = [n for n in nodes if n not in read]
    root = max(roots) if roots else max(nodes)
    order = sorted(nodes)
    reads = [p for n in order for p in graph.nodes[n].inputs if p not in nodes]
    return KernelSpec(root, tuple(order), tuple(dict.fromkeys(reads)))


def gpu_kind(output: Tensor) -> str | None:
    """The GPU pattern of a kernel's graph (contraction, rows, elementwise, ...), None if none."""
    from ..backends.triton.patterns import PatternError, analyze
    try:
        return analyze(output).kind
    except PatternError:
        return None
    except Exception:  # noqa: BLE001 - a graph the analysis cannot take is not a kernel
        return None
