"""Replaying a compiled graph's launches as one CUDA graph.

A model's kernels are many short launches; replaying them as a CUDA graph removes the
host's time between them. The first call runs the plan as is and notes where each input
lives; the second call compares: inputs that moved (activations) get buffers of their
own that each later call copies into, inputs that stayed (weights) are read in place.
Then the plan is captured once and replayed. A call whose weights moved, or whose
shapes or dtypes changed, runs the plan without the graph; a plan that cannot be
captured (a fallback op that synchronizes) runs without graphs from then on. Outputs are
copied out of the graph's memory, so the caller may keep them.

Example (on a GPU):
    >>> runner = CudaGraphRunner(plan)           # doctest: +SKIP
    >>> outputs = runner(args)                   # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _tensors(args: Sequence[Any]) -> list[tuple[int, Any]]:
    import torch
    return [(k, a) for k, a in enumerate(args) if isinstance(a, torch.Tensor)]


def _signature(args: Sequence[Any]) -> tuple[Any, ...]:
    return tuple((k, tuple(a.shape), a.dtype, a.stride()) for k, a in _tensors(args))


class CudaGraphRunner:
    """Runs a `Plan` through a CUDA graph when the inputs allow (see the module docstring)."""

    def __init__(self, plan: Any) -> None:
        self.plan = plan
        self.calls = 0
        self.disabled = ""
        self._first: dict[int, int] = {}
        self._signature: tuple[Any, ...] | None = None
        self._graph: Any = None
        self._static: dict[int, Any] = {}  # input position -> our buffer
        self._fixed: dict[int, int] = {}  # input position -> the address captured
        self._args: list[Any] = []
        self._outputs: Any = None

    def __call__(self, args: Sequence[Any]) -> Any:
        self.calls += 1
        if self.disabled:
            return self.plan.run(args)
        if self.calls == 1:
            self._first = {k: a.data_ptr() for k, a in _tensors(args)}
            self._signature = _signature(args)
            return self.plan.run(args)
        if self._graph is None:
            try:
                self._capture(args)
            except Exception as exc:  # noqa: BLE001 - a plan torch cannot capture runs as it is
                self.disabled = f"{type(exc).__name__}: {exc}"
                self._graph = None
                return self.plan.run(args)
        if _signature(args) != self._signature or any(
                args[k].data_ptr() != ptr for k, ptr in self._fixed.items()):
            return self.plan.run(args)
        for k, buf in self._static.items():
            buf.copy_(args[k])
        self._graph.replay()
        return _clone(self._outputs)

    def _capture(self, args: Sequence[Any]) -> None:
        import torch

        if _signature(args) != self._signature:
            raise RuntimeError("the inputs changed shape between the first two calls")
        self._args = list(args)
        for k, a in _tensors(args):
            if a.data_ptr() != self._first.get(k):
                self._static[k] = a.clone()
                self._args[k] = self._static[k]
            else:
                self._fixed[k] = a.data_ptr()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            self.plan.run(self._args)  # warm-up: every kernel compiled and loaded before capture
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._outputs = self.plan.run(self._args)
        self._graph = graph


def _clone(outputs: Any) -> Any:
    import torch
    if isinstance(outputs, torch.Tensor):
        return outputs.clone()
    if isinstance(outputs, (list, tuple)):
        return type(outputs)(_clone(o) for o in outputs)
    return outputs
