"""`torch.compile(model, backend="tensortune")` and `tensortune.compile(model, example_inputs)`.

The backend receives each graph dynamo captures, compiles it (`compile_graph`: lower,
cut into kernels, tune them under one budget, check against eager) and returns the
compiled graph; options come through `torch.compile(..., options={...})` (see
`CompileOptions`). `tensortune.compile` does the same ahead of time: it captures and
compiles on the example inputs and returns a callable module, with a `report` of what it
did; the graphs of a model that dynamo cut in several are tuned together, under one
budget (`JointBackend`). Compiling the same model again builds every kernel from the records database.

Inference only: a graph traced with gradients enabled for inputs that require them runs
eagerly, with a warning (training would need the backward graph lowered and tuned too:
aot_autograd's joint graph, kernels for the gradient ops, and saved activations planned
across the two passes).

Example:
    >>> import torch, tensortune
    >>> model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU()).eval()
    >>> fast = tensortune.compile(model, [torch.randn(4, 16)], budget=2)  # doctest: +SKIP
    >>> fast(torch.randn(4, 16)).shape                                     # doctest: +SKIP
    torch.Size([4, 32])
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

from dataclasses import replace

from .capture import Captured, capture_graph
from .compiler import CompiledGraph, CompileOptions, _open_db, compile_graph, tune_graphs
from .report import CompileReport


def _grad_needed(example_inputs: Sequence[Any]) -> bool:
    import torch
    return torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs)


def make_backend(options: CompileOptions, graphs: list[CompiledGraph] | None = None) -> Callable[..., Any]:
    """A dynamo backend compiling every graph with `options` (each appended to `graphs`)."""
    def backend(gm: Any, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        if _grad_needed(example_inputs):
            warnings.warn("tensortune compiles inference graphs: this graph was captured with gradients enabled "
                          "and runs eagerly; call the model under torch.no_grad() or torch.inference_mode()",
                          stacklevel=2)
            return gm.forward
        if _symbolic(example_inputs):
            return PerShape(gm, options, graphs)
        compiled = compile_graph(capture_graph(gm, example_inputs), options)
        if graphs is not None:
            graphs.append(compiled)
        return compiled
    return backend


class JointBackend:
    """The backend of `tensortune.compile`: graphs captured during the model's first call
    run eagerly until `finish()` tunes all of them under one budget and compiles each;
    graphs dynamo makes after that are compiled at once."""

    def __init__(self, options: CompileOptions, graphs: list[CompiledGraph]) -> None:
        self.options, self.graphs = options, graphs
        self.pending: list[Deferred] = []
        self.tuning_seconds = 0.0
        self._now = make_backend(options, graphs)
        self._finished = False

    def __call__(self, gm: Any, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        if self._finished or _grad_needed(example_inputs) or _symbolic(example_inputs):
            return self._now(gm, example_inputs)
        deferred = Deferred(gm, capture_graph(gm, example_inputs))
        self.pending.append(deferred)
        return deferred

    def finish(self) -> None:
        self._finished = True
        tuned = None
        if len(self.pending) > 1:
            outcome = tune_graphs([d.captured for d in self.pending], self.options)
            tuned, self.tuning_seconds = outcome, outcome.seconds
        for d in self.pending:
            d.compiled = compile_graph(d.captured, self.options, tuned)
            self.graphs.append(d.compiled)
        self.pending.clear()


class Deferred:
    """A captured graph run by torch until its compiled graph exists."""

    def __init__(self, gm: Any, captured: Captured) -> None:
        self.gm, self.captured = gm, captured
        self.compiled: CompiledGraph | None = None

    def __call__(self, *args: Any) -> Any:
        return self.gm(*args) if self.compiled is None else self.compiled(*args)


def _symbolic(inputs: Sequence[Any]) -> bool:
    import torch
    return any(isinstance(x, torch.SymInt) or (isinstance(x, torch.Tensor) and
                                                any(isinstance(s, torch.SymInt) for s in x.shape)) for x in inputs)


class PerShape:
    """A graph dynamo made shape-generic (it saw several shapes): compiled again for each
    concrete shape it is called with, each compile from the records when they exist."""

    def __init__(self, gm: Any, options: CompileOptions, graphs: list[CompiledGraph] | None) -> None:
        self.gm, self.options, self.graphs = gm, options, graphs
        self.compiled: dict[tuple[Any, ...], CompiledGraph] = {}

    def __call__(self, *args: Any) -> Any:
        import torch
        key = tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else a for a in args)
        graph = self.compiled.get(key)
        if graph is None:
            graph = self.compiled[key] = compile_graph(capture_graph(self.gm, list(args)), self.options)
            if self.graphs is not None:
                self.graphs.append(graph)
        return graph(*args)


def tensortune_backend(gm: Any, example_inputs: Sequence[Any], options: dict[str, Any] | None = None) -> Any:
    """The backend torch.compile finds as "tensortune" (options: `CompileOptions` fields)."""
    return make_backend(CompileOptions.of(options))(gm, example_inputs)


class CompiledModel:
    """A model compiled by tensortune: call it like the model (under no_grad)."""

    def __init__(self, model: Any, compiled: Any, graphs: list[CompiledGraph], joint_tuning_seconds: float = 0.0
                 ) -> None:
        self.model = model
        self._compiled = compiled
        self.graphs = graphs
        self.joint_tuning_seconds = joint_tuning_seconds

    @property
    def tuning_seconds(self) -> float:
        """Seconds spent tuning: the graphs' joint tuning and any graph's own."""
        return self.joint_tuning_seconds + sum(r.tuning_seconds for r in self.reports)

    @property
    def reports(self) -> list[CompileReport]:
        return [g.report for g in self.graphs]

    @property
    def workloads(self) -> list[Any]:
        """The records database's workloads of every tuned kernel (to export them)."""
        return [w for g in self.graphs for w in g.workloads]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import torch
        with torch.no_grad():
            return self._compiled(self.model, args, kwargs)

    @property
    def report(self) -> CompileReport:
        """The report of the model's graph (of the first one, when dynamo made several)."""
        if not self.reports:
            raise RuntimeError("nothing was compiled yet")
        return self.reports[0]

    def __repr__(self) -> str:
        return f"CompiledModel({type(self.model).__name__}, {len(self.reports)} graph(s))"


