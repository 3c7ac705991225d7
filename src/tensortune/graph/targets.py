"""Where a compiled graph runs: what one kernel may hold, how a kernel is tuned and called.

`CpuTarget` tunes each kernel with the CPU auto-scheduler (C with OpenMP) and calls the
compiled function on the tensors' memory; `CudaTarget` tunes Triton kernels on the GPU
(one worker and one compile pool shared by all of a model's kernels) and launches them.
Both accept as one kernel what the GPU patterns describe: a contraction with its
prologue and epilogue, reductions over the same rows, elementwise work, or attention
(scores, mask, softmax and weighted sum) as one fused kernel: a Triton flash-attention
kernel on the GPU, a C kernel with an online softmax over key blocks on the CPU
(`backends.c_attention`, tuned by `autoschedule.attention`). Other multi-contraction
kernels only on the GPU.

Example:
    >>> cpu = CpuTarget()
    >>> cpu.name, cpu.device
    ('cpu', 'cpu')
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from ..te.ranges import DEFAULT_RANGE, input_ranges, positive_inputs
from .ir import Graph
from .kernel import KernelGraph, build_kernel, gpu_kind, stage_nodes
from .native import function_address
from .runtime import KernelStep, NativeCall

KINDS = ("contraction", "grouped_conv", "rows", "elementwise")


def kernel_kind(graph: Graph, nodes: frozenset[int], cache: dict[str, str | None] | None = None) -> str | None:
    """The GPU pattern these stages make as one kernel, or None. A matrix product is only
    taken as a contraction (or inside attention): as row reductions it would run one
    dot product per output element. `cache` keeps answers by kernel text (every layer
    of a model asks the same questions)."""
    kernel = build_kernel(graph, stage_nodes(graph, nodes))
    if cache is not None and kernel.text in cache:
        return cache[kernel.text]
    kind = gpu_kind(kernel.output)
    if kind in ("rows", "elementwise") and any(graph.nodes[n].role == "contraction" for n in nodes):
        kind = None
    if cache is not None:
        cache[kernel.text] = kind
    return kind


def _kernel_dtypes(graph: Graph, nodes: frozenset[int]) -> set[str]:
    out = set()
    for n in nodes:
        node = graph.nodes[n]
        out.add(node.info.dtype if node.info else "")
        out.update(graph.nodes[i].info.dtype for i in node.inputs if graph.nodes[i].info is not None)
    return out


@dataclass
class CpuTarget:
    """C kernels for this machine's CPU, tuned by the auto-scheduler."""

    jobs: int = 2
    timer: Any = None
    name: str = "cpu"
    device: str = "cpu"
    multi_anchor: bool = True  # attention (two contractions and a softmax) as one kernel, as below
    executor: Any = None  # "local" (default), "ray" or an Executor: where kernels are built and measured
    ray_address: str | None = None
    fused_attention: bool = True  # False: attention as three kernels (scores, softmax, weighted sum)
    _kinds: dict[str, str | None] = field(default_factory=dict, repr=False)
    _runs_on: Any = field(default=None, repr=False)

    def legal(self, graph: Graph, nodes: frozenset[int]) -> bool:
        from ..te.dtype import FLOAT_TYPES
        dtypes = _kernel_dtypes(graph, nodes)
        if "bfloat16" in dtypes and "bfloat16" not in FLOAT_TYPES:
            return False
        kind = kernel_kind(graph, nodes, self._kinds)
        if kind == "attention":
            return self.fused_attention and cpu_attention(graph, nodes, self._kinds)
        return kind in KINDS

    def search(self, kernel: KernelGraph, *, db: Any, seed: int,
               budget_hint: int | None) -> "CpuSearch | CpuAttentionSearch":
        if gpu_kind(kernel.output) == "attention":
            return CpuAttentionSearch(kernel, db, seed, self.jobs, self.timer, budget_hint)
        if self._runs_on is None:  # one executor (on Ray, one set of actors) for all the kernels
            from ..measure import make_executor
            self._runs_on = make_executor(self.executor, self.ray_address)
        return CpuSearch(kernel, db, seed, self.jobs, self.timer, budget_hint, self._runs_on)

    def rounds_at_once(self, trials_per_round: int, tasks: int) -> int:
        """Tasks whose rounds run at once: one here; on a cluster, enough to keep it busy."""
        from ..db import Target
        return _rounds_at_once(self._runs_on, Target.cpu(), trials_per_round, tasks)

    def close(self) -> None:
        if self._runs_on is not None and (self.executor is None or isinstance(self.executor, str)):
            self._runs_on.close()
        self._runs_on = None


