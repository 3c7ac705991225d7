"""Tuning a GPU template through the loop, and rebuilding its best configuration from records.

This is the GPU auto-scheduler's loop with the template's knobs as the space: each
candidate's knobs are resolved to its pattern's options (`TemplateTask.resolve`), the
Triton module is generated and written per configuration, compiled in the parallel
compile pool (not under the interpreter), run in the isolated GPU worker on random
inputs with its output poisoned, checked against the NumPy interpreter of the template's
expressions, timed with CUDA events, and recorded under the workload `template:<name>`
for the current GPU. Candidates whose options the pattern does not offer are the
builder's rejections (no measurement). On a GPU, near-ties are re-timed interleaved and
the winner's record says so. `load_best` rebuilds the recorded best and checks it again
on fresh inputs.

Example (on a GPU, or on the CPU with TRITON_INTERPRET=1):
    >>> from tensortune.template.examples import gpu_matmul
    >>> best = gpu_matmul(64, 64, 64).tune(budget=8, db="tuning.db")      # doctest: +SKIP
    >>> best.options["BLOCK_M"], best.kernel.source[:40]                   # doctest: +SKIP
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..db import Database, Target
from ..space import Config
from ..tuner import Budget, Tuner, TuningFailed
from .cuda import InterpreterReference, default_cache_dir, gen_options
from .knobs import TemplateError
from .template import TemplateTask


@dataclass(frozen=True)
class TemplateGenerator:
    """Writes a GPU template's candidates: the module of each knob configuration at
    `<directory>/<prefix>_<digest>.py` (what `GeneratedBuilder` and `GeneratedLaunch` need);
    a configuration whose options the pattern does not offer is a `CodegenError`."""

    task: TemplateTask
    options: Any  # backends.triton.source.GenOptions
    directory: str
    prefix: str

    def path(self, config: Mapping[str, Any]) -> Path:
        cfg = config if isinstance(config, Config) else Config(dict(config))
        return Path(self.directory) / f"{self.prefix}_{cfg.digest}.py"

    def write(self, config: Mapping[str, Any]) -> Any:
        from ..backends.triton.generate import generate
        from ..backends.triton.source import CodegenError
        try:
            resolved = self.task.resolve(config)
        except TemplateError as exc:
            raise CodegenError(str(exc)) from None
        source = generate(resolved.plan, resolved.config, self.options)
        path = self.path(config)
        if not path.exists() or path.read_text() != source.text:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{time.monotonic_ns()}")
            tmp.write_text(source.text)
            tmp.replace(path)
        return source


def cuda_target() -> Target:
    from ..backends.triton.kernel import interpreting
    from ..backends.triton.tune import cuda_target as target
    return target(interpreting())


def require_gpu() -> bool:
    """Whether kernels run in Triton's interpreter; a clear error without a GPU or it."""
    from ..backends.triton.kernel import interpreting
    if interpreting():
        return True
    import torch
    if not torch.cuda.is_available():
        raise TemplateError("a GPU template needs a CUDA GPU; on the CPU set TRITON_INTERPRET=1 to run its kernels "
                            "in Triton's interpreter (for testing)")
    return False


def gpu_task(task: TemplateTask, generator: TemplateGenerator, timer: Any, interpret: bool) -> Any:
    """What the GPU worker runs: the candidates' launch, the arguments, the interpreter's reference."""
    from ..backends.triton.runtime import GeneratedLaunch
    from ..backends.triton.source import kernel_args
    from ..backends.triton.tune import default_timer, graph_tolerance
    from ..measure.gpu import GpuTask, TensorArg

    assert task.cuda is not None
    args = kernel_args(task.cuda.plan, generator.options)
    specs = tuple(TensorArg(a.tensor.shape, a.dtype) for a in args[:-1])
    specs += (TensorArg(args[-1].tensor.shape, args[-1].dtype, output=True),)
    reference = InterpreterReference(task.outputs[0], tuple(a.name for a in args[:-1]))
    tol = graph_tolerance(task.outputs[0], args[-1].dtype)
    return GpuTask(GeneratedLaunch(generator.directory, generator.prefix), specs, reference=reference,
                   device="cpu" if interpret else "cuda", timer=timer or default_timer(interpret),
                   name=task.workload.id_text, rtol=tol, atol=tol)


def make_generator(task: TemplateTask, cache_dir: str | os.PathLike[str] | None) -> TemplateGenerator:
    prefix = re.sub(r"[^0-9A-Za-z_]", "_", task.name) + "_" + task.workload.source_hash[:12]
    return TemplateGenerator(task, gen_options(), str(cache_dir or default_cache_dir()), prefix)