def compile(model: Any, example_inputs: Sequence[Any], *, target: str | None = None,  # noqa: A001
            budget: int | float | None = None, db: Any = None, example_kwargs: dict[str, Any] | None = None,
            **options: Any) -> CompiledModel:
    """Compile `model` for `example_inputs`' shapes now (see the module docstring).

    `target`: "cpu" or "cuda" (default: where the inputs are); `budget`: trials for the
    whole model (default 32 per kernel to tune), or seconds as a float; `db`: the records
    database; other options are `CompileOptions` fields (`retune`, `check`, `progress`,
    `cuda_graphs`, `seed`, `jobs`, and `executor="ray"` with `ray_address` to build and
    measure the model's kernels on a Ray cluster, for the CPU or the GPU).
    """
    import torch
    if not callable(model):
        raise TypeError(f"model must be a torch.nn.Module or a function, not {type(model).__name__}")
    if isinstance(example_inputs, (str, bytes, torch.Tensor)) or not isinstance(example_inputs, Sequence):
        raise TypeError("example_inputs must be a tuple or list of the model's positional arguments, "
                        f"not {type(example_inputs).__name__} (one tensor x: pass (x,))")
    opts = CompileOptions.of(dict(options, target=target, budget=budget, db=db))
    opts = replace(opts, db=_open_db(opts.db))  # one database for the joint tuning and every graph
    graphs: list[CompiledGraph] = []
    backend = JointBackend(opts, graphs)
    compiled = torch.compile(_entry(), backend=backend, dynamic=False)
    with torch.no_grad():
        compiled(model, tuple(example_inputs), dict(example_kwargs or {}))
    backend.finish()
    if not graphs:
        raise RuntimeError("dynamo made no graph of the model for these inputs (it runs no tensor operations, "
                           "or dynamo hit its recompile limit: torch._dynamo.reset() clears it)")
    return CompiledModel(model, compiled, graphs, backend.tuning_seconds)


_ENTRIES = 0


def _entry() -> Callable[..., Any]:
    """A function of its own for each compile: dynamo caches compiled graphs per code
    object, and a model class's `forward` is shared by all its instances and options."""
    global _ENTRIES
    _ENTRIES += 1
    namespace: dict[str, Any] = {}
    import builtins
    exec(builtins.compile("def entry(model, args, kwargs):\n    return model(*args, **kwargs)\n",  # noqa: S102
                 f"<tensortune.compile #{_ENTRIES}>", "exec"), namespace)
    return namespace["entry"]