class CpuSearch:
    """One kernel's search with the CPU auto-scheduler, resumable round by round."""

    def __init__(self, kernel: KernelGraph, db: Any, seed: int, jobs: int, timer: Any,
                 budget_hint: int | None, executor: Any = None) -> None:
        from ..db import Target

        self.kernel = kernel
        self.problem = self.make_problem(kernel)
        self.db, self.target = db, Target.cpu()
        self.seed, self.jobs, self.timer, self.budget_hint = seed, jobs, timer, budget_hint
        self.executor = executor
        self._session: Any = None

    def make_problem(self, kernel: KernelGraph) -> Any:
        from ..autoschedule.api import Problem
        return Problem.of([kernel.output], args=list(kernel.placeholders) + [kernel.output],
                          name=f"kernel-{kernel.key}")

    @property
    def flops(self) -> float:
        return self.problem.flops

    @property
    def workload(self) -> Any:
        return self.problem.workload

    def recorded(self) -> Any:
        from ..autoschedule.api import rebuild_recorded
        return rebuild_recorded(self.problem, self.db, self.target, 0, 0.0, True)

    def tune(self, trials: int) -> list[Any]:
        if self._session is None:
            from ..autoschedule.api import _Session
            self._session = _Session(self.problem, self.db, self.target, "evolutionary", self.seed, self.jobs,
                                     False, self.timer, self.budget_hint, executor=self.executor)
        return self._session.tune(trials)

    def finish(self) -> Any:
        if self._session is None:
            return self.recorded()
        return self._session.finish(4, 5)

    def step(self, built: Any, root: int, reads: tuple[int, ...], name: str) -> KernelStep:
        return native_step(built.kernel._fn, built.kernel.args, root, reads, name)

    def close(self) -> None:
        if self._session is not None:
            self._session.runner.close()


def native_step(fn: Any, args: Any, root: int, reads: tuple[int, ...], name: str) -> KernelStep:
    """A step calling the C function `fn` whose arguments are the tensors `args` (the
    kernel's placeholders in0, in1, ... and its output `out`) on the plan's buffers."""
    order = [-1 if a.name == "out" else int(a.name[2:]) for a in args]

    def run(inputs: list[Any], out: Any) -> None:
        if fn(*[(out if k < 0 else inputs[k]).data_ptr() for k in order]) != 0:
            raise MemoryError(f"kernel {name} could not allocate its temporaries")
    run.native = NativeCall(function_address(fn), tuple(order))  # type: ignore[attr-defined]
    return KernelStep(name, root, reads, run, native=run.native)  # type: ignore[attr-defined]


def cpu_attention(graph: Graph, nodes: frozenset[int], cache: dict[str, str | None] | None = None) -> bool:
    """Whether these stages are an attention the fused C kernel takes (its tensor types)."""
    from ..autoschedule.attention import attention_plan
    kernel = build_kernel(graph, stage_nodes(graph, nodes))
    key = "c-attention\n" + kernel.text
    if cache is not None and key in cache:
        return cache[key] is not None
    ok = attention_plan(kernel.output) is not None
    if cache is not None:
        cache[key] = "attention" if ok else None
    return ok


class CpuAttentionSearch(CpuSearch):
    """One fused attention kernel's search (`autoschedule.attention`), round by round."""

    def __init__(self, kernel: KernelGraph, db: Any, seed: int, jobs: int, timer: Any,
                 budget_hint: int | None) -> None:
        super().__init__(kernel, db, seed, jobs, timer, budget_hint)

    def make_problem(self, kernel: KernelGraph) -> Any:
        from ..autoschedule.attention import AttentionProblem
        return AttentionProblem.of(kernel.output, args=list(kernel.placeholders) + [kernel.output],
                                   name=f"kernel-{kernel.key}")

    def recorded(self) -> Any:
        from ..autoschedule.attention import rebuild_attention
        return rebuild_attention(self.problem, self.db, self.target)

    def tune(self, trials: int) -> list[Any]:
        if self._session is None:
            from ..autoschedule.attention import AttentionSession
            self._session = AttentionSession(self.problem, self.db, self.target, self.seed, self.jobs,
                                             timer=self.timer, expected_trials=self.budget_hint)
        return self._session.tune(trials)

    def step(self, built: Any, root: int, reads: tuple[int, ...], name: str) -> KernelStep:
        return native_step(built._fn, self.problem.args, root, reads, name)

    def close(self) -> None:
        if self._session is not None:
            self._session.close()


