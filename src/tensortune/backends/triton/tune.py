"""Auto-scheduling an expression graph for NVIDIA GPUs: `autoschedule_cuda(output, budget=...)`.

The graph's pattern gives a sketch (a space of tile sizes, launch order, split-K,
persistence, warps and stages, with constraints) and its rule-of-thumb seeds; the
search (evolutionary with the XGBoost cost model by default) proposes configurations
after the seeds; each batch is generated and compiled in parallel, then checked against
the float32 torch reference on fresh random inputs and timed with CUDA events in an
isolated GPU worker (a crash, hang or wrong result is that candidate's record); every
result goes to the records database at once. Near-ties are re-timed interleaved before
the winner is declared. Called again for the same graph and target, it builds the best
recorded configuration without measuring anything (`retune=True` searches on).

Without a GPU, with TRITON_INTERPRET=1 set, the same loop runs the kernels in Triton's
interpreter on CPU tensors (for tests; the times mean nothing there).

Example (on a GPU):
    >>> from tensortune.te import workloads
    >>> kernel = autoschedule_cuda(workloads.matmul(4096, 4096, 4096, "float16").output,
    ...                            budget=64)                          # doctest: +SKIP
    >>> print(kernel.source)                                          # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from ...db import Database, Target, Workload
from ...measure import MeasureResult
from ...search import SearchStrategy, create_strategy
from ...space import Config
from ...te.dtype import TEError
from ...te.tensor import Tensor
from ...tuner import Budget, Tuner
from .kernel import CudaKernel, Tuning, default_cache_dir, interpreting, workload_digest
from .patterns import analyze
from .reference import TorchReference
from .runtime import GeneratedBuilder, GeneratedLaunch, Generator
from .sketches import H100_SMS, sketch
from .source import GenOptions, kernel_args


class SeededStrategy(SearchStrategy):
    """Proposes the sketch's seed configurations first, then whatever `inner` asks for."""

    def __init__(self, inner: SearchStrategy, seeds: Sequence[Config]) -> None:
        super().__init__(inner.space, inner.seed, inner.budget)
        self.inner = inner
        self.name = inner.name  # type: ignore[misc]
        self.pending = [s for s in seeds if s in inner.space]

    def ask(self, n: int) -> list[Config]:
        out: list[Config] = []
        while self.pending and len(out) < n:
            c = self.pending.pop(0)
            if c not in self.seen and c not in self.inner.seen:
                self.seen.add(c)
                self.inner.propose(c)
                out.append(c)
        if len(out) < n:
            for c in self.inner.ask(n - len(out)):
                if c not in out:
                    self.seen.add(c)
                    out.append(c)
        return out

    def tell(self, results: Sequence[MeasureResult]) -> None:
        super().tell(results)
        self.inner.tell(results)


def cuda_workload(plan: Any, options: GenOptions) -> Workload:
    return Workload.make(f"te-cuda:{plan.output.name}", source=f"{options}\n{plan.describe()}",
                         key={"pattern": plan.kind, "half": options.half, "tf32": options.allow_tf32,
                              "codegen": workload_digest(plan, options)})


def cuda_target(interpret: bool) -> Target:
    from ...frontends.triton.target import current_target

    return current_target(interpret)


def _open_db(db: Database | str | os.PathLike[str] | None) -> Database:
    from ...frontends.callable import open_db

    return open_db(db)


def default_timer(interpret: bool) -> Any:
    from ...measure.cuda_timer import CudaTimer

    if interpret:
        return CudaTimer(clock="host", budget_seconds=0.0, warmup_seconds=0.0, min_repeats=1, max_repeats=1,
                         estimate_repeats=1, flush_l2=False)
    return CudaTimer(budget_seconds=0.05, warmup_seconds=0.01, min_repeats=10, max_repeats=200)


def recorded_best(db: Database, workload: Workload, target: Target) -> Any:
    """The record to rebuild: the latest confirmed winner if any, else the fastest record."""
    records = [r for r in db.records(workload, target) if r.ok]
    confirmed = [r for r in records if r.extra.get("confirmed")]
    if confirmed:
        return max(confirmed, key=lambda r: r.created_at)
    return min(records, key=lambda r: r.time) if records else None


def graph_tolerance(output: Tensor, storage: str) -> float | None:
    """The check's tolerance when a stage rounds to a half type the output does not have
    (a bfloat16 sum widened to a float32 output); None: the output's own dtype decides."""
    from ...measure.gpu.args import tolerance_for
    from ...te.tensor import graph

    own = tolerance_for(storage)
    widest = max((tolerance_for(t.dtype) for t in graph(output)), default=own)
    return widest if widest > own else None