def tune_cuda(task: TemplateTask, budget: Budget | int | float | None, db: Database, *, strategy: str, seed: int,
              jobs: int | None, retune: bool, progress: bool, timer: Any, retry_failed: bool,
              prior: Sequence[TemplateTask | str], confirm: bool = True,
              cache_dir: str | os.PathLike[str] | None = None) -> Any:
    """`TemplateTask.tune` for a GPU template (see `template.tune.tune`)."""
    from ..backends.triton.runtime import GeneratedBuilder
    from ..measure.gpu import GpuRunner
    from .tune import make_strategy, template_budget

    interpret = require_gpu()
    target = cuda_target()
    generator = make_generator(task, cache_dir)
    if not (retune or retry_failed):
        found = rebuild(task, db, target, generator, 0, 0.0, True)
        if found is not None:
            return found
    limit = template_budget(budget)
    env = {"TRITON_INTERPRET": "1"} if interpret else {}
    compile_target = max_shared = None
    if not interpret:
        from ..measure.triton_compile import detect_target, device_max_shared
        compile_target, max_shared = detect_target(), device_max_shared()
    start = time.perf_counter()
    chooser = make_strategy(task, strategy, seed, limit.trials, db, prior)
    runner = GpuRunner(gpu_task(task, generator, timer, interpret), timeout=60.0, env=env,
                       cutoff_factor=None if interpret else 4.0)
    builder = GeneratedBuilder(generator, target=compile_target, jobs=jobs, max_shared=max_shared,
                               compile=not interpret, env=env)
    try:
        tuner = Tuner(task.space, runner, workload=task.workload, target=target, db=db, builder=builder,
                      strategy=chooser, budget=limit, seed=seed, progress=progress,
                      description=f"{task.name} (cuda)", retune=False, retry_failed=retry_failed)
        result = tuner.run()
        if confirm and not interpret and result.best is not None:
            # this run's candidates only: their modules are in this cache_dir and built for this GPU
            _confirm(runner, db, task, target, list(result.history[result.reused:]), result.session)
    finally:
        builder.close()
        runner.close()
    found = rebuild(task, db, target, generator, result.trials, time.perf_counter() - start, False)
    if found is None:
        raise TuningFailed(f"template {task.name!r} {list(task.shapes)}: no configuration worked "
                           f"({result.trials} measured); see the records database")
    return found


def _confirm(runner: Any, db: Database, task: TemplateTask, target: Target, results: list[Any],
             session: int | None) -> None:
    """Near-ties re-timed interleaved; the winner recorded again with how sure the choice is."""
    from ..measure.gpu import confirmed_result
    confirmation = runner.confirm(results)
    if confirmation is None or not confirmation.rounds:
        return
    ok = [r for r in results if r.ok]
    chosen = next((r for r in ok if r.config == confirmation.winner), None)
    if chosen is not None:
        db.add(task.workload, target, confirmed_result(chosen, confirmation), strategy="confirm", session=session)


def candidates(db: Database, task: TemplateTask, target: Target) -> list[Any]:
    """The records to rebuild, best first: the latest confirmed winner, then by time; only
    configurations of the template's space."""
    records = [r for r in db.records(task.workload, target) if r.ok and task.space.is_valid(r.config)]
    confirmed = sorted((r for r in records if r.extra.get("confirmed")), key=lambda r: r.created_at, reverse=True)
    rest = sorted((r for r in records if not r.extra.get("confirmed")), key=lambda r: r.time)
    out, seen = [], set()
    for r in confirmed[:1] + rest:
        if r.config not in seen:
            seen.add(r.config)
            out.append(r)
    return out


def rebuild(task: TemplateTask, db: Database, target: Target, generator: TemplateGenerator, trials: int,
            seconds: float, from_db: bool) -> Any:
    """The best recorded configuration that still resolves, builds and checks (None: none does)."""
    from .tune import first_verified
    return first_verified(task, candidates(db, task, target),
                          lambda r: verified_kernel(task, r.config, generator, r.time, trials, seconds, from_db),
                          trials, seconds, from_db)


def verified_kernel(task: TemplateTask, config: Config, generator: TemplateGenerator, best_time: float = float("nan"),
                    trials: int = 0, seconds: float = 0.0, from_db: bool = True) -> Any:
    """The configuration's `CudaKernel`, checked against the NumPy interpreter on fresh inputs."""
    from ..backends.triton.kernel import CudaKernel, Tuning, workload_digest
    from ..backends.triton.runtime import Generator
    from ..measure.gpu.args import make_args, mismatch

    resolved = task.resolve(config)
    gen = Generator(resolved.plan, generator.options, generator.directory,
                    workload_digest(resolved.plan, generator.options))
    tuning = Tuning("database" if from_db else "search", trials, seconds, best_time)
    kernel = CudaKernel(resolved.plan, resolved.config, gen, tuning)
    spec = gpu_task(task, generator, None, generator.options.interpret)
    inputs = make_args(spec.args[:-1], int.from_bytes(os.urandom(4), "little"), spec.device)
    got = kernel(*inputs)
    reference = spec.reference
    want = reference(*inputs, got)
    problem = mismatch(got, want, spec.rtol, spec.atol)
    if problem is not None:
        raise TemplateError(f"the rebuilt kernel of {config.to_json()[:200]} does not match the interpreter: "
                            f"{problem}")
    return kernel