@dataclass
class CudaTarget:
    """Triton kernels for the visible NVIDIA GPU (or Triton's interpreter under TRITON_INTERPRET=1)."""

    jobs: int | None = None
    timer: Any = None
    name: str = "cuda"
    device: str = "cuda"
    multi_anchor: bool = True
    cache_dir: str | None = None
    executor: Any = None  # "local" (default), "ray" or an Executor: where kernels are built and measured
    ray_address: str | None = None
    _kinds: dict[str, str | None] = field(default_factory=dict, repr=False)
    _runner: Any = field(default=None, repr=False)
    _compiler: Any = field(default=None, repr=False)
    _runs_on: Any = field(default=None, repr=False)
    _starting: Any = field(default=None, repr=False)
    _lock: Any = field(default_factory=threading.Lock, repr=False)  # rounds of several tasks run at once

    def __post_init__(self) -> None:
        from ..backends.triton.kernel import interpreting
        if interpreting():
            self.device = "cpu"

    def legal(self, graph: Graph, nodes: frozenset[int]) -> bool:
        kind = kernel_kind(graph, nodes, self._kinds)
        return kind is not None and (kind in KINDS or self.multi_anchor)

    def search(self, kernel: KernelGraph, *, db: Any, seed: int, budget_hint: int | None) -> "CudaTaskSearch":
        return CudaTaskSearch(self, kernel, db, seed, budget_hint)

    def rounds_at_once(self, trials_per_round: int, tasks: int) -> int:
        """Tasks whose rounds run at once: one here; on a cluster, enough to keep it busy."""
        from ..backends.triton.kernel import interpreting
        from ..backends.triton.tune import cuda_target
        return _rounds_at_once(self._runs_on, cuda_target(interpreting()), trials_per_round, tasks)

    def remote(self) -> Any:
        """The executor of a cluster (one set of actors for all the kernels), or None: here."""
        if self.executor in (None, "local"):
            return None
        if self._runs_on is None:
            from ..measure import make_executor
            self._runs_on = make_executor(self.executor, self.ray_address)
        return self._runs_on

    def shared_runner(self, task: Any) -> Any:
        """The GPU worker every kernel's search on this machine shares (made on first use)."""
        from ..backends.triton.kernel import interpreting
        self._settle()
        if self._runner is None:
            from ..measure.gpu import GpuRunner
            interpret = interpreting()
            self._runner = GpuRunner(task, timeout=60.0, env={"TRITON_INTERPRET": "1"} if interpret else {},
                                     cutoff_factor=None if interpret else 4.0)
        return self._runner

    def start_shared_runner(self, task: Any) -> None:
        """Start the shared worker in the background (on a cluster, where it only confirms
        the winners at the end): its start, seconds of process and CUDA context, is then
        not paid after the last round. A failure is met again when the worker is used."""
        with self._lock:
            if self._runner is not None or self._starting is not None:
                return
            from ..measure.worker import start_in_background
            self._starting = start_in_background(self.shared_runner(task).warm_up, "start-confirm-worker")

    def _settle(self) -> None:
        if self._starting is not None:
            self._starting.join()
            self._starting = None

    def shared(self, task: Any) -> tuple[Any, Any]:
        """The GPU worker and compile pool every kernel's search shares (made on first use)."""
        from ..backends.triton.kernel import interpreting
        interpret = interpreting()
        env = {"TRITON_INTERPRET": "1"} if interpret else {}
        self.shared_runner(task)
        if self._compiler is None and not interpret:
            import functools

            from ..measure.triton_compile import ParallelCompiler, detect_target, warm_triton
            target = detect_target()
            self._compiler = ParallelCompiler(lambda c: None, jobs=self.jobs, env=env,
                                              warm=functools.partial(warm_triton, target), stream=True)
        return self._runner, self._compiler

    def close(self) -> None:
        self._settle()
        if self._runner is not None:
            self._runner.close()
            self._runner = None
        if self._compiler is not None:
            self._compiler.close()
            self._compiler = None
        if self._runs_on is not None and isinstance(self.executor, str):
            self._runs_on.close()
        self._runs_on = None