def output_of(obj: Any) -> Tensor:
    """The output tensor of a tensor, a one-element sequence, a `te.workloads` computation,
    or a function returning one of these."""
    if callable(obj) and not isinstance(obj, Tensor):
        obj = obj()
    if hasattr(obj, "outputs") and hasattr(obj, "inputs") and not isinstance(obj, Tensor):
        obj = obj.outputs
    outs = [obj] if isinstance(obj, Tensor) else list(obj)
    if len(outs) != 1 or not isinstance(outs[0], Tensor):
        raise TEError(f"the CUDA target compiles one output tensor, got {obj!r}")
    return outs[0]


class CudaSearch:
    """One graph's search on the GPU, resumable round by round (a task of a task scheduler).

    `runner` and `compiler` may be shared by several searches (one GPU worker and one
    compile pool for a whole model); the search points the runner at its own task
    before each round. Without them it makes its own, closed by `close()`. `executor`:
    where candidates are built and measured (an `Executor`; None: here); on a Ray
    cluster the modules are generated and compiled in build tasks on nodes of the
    target, and measured by the actors that own its GPUs.
    """

    def __init__(self, outputs: Any, *, db: Database | str | os.PathLike[str] | None = None,
                 strategy: str | SearchStrategy = "evolutionary", strategy_options: Mapping[str, Any] | None = None,
                 seed: int = 0, half: str = "float16", allow_tf32: bool = False, jobs: int | None = None,
                 timer: Any = None, timeout: float = 60.0, cache_dir: str | os.PathLike[str] | None = None,
                 progress: bool = True, budget_hint: int | None = None, runner: Any = None, compiler: Any = None,
                 input_specs: Sequence[Any] | None = None, executor: Any = None) -> None:
        self.interpret = interpret = interpreting()
        if not interpret:
            import torch

            if not torch.cuda.is_available():
                raise TEError("autoschedule(target='cuda') needs a CUDA GPU; on the CPU set TRITON_INTERPRET=1 to "
                              "run the generated kernels in Triton's interpreter (for testing)")
        self.plan = plan = analyze(output_of(outputs))
        self.options = GenOptions(half, interpret, allow_tf32)
        self.sketch = sketch(plan, self.options, _sms(interpret))
        self.workload = cuda_workload(plan, self.options)
        self.target = cuda_target(interpret)
        self.database = _open_db(db)
        self.generator = Generator(plan, self.options, str(cache_dir or default_cache_dir()),
                                   workload_digest(plan, self.options))
        self.strategy, self.strategy_options, self.seed = strategy, dict(strategy_options or {}), seed
        self.jobs, self.timer, self.timeout, self.progress = jobs, timer, timeout, progress
        self.budget_hint = budget_hint
        self.input_specs = input_specs
        self._runner, self._shared_runner = runner, runner is not None
        self._compiler = compiler
        self.executor = executor
        self._tuner: Tuner | None = None
        self._builder: Any = None
        self.results: list[MeasureResult] = []
        self.best: MeasureResult | None = None
        self.seconds = 0.0
        self.session: int | None = None

    def recorded(self) -> CudaKernel | None:
        """The best recorded configuration built (no measuring), or None."""
        record = recorded_best(self.database, self.workload, self.target)
        if record is not None and record.config in self.sketch.space:
            return CudaKernel(self.plan, record.config, self.generator, Tuning("database", best_time=record.time))
        return None

    @property
    def task(self) -> Any:
        from ...measure.gpu import GpuTask, TensorArg

        args = kernel_args(self.plan, self.options)
        if self.input_specs is not None:
            specs = tuple(self.input_specs)
        else:
            specs = tuple(TensorArg(a.tensor.shape, a.dtype) for a in args[:-1])
        specs += (TensorArg(args[-1].tensor.shape, args[-1].dtype, output=True),)
        reference = TorchReference(self.plan.output, tuple(a.name for a in args[:-1]))
        tol = graph_tolerance(self.plan.output, args[-1].dtype)
        return GpuTask(GeneratedLaunch(self.generator.directory, self.generator.prefix), specs, reference=reference,
                       device="cpu" if self.interpret else "cuda", timer=self.timer or default_timer(self.interpret),
                       name=self.workload.id_text, rtol=tol, atol=tol)

    def _setup(self) -> Tuner:
        from ...measure.gpu import GpuRunner
        from ...measure.triton_compile import detect_target, device_max_shared

        env = {"TRITON_INTERPRET": "1"} if self.interpret else {}
        task = self.task
        if self._runner is None:
            self._runner = GpuRunner(task, timeout=self.timeout, env=env,
                                     cutoff_factor=None if self.interpret else 4.0)
        self._builder = GeneratedBuilder(self.generator, target=None if self.interpret else detect_target(),
                                         jobs=self.jobs, max_shared=None if self.interpret else device_max_shared(),
                                         compile=not self.interpret, env=env, compiler=self._compiler)
        inner = create_strategy(self.strategy, self.sketch.space, seed=self.seed, budget=self.budget_hint,
                                **self.strategy_options)
        return Tuner(self.sketch.space, self._runner, workload=self.workload, target=self.target,
                     db=self.database, builder=self._builder, strategy=SeededStrategy(inner, self.sketch.seeds),
                     budget=self.budget_hint, seed=self.seed, progress=self.progress,
                     description=f"{self.plan.output.name} ({self.plan.kind}, cuda)", executor=self.executor)

    def run(self, budget: Budget | int | float | None) -> list[MeasureResult]:
        """Measure up to `budget` more candidates; the search goes on where it stopped."""
        import time

        start = time.perf_counter()
        if self._tuner is None:
            self._tuner = self._setup()
        if self._shared_runner:
            self._runner.set_task(self.task)
        try:
            self._tuner.budget = Budget.of(budget)
            result = self._tuner.run()
        finally:
            self.seconds += time.perf_counter() - start
        self.session = result.session
        if result.best is not None and (self.best is None or result.best.time < self.best.time):
            self.best = result.best  # the records it resumed from count too
        new = list(result.history[result.reused:])
        self.results.extend(new)
        return new

    def tune(self, trials: int) -> list[MeasureResult]:
        return self.run(Budget(trials=trials))

    def finish(self, confirm: bool = True) -> CudaKernel:
        """The best kernel found, near-ties re-timed interleaved (recorded) when `confirm`."""
        ok = [r for r in self.results if r.ok]
        best = self.best
        extra: dict[str, Any] = {}
        if best is not None and confirm and not self.interpret and self._runner is not None:
            if self._shared_runner:
                self._runner.set_task(self.task)
            confirmation = self._runner.confirm(self.results)
            if confirmation is not None and confirmation.rounds:
                chosen = next((r for r in ok if r.config == confirmation.winner), best)
                from ...measure.gpu import confirmed_result

                best = confirmed_result(chosen, confirmation)
                self.database.add(self.workload, self.target, best, strategy="confirm", session=self.session)
                extra = confirmation.as_extra()
        if best is None:
            recorded = self.recorded()
            if recorded is not None:
                return recorded
            errors = sorted({str(r.error) for r in self.results if not r.ok})
            raise TEError(f"no candidate of {self.plan.output.name!r} ran correctly in {len(self.results)} trials "
                          f"(errors: {', '.join(errors) or 'none measured'}); see the records of "
                          f"{self.workload.id_text}")
        failures = sum(not r.ok for r in self.results)
        tuning = Tuning("search", len(self.results), self.seconds, best.time, failures, extra)
        return CudaKernel(self.plan, best.config, self.generator, tuning)

    def close(self) -> None:
        if self._builder is not None:
            self._builder.close()
        if self._runner is not None and not self._shared_runner:
            self._runner.close()


