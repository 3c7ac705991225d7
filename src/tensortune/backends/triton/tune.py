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


def autoschedule_cuda(outputs: Any, *, budget: Budget | int | float | None = 64,
                      db: Database | str | os.PathLike[str] | None = None, strategy: str | SearchStrategy =
                      "evolutionary", strategy_options: Mapping[str, Any] | None = None, seed: int = 0,
                      half: str = "float16", allow_tf32: bool = False, retune: bool = False,
                      jobs: int | None = None, timer: Any = None, timeout: float = 60.0, confirm: bool = True,
                      cache_dir: str | os.PathLike[str] | None = None, progress: bool = True) -> CudaKernel:
    """A tuned Triton kernel for the graph's output, callable on torch tensors.

    `outputs`: the output tensor, a `te.workloads` computation, or a function returning
    either (one output).
    `budget`: trials (int), seconds (float) or a `Budget`; `half`: the storage type of
    the graph's float16 tensors ("float16" or "bfloat16"; for bfloat16, prefer bfloat16
    tensors in the graph); `allow_tf32`: float32
    contractions may use TF32; `timer`: a `CudaTimer` for candidates (default: 50 ms of
    repeats, cold L2); `jobs`: compile processes (default: one per CPU).
    """
    interpret = interpreting()
    if not interpret:
        import torch

        if not torch.cuda.is_available():
            raise TEError("autoschedule(target='cuda') needs a CUDA GPU; on the CPU set TRITON_INTERPRET=1 to "
                          "run the generated kernels in Triton's interpreter (for testing)")
    plan = analyze(output_of(outputs))
    options = GenOptions(half, interpret, allow_tf32)
    sms = _sms(interpret)
    sk = sketch(plan, options, sms)
    workload = cuda_workload(plan, options)
    target = cuda_target(interpret)
    database = _open_db(db)
    generator = Generator(plan, options, str(cache_dir or default_cache_dir()), workload_digest(plan, options))
    if not retune:
        record = recorded_best(database, workload, target)
        if record is not None and record.config in sk.space:
            return CudaKernel(plan, record.config, generator, Tuning("database", best_time=record.time))
    args = kernel_args(plan, options)
    from ...measure.gpu import GpuRunner, GpuTask, TensorArg
    from ...measure.triton_compile import detect_target, device_max_shared

    specs = tuple(TensorArg(a.tensor.shape, a.dtype) for a in args[:-1])
    specs += (TensorArg(args[-1].tensor.shape, args[-1].dtype, output=True),)
    reference = TorchReference(plan.output, tuple(a.name for a in args[:-1]))
    task = GpuTask(GeneratedLaunch(generator.directory, generator.prefix), specs, reference=reference,
                   device="cpu" if interpret else "cuda", timer=timer or default_timer(interpret),
                   name=workload.id_text)
    env = {"TRITON_INTERPRET": "1"} if interpret else {}
    builder = GeneratedBuilder(generator, target=None if interpret else detect_target(), jobs=jobs,
                               max_shared=None if interpret else device_max_shared(), compile=not interpret,
                               env=env)
    inner = create_strategy(strategy, sk.space, seed=seed, budget=Budget.of(budget).trials,
                            **dict(strategy_options or {}))
    search = SeededStrategy(inner, sk.seeds)
    try:
        with GpuRunner(task, timeout=timeout, env=env, cutoff_factor=None if interpret else 4.0) as runner:
            tuner = Tuner(sk.space, runner, workload=workload, target=target, db=database, builder=builder,
                          strategy=search, budget=budget, seed=seed, progress=progress,
                          description=f"{plan.output.name} ({plan.kind}, cuda)")
            result = tuner.run()
            best = result.best
            extra: dict[str, Any] = {}
            if best is not None and confirm and not interpret:
                new = list(result.history[result.reused:])
                confirmation = runner.confirm(new)
                if confirmation is not None and confirmation.rounds:
                    chosen = next((r for r in new if r.config == confirmation.winner), best)
                    from ...measure.gpu import confirmed_result

                    best = confirmed_result(chosen, confirmation)
                    database.add(workload, target, best, strategy="confirm", session=result.session)
                    extra = confirmation.as_extra()
    finally:
        builder.close()
    if best is None:
        errors = sorted({str(r.error) for r in result.history if not r.ok})
        raise TEError(f"no candidate of {plan.output.name!r} ran correctly in {result.trials} trials "
                      f"(errors: {', '.join(errors)}); see the records of {workload.id_text}")
    tuning = Tuning("search", result.trials, result.seconds, best.time, result.failures, extra)
    return CudaKernel(plan, best.config, generator, tuning)


def _sms(interpret: bool) -> int:
    if interpret:
        return H100_SMS
    import torch

    return int(torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count)


__all__ = ["SeededStrategy", "autoschedule_cuda", "cuda_target", "cuda_workload", "output_of", "recorded_best"]