class CudaTaskSearch:
    """One kernel's GPU search (`backends.triton.CudaSearch`) on the target's shared worker."""

    def __init__(self, target: CudaTarget, kernel: KernelGraph, db: Any, seed: int, budget_hint: int | None) -> None:
        from ..backends.triton.tune import CudaSearch
        from ..measure.gpu import TensorArg

        self.target, self.kernel = target, kernel
        half = kernel.half
        ranges, positive = input_ranges(kernel.output), positive_inputs(kernel.output)
        self._search = CudaSearch(kernel.output, db=db, seed=seed, half=half, progress=False,
                                  budget_hint=budget_hint, timer=target.timer, cache_dir=target.cache_dir,
                                  executor=target.remote())
        plan = self._search.plan
        specs = []
        for t in plan.inputs:
            dtype = _storage(t.dtype, half)
            if t.dtype == "int32":
                low, high = ranges.get(t.name, DEFAULT_RANGE)
                specs.append(TensorArg(t.shape, dtype, init="randint", low=low, high=high))
            else:
                specs.append(TensorArg(t.shape, dtype, init="rand" if t.name in positive else "randn"))
        self._search.input_specs = specs

    @property
    def flops(self) -> float:
        plan = self._search.plan
        return float(getattr(plan, "flops", 0) or 0)

    @property
    def workload(self) -> Any:
        return self._search.workload

    def recorded(self) -> Any:
        return self._search.recorded()

    def tune(self, trials: int) -> list[Any]:
        # on a cluster each search keeps its own runner (a recipe for the actors; here it
        # only confirms the winner), so that several tasks' rounds can run at once
        if self._search._runner is None and self._search.executor is None:
            runner, compiler = self.target.shared(self._search.task)
            self._search._runner, self._search._shared_runner = runner, True
            self._search._compiler = compiler
        elif self._search.executor is not None:
            self.target.start_shared_runner(self._search.task)
        return self._search.tune(trials)

    def finish(self) -> Any:
        if self._search._tuner is None:
            return self.recorded()
        if self._search.executor is not None and not self._search._shared_runner:
            # tuned on a cluster: the winner is confirmed here in the worker all kernels share,
            # not in a worker of its own started for it (seconds each, one kernel after another)
            own = self._search._runner
            self._search._runner, self._search._shared_runner = self.target.shared_runner(self._search.task), True
            if own is not None:
                own.close()
        return self._search.finish(confirm=True)

    def step(self, built: Any, root: int, reads: tuple[int, ...], name: str) -> KernelStep:
        names = [t.name for t in built.plan.inputs]
        index = [int(n[2:]) for n in names]
        launch = built._module.launch

        def run(inputs: list[Any], out: Any) -> None:
            launch(*[inputs[k] for k in index], out)
        return KernelStep(name, root, reads, run)

    def close(self) -> None:
        if self._search.executor is not None:
            self._search.close()  # its own runner
        elif self._search._builder is not None:
            self._search._builder.close()


def _rounds_at_once(executor: Any, target: Any, trials_per_round: int, tasks: int) -> int:
    if executor is None or getattr(executor, "name", "local") == "local":
        return 1
    from ..tasks import concurrent_rounds
    return concurrent_rounds(executor.parallelism(None, target), trials_per_round, tasks)


def _storage(dtype: str, half: str) -> str:
    return half if dtype == "float16" else dtype


def reference_step(kernel: KernelGraph, name: str) -> KernelStep:
    """A kernel evaluated by the torch reference (a graph no kernel pattern takes)."""
    from ..backends.triton.reference import evaluate
    names = [t.name for t in kernel.placeholders]

    def run(inputs: list[Any], out: Any) -> None:
        value = evaluate(kernel.output, {n: x.reshape(t.shape) for n, x, t in zip(names, inputs, kernel.placeholders)})
        out.copy_(value.reshape(out.shape).to(out.dtype))
    return KernelStep(name, kernel.spec.root, kernel.spec.inputs, run, kind="reference")


def make_target(target: str, **options: Any) -> CpuTarget | CudaTarget:
    if target in ("cpu", "c", "llvm"):
        return CpuTarget(**options)
    if target in ("cuda", "gpu"):
        return CudaTarget(**options)
    raise ValueError(f"unknown target {target!r}; tensortune compiles models for 'cpu' and 'cuda'")

