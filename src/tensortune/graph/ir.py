"""The lowered graph of a model: values, the nodes that make them, and what each node is.

A captured FX graph of core ATen ops becomes a `Graph` of `Node`s in topological order.
A node is one of:

- `input`: a graph input (an activation, a weight); `constant`: a tensor the graph holds;
- `te`: a tensor expression stage: `build(name, *inputs)` makes its te tensor from the te
  tensors of its inputs, so a kernel can be assembled from any set of nodes over fresh
  placeholders; its `role` says what it is (elementwise, reduction or contraction);
- `torch`: a call evaluated by torch at run time (an op outside coverage, a tuple item,
  a dtype conversion at a kernel boundary).

Every value is static: a shape and a dtype (torch's name for it). Integer and boolean
values are stored as int32 wherever tensortune's kernels read or write them.

Example:
    >>> g = Graph()
    >>> x = g.add(Node(0, "input", "x", (), ValueInfo((4,), "float32")))
    >>> g.nodes[x].info.numel
    4
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
ROLES = ("elementwise", "reduction", "contraction")


@dataclass(frozen=True)
class ValueInfo:
    """The static type of a tensor value: shape and torch dtype name."""

    shape: tuple[int, ...]
    dtype: str

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * itemsize(self.dtype)

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOAT_DTYPES

    def __str__(self) -> str:
        return f"{self.dtype}{list(self.shape)}"


def itemsize(dtype: str) -> int:
    return {"float64": 8, "int64": 8, "float32": 4, "int32": 4, "float16": 2, "bfloat16": 2, "int16": 2,
            "int8": 1, "uint8": 1, "bool": 1}.get(dtype, 4)


def te_dtype(dtype: str) -> str:
    """The te storage type of a torch dtype: floats as they are, integers and booleans as int32."""
    if dtype in ("float16", "float32", "float64"):
        return dtype
    if dtype == "bfloat16":
        return bf16_te_dtype()
    return "int32"


def bf16_te_dtype() -> str:
    """How te holds bfloat16 values: as bfloat16 where te has it, else as float16 stored as bfloat16."""
    from ..te.dtype import FLOAT_TYPES
    return "bfloat16" if "bfloat16" in FLOAT_TYPES else "float16"


@dataclass(eq=False)
class Node:
    """One operation of the lowered graph (see the module docstring for the kinds)."""

    id: int
    kind: str  # input | constant | te | torch
    op: str  # what made it: "input", "aten.addmm", "aten.native_layer_norm[mean]", ...
    inputs: tuple[int, ...]
    info: ValueInfo | None  # None: a value that is not one tensor (a tuple from a torch call)
    build: Callable[..., Any] | None = None  # te: build(name, *te_inputs) -> te.Tensor
    call: Callable[..., Any] | None = None  # torch: call(*input_values) -> value
    role: str = ""  # te: elementwise | reduction | contraction
    origin: str = ""  # the FX node it comes from
    alias: bool = False  # te: a reshape of contiguous data (free when its input is in memory)
    flops: float = 0.0
    value: Any = None  # constant: the tensor
    reason: str = ""  # torch: why it was not lowered
    spec: Any = None  # te: how to make it again over other operands (an elementwise op or a reshape)
    expensive: bool = False  # te: calls a math function (exp, cos, ...): not recomputed where it is read

    @property
    def is_te(self) -> bool:
        return self.kind == "te"


@dataclass
class Graph:
    """Nodes in topological order; `outputs` mirrors the FX graph's output structure, with
    node ids where it holds tensors (`OutputRef`) and Python values elsewhere."""

    nodes: list[Node] = field(default_factory=list)
    outputs: Any = ()
    input_ids: list[int] = field(default_factory=list)
    input_positions: list[int] = field(default_factory=list)  # each input's position among the call's arguments

    def add(self, node: Node, position: int | None = None) -> int:
        node.id = len(self.nodes)
        self.nodes.append(node)
        if node.kind == "input":
            self.input_ids.append(node.id)
            self.input_positions.append(len(self.input_positions) if position is None else position)
        return node.id

    def bind(self, args: Any) -> dict[int, Any]:
        """The graph inputs' values among a call's arguments (scalar arguments, specialised
        when the graph was made, are not inputs)."""
        return {i: args[p] for i, p in zip(self.input_ids, self.input_positions)}

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    def consumers(self) -> list[list[int]]:
        """For each node, the nodes that read it (in order, without repeats)."""
        out: list[list[int]] = [[] for _ in self.nodes]
        for n in self.nodes:
            for i in dict.fromkeys(n.inputs):
                out[i].append(n.id)
        return out

    def output_ids(self) -> list[int]:
        return [r.node for r in flatten_outputs(self.outputs)]

    def live(self) -> set[int]:
        """The nodes the outputs depend on (graph inputs always count)."""
        seen = set(self.input_ids)
        stack = self.output_ids()
        while stack:
            i = stack.pop()
            if i not in seen:
                seen.add(i)
                stack.extend(self.nodes[i].inputs)
        seen.update(self.output_ids())
        return seen

    def pruned(self) -> "Graph":
        """The graph without nodes no output depends on, renumbered."""
        keep = self.live()
        new = Graph()
        ids: dict[int, int] = {}
        positions = dict(zip(self.input_ids, self.input_positions))
        for n in self.nodes:
            if n.id not in keep:
                continue
            m = Node(-1, n.kind, n.op, tuple(ids[i] for i in n.inputs), n.info, build=n.build, call=n.call,
                     role=n.role, origin=n.origin, alias=n.alias, flops=n.flops, value=n.value, reason=n.reason,
                     spec=n.spec, expensive=n.expensive)
            ids[n.id] = new.add(m, positions.get(n.id))
        new.outputs = map_outputs(self.outputs, lambda r: OutputRef(ids[r.node]))
        return new

    def describe(self) -> str:
        lines = []
        for n in self.nodes:
            extra = f" [{n.role}]" if n.role else ""
            extra += " alias" if n.alias else ""
            extra += f" ({n.reason})" if n.reason else ""
            lines.append(f"%{n.id} = {n.kind} {n.op}({', '.join(f'%{i}' for i in n.inputs)}) : {n.info}{extra}")
        lines.append(f"return {self.outputs}")
        return "\n".join(lines)


@dataclass(frozen=True)
class OutputRef:
    """A graph output that is the value of a node."""

    node: int

    def __repr__(self) -> str:
        return f"%{self.node}"


def flatten_outputs(outputs: Any) -> list[OutputRef]:
    if isinstance(outputs, OutputRef):
        return [outputs]
    if isinstance(outputs, (list, tuple)):
        return [r for o in outputs for r in flatten_outputs(o)]
    if isinstance(outputs, dict):
        return [r for o in outputs.values() for r in flatten_outputs(o)]
    return []


def map_outputs(outputs: Any, fn: Callable[[OutputRef], Any]) -> Any:
    if isinstance(outputs, OutputRef):
        return fn(outputs)
    if isinstance(outputs, tuple):
        return tuple(map_outputs(o, fn) for o in outputs)
    if isinstance(outputs, list):
        return [map_outputs(o, fn) for o in outputs]
    if isinstance(outputs, dict):
        return {k: map_outputs(v, fn) for k, v in outputs.items()}
    return outputs

