"""Evaluating a lowered graph node by node with torch, without compiling anything.

Each te stage is evaluated by the float32 torch reference of the GPU backend (the same
one candidates are checked against), each torch node by its call. This is how lowering
rules are tested against eager execution, and how a kernel is recomputed from eager
values when a compiled model's check fails.

Example:
    >>> import torch
    >>> from tensortune.graph.capture import capture
    >>> from tensortune.graph.lower import lower
    >>> x = torch.randn(4, 8)
    >>> [cap] = capture(lambda x: torch.softmax(x, -1), [x])
    >>> [out] = run_graph(lower(cap.gm, cap.example_inputs), [x])
    >>> bool(torch.allclose(out, torch.softmax(x, -1), atol=1e-6))
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import te
from .ir import Graph, Node, map_outputs, te_dtype
from .lowering.context import te_shape


def torch_dtype(name: str) -> Any:
    import torch
    return getattr(torch, name)


def as_logical(value: Any, dtype: str) -> Any:
    """A stored value (int32 for integers and booleans) as the torch dtype of its value."""
    import torch
    if dtype == "bool":
        return value != 0 if value.dtype != torch.bool else value
    return value.to(torch_dtype(dtype)) if value.dtype != torch_dtype(dtype) else value


def as_stored(value: Any, dtype: str) -> Any:
    """A torch value as te kernels store it (int32 for integers and booleans)."""
    import torch
    want = te_dtype(dtype)
    if want == "int32" and value.dtype != torch.int32:
        return value.to(torch.int32)
    return value


def evaluate_node(node: Node, inputs: Sequence[Any], input_dtypes: Sequence[str]) -> Any:
    """The value of one te node (as its logical torch dtype) from its inputs' values."""
    from ..backends.triton.reference import evaluate
    holders = [te.placeholder(te_shape(tuple(x.shape)), te_dtype(d), f"in{k}")
               for k, (x, d) in enumerate(zip(inputs, input_dtypes))]
    out = node.build("out", *holders)
    values = {f"in{k}": as_stored(x, d).reshape(te_shape(tuple(x.shape)))
              for k, (x, d) in enumerate(zip(inputs, input_dtypes))}
    result = evaluate(out, values) if holders else _evaluate_constant(out, evaluate)
    assert node.info is not None
    return as_logical(result, node.info.dtype).reshape(node.info.shape)


def _evaluate_constant(out: Any, evaluate: Any) -> Any:
    return evaluate(out, {})


def run_graph(graph: Graph, inputs: Sequence[Any], record: dict[int, Any] | None = None) -> Any:
    """The graph's outputs for `inputs` (in graph input order); `record` collects every node's value."""
    values: dict[int, Any] = graph.bind(inputs)
    dtypes = {n.id: n.info.dtype if n.info else "" for n in graph}
    for n in graph:
        if n.kind == "input":
            continue
        if n.kind == "constant":
            values[n.id] = n.value
        elif n.kind == "torch":
            values[n.id] = n.call(*[values[i] for i in n.inputs])
        else:
            values[n.id] = evaluate_node(n, [values[i] for i in n.inputs], [dtypes[i] for i in n.inputs])
    if record is not None:
        record.update(values)
    return map_outputs(graph.outputs, lambda r: values[r.node])

