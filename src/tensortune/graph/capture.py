"""Capture: a PyTorch model and example inputs in, FX graphs of core ATen ops out.

Dynamo (torch.compile's frontend) turns the model's Python into graphs, specialising
control flow on the example inputs; each graph is then traced with fake tensors
(nothing is computed), functionalized (in-place ops become functional) and decomposed
with torch's core ATen table: the op set torch.compile's backends see. Parameters and
buffers are graph inputs, so a compiled model reads its module's current weights.

Example:
    >>> import torch
    >>> [cap] = capture(torch.nn.Linear(8, 4), [torch.randn(2, 8)])
    >>> sorted({str(n.target) for n in cap.gm.graph.nodes if n.op == "call_function"})
    ['aten.addmm.default', 'aten.permute.default']
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


class CaptureError(RuntimeError):
    """The model could not be captured as static graphs; the message says why."""


@dataclass
class Captured:
    """An ATen graph, the real example inputs it was traced with, and their device."""

    gm: Any  # torch.fx.GraphModule
    example_inputs: list[Any]
    device_type: str
    input_names: list[str] | None = None  # dynamo's names of the inputs (parameters say so)

    def is_weight(self, k: int) -> bool:
        """Whether input `k` is a parameter or buffer of the model (not an activation)."""
        import torch
        x = self.example_inputs[k]
        name = self.input_names[k] if self.input_names and k < len(self.input_names) else ""
        return isinstance(x, torch.nn.Parameter) or "_parameters_" in name or "_buffers_" in name


def decompositions() -> dict[Any, Any]:
    """torch's core ATen decompositions (what Inductor and export use), except that
    attention is kept whole as `tensortune::sdpa` (see `lowering.attention`)."""
    import torch
    from torch._decomp import core_aten_decompositions

    from .lowering.attention import keep_sdpa
    table = dict(core_aten_decompositions())
    table[torch.ops.aten.scaled_dot_product_attention.default] = keep_sdpa
    return table


def device_of(inputs: Sequence[Any]) -> str:
    import torch
    types = {x.device.type for x in inputs if isinstance(x, torch.Tensor)}
    if len(types) > 1:
        raise CaptureError(f"inputs are on several devices ({', '.join(sorted(types))}); put them on one")
    return types.pop() if types else "cpu"


def check_static(inputs: Sequence[Any]) -> None:
    import torch
    for k, x in enumerate(inputs):
        if isinstance(x, torch.SymInt) or (isinstance(x, torch.Tensor) and
                                           any(isinstance(s, torch.SymInt) for s in x.shape)):
            raise CaptureError(f"input {k} has a symbolic shape; capture a graph with concrete inputs "
                               "(tensortune compiles one graph per shape)")


def capture_graph(gm: Callable[..., Any], example_inputs: Sequence[Any]) -> Captured:
    """Trace one graph (dynamo's, or any function of tensors) to functional core ATen ops."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    import torch.fx as fx

    inputs = list(example_inputs)
    check_static(inputs)
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"] if isinstance(gm, fx.GraphModule) else None
    gm = keep_attention(gm)
    try:
        # outside dynamo's tracing context: its fake mode and shape guards are not ours
        with torch._guards.tracing(None), torch.no_grad():
            traced = make_fx(torch.func.functionalize(gm, remove="mutations"), decomposition_table=decompositions(),
                             tracing_mode="fake", _allow_non_fake_inputs=True)(*inputs)
    except Exception as exc:  # noqa: BLE001 - a graph torch cannot trace
        raise CaptureError(f"could not trace the graph: {type(exc).__name__}: {exc}") from exc
    return Captured(traced, inputs, device_of(inputs), names)


def keep_attention(gm: Any) -> Any:
    """Dynamo's graph with `scaled_dot_product_attention` calls kept whole (see `decompositions`):
    tracing would otherwise decompose them before any decomposition table is consulted."""
    import torch
    import torch.fx as fx

    from .lowering.attention import keep_sdpa
    if not isinstance(gm, fx.GraphModule):
        return gm
    targets = {torch.nn.functional.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention}
    changed = False
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in targets:
            node.target = keep_sdpa
            changed = True
    if changed:
        gm.recompile()
    return gm


def capture(model: Callable[..., Any], example_inputs: Sequence[Any]) -> list[Captured]:
    """Every graph dynamo makes of `model(*example_inputs)` (one, unless the model breaks
    the graph), each traced by `capture_graph`. The model runs once, eagerly."""
    import torch

    graphs: list[Captured] = []

    def collect(gm: Any, inputs: Sequence[Any]) -> Callable[..., Any]:
        graphs.append(capture_graph(gm, inputs))
        return gm.forward

    torch._dynamo.reset()
    try:
        with torch.no_grad():
            torch.compile(model, backend=collect, dynamic=False)(*example_inputs)
    finally:
        torch._dynamo.reset()
    if not graphs:
        raise CaptureError("dynamo made no graph of the model (it ran no tensor operations)")
    return graphs