def autoschedule_cuda(outputs: Any, *, budget: Budget | int | float | None = 64,
                      db: Database | str | os.PathLike[str] | None = None, strategy: str | SearchStrategy =
                      "evolutionary", strategy_options: Mapping[str, Any] | None = None, seed: int = 0,
                      half: str = "float16", allow_tf32: bool = False, retune: bool = False,
                      jobs: int | None = None, timer: Any = None, timeout: float = 60.0, confirm: bool = True,
                      cache_dir: str | os.PathLike[str] | None = None, progress: bool = True,
                      executor: Any = None, ray_address: str | None = None) -> CudaKernel:
    """A tuned Triton kernel for the graph's output, callable on torch tensors.

    `outputs`: the output tensor, a `te.workloads` computation, or a function returning
    either (one output).
    `budget`: trials (int), seconds (float) or a `Budget`; `half`: the storage type of
    the graph's float16 tensors ("float16" or "bfloat16"; for bfloat16, prefer bfloat16
    tensors in the graph); `allow_tf32`: float32
    contractions may use TF32; `timer`: a `CudaTimer` for candidates (default: 50 ms of
    repeats, cold L2); `jobs`: compile processes (default: one per CPU); `executor`:
    "local" (default), "ray" (with `ray_address`) or an `Executor`: where candidates are
    compiled and measured (docs/distributed.md); the near-ties are re-timed here.
    """
    from ...measure import make_executor

    runs_on = make_executor(executor, ray_address)
    search = CudaSearch(outputs, db=db, strategy=strategy, strategy_options=strategy_options, seed=seed,
                        half=half, allow_tf32=allow_tf32, jobs=jobs, timer=timer, timeout=timeout,
                        cache_dir=cache_dir, progress=progress, budget_hint=Budget.of(budget).trials,
                        executor=runs_on)
    try:
        if not retune:
            recorded = search.recorded()
            if recorded is not None:
                return recorded
        search.run(budget)
        return search.finish(confirm)
    finally:
        search.close()
        if executor is None or isinstance(executor, str):
            runs_on.close()


def _sms(interpret: bool) -> int:
    if interpret:
        return H100_SMS
    import torch

    return int(torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count)


__all__ = ["CudaSearch", "SeededStrategy", "autoschedule_cuda", "cuda_target", "cuda_workload", "output_of", "recorded_best"]
