"""Running a compiled graph: kernels in order over buffers planned once.

A `Plan` is the list of steps of one call: tuned kernels (C functions on the CPU, Triton
launches on the GPU), kernels evaluated by torch (a graph the target has no kernel
pattern for), ATen calls for ops outside coverage, reshapes that reuse a buffer, and
dtype conversions where torch's values (int64, bool) meet kernels' storage (int32).
Every intermediate value written by a kernel gets a buffer allocated once, reused by
values whose lifetimes do not overlap (same dtype and size); graph outputs are fresh
tensors at every call, so a caller may keep them.

Example (`compile` builds plans; a plan runs like the graph it came from):
    >>> import torch
    >>> from tensortune.graph.ir import Graph, Node, OutputRef, ValueInfo
    >>> g = Graph()
    >>> x = g.add(Node(0, "input", "x", (), ValueInfo((3,), "float32")))
    >>> y = g.add(Node(0, "torch", "neg", (x,), ValueInfo((3,), "float32"), call=torch.neg))
    >>> g.outputs = (OutputRef(y),)
    >>> Plan.of(g, [], "cpu")(torch.ones(3))
    (tensor([-1., -1., -1.]),)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .interpret import as_logical, as_stored, torch_dtype
from .ir import Graph, map_outputs, te_dtype


@dataclass
class KernelStep:
    """A kernel: `run(inputs, out)` on tensors in its storage types."""

    name: str
    root: int
    reads: tuple[int, ...]
    run: Callable[[Sequence[Any], Any], None]
    task: str = ""
    kind: str = "kernel"  # kernel | reference


@dataclass
class Plan:
    """The steps of one call and the buffers they use (see the module docstring)."""

    graph: Graph
    steps: list[Any]
    device: str
    buffers: dict[int, Any] = field(default_factory=dict)  # node id -> planned tensor
    aliases: dict[int, int] = field(default_factory=dict)  # alias node -> node it reshapes

    @staticmethod
    def of(graph: Graph, kernels: Sequence[KernelStep], device: str, aliases: set[int] | None = None) -> "Plan":
        """A plan running `kernels` (in dependence order) and the graph's torch nodes."""
        by_root = {k.root: k for k in kernels}
        steps: list[Any] = []
        alias_of = {a: graph.nodes[a].inputs[0] for a in (aliases or set())}
        for n in graph:
            if n.id in by_root:
                steps.append(by_root[n.id])
            elif n.id in alias_of:
                steps.append(("alias", n.id))
            elif n.kind == "torch":
                steps.append(("torch", n.id))
        plan = Plan(graph, steps, device, aliases=alias_of)
        plan._plan_buffers()
        return plan

    # -- memory ------------------------------------------------------------------------------------
    def _base(self, i: int) -> int:
        while i in self.aliases:
            i = self.aliases[i]
        return i

    def _plan_buffers(self) -> None:
        import torch

        graph = self.graph
        outputs = {self._base(i) for i in graph.output_ids()}
        last_use: dict[int, int] = {}
        for pos, s in enumerate(self.steps):
            reads = s.reads if isinstance(s, KernelStep) else graph.nodes[s[1]].inputs
            for r in reads:
                last_use[self._base(r)] = pos
        free: dict[tuple[str, tuple[int, ...]], list[Any]] = {}
        pending: list[tuple[int, tuple[str, tuple[int, ...]], Any]] = []
        for pos, s in enumerate(self.steps):
            if not isinstance(s, KernelStep):
                continue
            for end, key, buf in list(pending):
                if end < pos:
                    free.setdefault(key, []).append(buf)
                    pending.remove((end, key, buf))
            root = s.root
            if root in outputs:  # allocated at every call, so a caller may keep it
                continue
            info = graph.nodes[root].info
            assert info is not None
            key = (te_dtype(info.dtype), _shape(info.shape))
            buf = free[key].pop() if free.get(key) else torch.empty(key[1], dtype=torch_dtype(key[0]),
                                                                    device=self.device)
            self.buffers[root] = buf
            pending.append((last_use.get(root, pos), key, buf))

    @property
    def planned_bytes(self) -> int:
        seen = {id(b): b.numel() * b.element_size() for b in self.buffers.values()}
        return sum(seen.values())

    # -- running -----------------------------------------------------------------------------------
    def __call__(self, *args: Any) -> Any:
        return self.run(args)

    def run(self, args: Sequence[Any], record: dict[int, Any] | None = None,
            override: dict[int, Any] | None = None, around: Callable[[int], Any] | None = None) -> Any:
        """The graph's outputs; `record` collects every value; `override` feeds given
        values (in torch form) to the steps instead of computed ones; `around(k)` is a
        context manager each step k runs in (for timing)."""
        graph = self.graph
        vals: dict[int, Any] = graph.bind(args)
        for n in graph:
            if n.kind == "constant":
                vals[n.id] = n.value
        stored: set[int] = set()

        def torch_form(i: int) -> Any:
            if override is not None and i in override:
                return override[i]
            v = vals[i]
            info = graph.nodes[i].info
            return as_logical(v, info.dtype) if i in stored and info is not None else v

        def kernel_form(i: int) -> Any:
            if override is not None and i in override:
                v, was_stored = override[i], False
            else:
                v, was_stored = vals[i], i in stored
            info = graph.nodes[i].info
            assert info is not None
            if not was_stored:
                v = as_stored(v, info.dtype)
                if not v.is_contiguous():
                    v = v.contiguous()
            return v.reshape(_shape(info.shape)) if v.dim() == 0 else v

        for pos, s in enumerate(self.steps):
            with around(pos) if around is not None else contextlib.nullcontext():
                self._step(s, vals, stored, kernel_form, torch_form)
        if record is not None:
            for i in vals:
                record[i] = torch_form(i)
        return map_outputs(graph.outputs, lambda r: torch_form(r.node))

    def _step(self, s: Any, vals: dict[int, Any], stored: set[int], kernel_form: Any, torch_form: Any) -> None:
        import torch

        graph = self.graph
        if isinstance(s, KernelStep):
            info = graph.nodes[s.root].info
            assert info is not None
            out = self.buffers.get(s.root)
            if out is None:
                out = torch.empty(_shape(info.shape), dtype=torch_dtype(te_dtype(info.dtype)), device=self.device)
            s.run([kernel_form(r) for r in s.reads], out)
            vals[s.root] = out.reshape(info.shape) if not info.shape else out
            stored.add(s.root)
        elif s[0] == "alias":
            a, src = s[1], self.aliases[s[1]]
            info = graph.nodes[a].info
            assert info is not None
            vals[a] = vals[src].reshape(info.shape if info.shape else ())
            if src in stored:
                stored.add(a)
        else:
            n = graph.nodes[s[1]]
            vals[n.id] = n.call(*[torch_form(i) for i in n.inputs])


def _shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(shape) if shape else (1,)
