"""Tuning a template through the loop, and rebuilding its best configuration from records.

Candidates are instantiated and turned into C in this process (milliseconds), compiled
`jobs` at a time, and run in an isolated worker by the auto-scheduler's runner: first on
random inputs with their outputs poisoned, checked against the NumPy interpreter of the
template's expressions (a mismatch is that candidate's `wrong_result`), then timed. Every
measurement is a record of the workload `template:<name>` (keyed by the shapes, hashed
over the template's source and its expressions); a later `tune` with the same records
rebuilds the best one without measuring, as `load_best` does.

Example:
    >>> from tensortune.template.examples import matmul
    >>> k = matmul(32, 32, 32).tune(budget=2, db=":memory:", progress=False)
    >>> k.trials, k.from_db
    (2, False)
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..autoschedule.api import recorded_candidates
from ..autoschedule.measure import CheckSpec, SketchBuilder, SketchRunner, random_inputs
from ..backends.c_codegen import generate_c
from ..backends.c_compiler import CCompiler
from ..db import Database, Target
from ..measure import check_close
from ..search import create_strategy
from ..space import Config
from ..te.build import Kernel, build, reference_outputs
from ..te.schedule import Schedule
from ..tuner import Budget, Tuner, TuningFailed
from .search import TemplateSearch
from .knobs import TemplateError
from .template import TemplateTask

DEFAULT_STRATEGY = "model"  # TemplateSearch: evolutionary, cost model on loop-nest features


@dataclass(frozen=True)
class TunedTemplate:
    """A template's best configuration, compiled and verified; call it like its kernel: a
    `te.Kernel` (CPU: NumPy arrays or torch CPU tensors) or a `CudaKernel` (GPU: torch
    tensors)."""

    task: TemplateTask
    kernel: Any  # te.build.Kernel | backends.triton.CudaKernel
    config: Config
    time: float  # the best measured median, seconds
    trials: int  # measured by this call (0 when rebuilt from the records)
    tuning_seconds: float
    from_db: bool

    def __call__(self, *arrays: Any) -> Any:
        return self.kernel(*arrays)

    @property
    def schedule(self) -> Schedule:
        """The te schedule of a CPU template's best configuration."""
        if self.task.cuda is not None:
            raise TemplateError(f"template {self.task.name!r} is a GPU template: it has pattern options "
                                "(.options), not a te schedule")
        return self.kernel.schedule

    @property
    def options(self) -> Config:
        """The GPU pattern's options of a GPU template's best configuration."""
        if self.task.cuda is None:
            raise TemplateError(f"template {self.task.name!r} is a CPU template: it has a te schedule (.schedule)")
        return self.kernel.config

    @property
    def source(self) -> str:
        return self.kernel.source

    @property
    def gflops(self) -> float:
        return self.task.flops / self.time / 1e9 if self.time > 0 and math.isfinite(self.time) else 0.0


class TemplateBuilder(SketchBuilder):
    """Configurations -> compiled libraries: the template instantiated, lowered, compiled
    `jobs` at a time (a schedule te refuses is that candidate's `invalid` failure)."""

    def __init__(self, task: TemplateTask, compiler: CCompiler | None = None, jobs: int = 2,
                 function: str = "kernel") -> None:
        super().__init__(None, list(task.args), compiler, jobs, function)  # type: ignore[arg-type]
        self.task = task

    def schedule_source(self, config: Config) -> tuple[Any, str]:
        s, args = self.task.instantiate(config)
        return s, generate_c(s.lower(self.function, list(args)))


def make_strategy(task: TemplateTask, strategy: str, seed: int, budget: int | None, database: Any = None,
                  prior: Sequence[TemplateTask | str] = ()):
    """The search over the template's knobs; with `prior`, the model strategy's cost model
    starts from those templates' (or the auto-scheduler's) records in `database`."""
    chooser = (TemplateSearch(task, seed=seed, budget=budget) if strategy == DEFAULT_STRATEGY
               else create_strategy(strategy, task.space, seed=seed, budget=budget))
    if prior:
        if not isinstance(chooser, TemplateSearch):
            raise TemplateError(f"prior= needs the {DEFAULT_STRATEGY!r} strategy (a cost model on program features), "
                                f"not {strategy!r}")
        from .prior import prior_model
        model = prior_model(task, database, prior, seed)
        if model is not None:
            chooser.use_program_prior(model)
    return chooser


def template_budget(budget: Budget | int | float | None) -> Budget:
    """The budget of a template's run: a schedule (or pattern option) the template refuses
    costs no measurement, so it does not use up a trial."""
    limit = Budget.of(budget, default_trials=64)
    if limit.free_rejections is None and limit.trials is not None:
        limit = dataclasses.replace(limit, free_rejections=limit.trials)
    return limit


def open_db(db: Any) -> Database:
    from ..frontends.callable import open_db as _open
    return _open(db)


def tune(task: TemplateTask, budget: Budget | int | float | None = None, db: Any = None, *,
         strategy: str = DEFAULT_STRATEGY, seed: int = 0, jobs: int | None = None, retune: bool = False,
         progress: bool | None = None, timer: Any = None, retry_failed: bool = False,
         prior: Sequence[TemplateTask | str] = (), confirm: bool = True, cache_dir: Any = None) -> TunedTemplate:
    """Tune the template's knobs and return the best configuration compiled and verified.

    With records of this template and shapes in `db`, the recorded best is rebuilt without
    measuring, unless `retune` (the search resumes from the records: nothing recorded is
    measured again) or `retry_failed`. `strategy`: "model" (evolutionary search with the
    cost model on loop-nest features) or any registered strategy name ("random", ...).
    `prior`: other `TemplateTask`s of the same computation and/or "autoschedule", whose
    records in `db` pre-train the model strategy's cost model (`template.prior`).

    A GPU template (`task.target == "cuda"`) is tuned on the current GPU (`template.cuda_tune`):
    `jobs` compile processes (default one per CPU; 2 C compiles for the CPU), `timer` a
    `CudaTimer`, `confirm` re-times near-ties, `cache_dir` holds the generated modules."""
    database = open_db(db)
    if task.cuda is not None:
        from .cuda_tune import tune_cuda
        return tune_cuda(task, budget, database, strategy=strategy, seed=seed, jobs=jobs, retune=retune,
                         progress=_progress(progress), timer=timer, retry_failed=retry_failed, prior=prior,
                         confirm=confirm, cache_dir=cache_dir)
    jobs = jobs or 2
    target = Target.cpu()
    if not (retune or retry_failed):
        found = _rebuild(task, database, target, 0, 0.0, True)
        if found is not None:
            return found
    limit = template_budget(budget)
    spec = CheckSpec.of(task.outputs, task.args, task.workload.source_hash)
    runner = SketchRunner(spec, seed=seed) if timer is None else SketchRunner(spec, timer=timer, seed=seed)
    builder = TemplateBuilder(task, jobs=jobs)
    start = time.perf_counter()
    chooser = make_strategy(task, strategy, seed, limit.trials, database, prior)
    try:
        tuner = Tuner(task.space, runner, workload=task.workload, target=target, db=database, builder=builder,
                      strategy=chooser, budget=limit, seed=seed,
                      batch_size=max(2, jobs * 2), progress=_progress(progress), description=task.name,
                      retune=False, retry_failed=retry_failed)
        result = tuner.run()
    finally:
        runner.close()
    seconds = time.perf_counter() - start
    found = _rebuild(task, database, target, result.trials, seconds, False)
    if found is None:
        raise TuningFailed(f"template {task.name!r} {list(task.shapes)}: no configuration worked "
                           f"({result.trials} measured); see the records database")
    return found


def load_best(task: TemplateTask, db: Any = None) -> TunedTemplate:
    """The best recorded configuration of the template for its shapes, compiled and verified
    on fresh inputs, without measuring anything. LookupError when nothing usable is recorded."""
    if task.cuda is not None:
        from .cuda_tune import cuda_target, make_generator, rebuild, require_gpu
        require_gpu()
        found = rebuild(task, open_db(db), cuda_target(), make_generator(task, None), 0, 0.0, True)
    else:
        found = _rebuild(task, open_db(db), Target.cpu(), 0, 0.0, True)
    if found is None:
        raise LookupError(f"no working configuration of template {task.name!r} {list(task.shapes)} is recorded "
                          "for this machine")
    return found


REBUILD_TRIES = 3


def _rebuild(task: TemplateTask, db: Database, target: Target, trials: int, seconds: float,
             from_db: bool) -> TunedTemplate | None:
    """The fastest recorded configuration that is in the space and still builds and checks
    (a record is only trusted once it has been rebuilt and verified)."""
    records = recorded_candidates(db, task.workload, target, task.space)
    return first_verified(task, records, lambda r: verified_kernel(task, r.config), trials, seconds, from_db)


def first_verified(task: TemplateTask, records: Sequence[Any], verify: Any, trials: int, seconds: float,
                   from_db: bool) -> TunedTemplate | None:
    """The first of the best `REBUILD_TRIES` records that `verify` rebuilds and checks; a
    record that fails is skipped with a warning that says why."""
    for record in records[:REBUILD_TRIES]:
        try:
            kernel = verify(record)
        except Exception as exc:  # noqa: BLE001 - a record that cannot be rebuilt is skipped, said why
            warnings.warn(f"{task.name}: the recorded configuration {record.config.to_json()[:200]} could not be "
                          f"rebuilt ({type(exc).__name__}: {str(exc)[:200]}); skipped", stacklevel=4)
            continue
        return TunedTemplate(task, kernel, record.config, record.time, trials, seconds, from_db)
    return None


def verified_kernel(task: TemplateTask, config: Config) -> Kernel:
    """The configuration's kernel, checked against the interpreter on fresh random inputs."""
    s, args = task.instantiate(config)
    kernel = build(s, list(args))
    spec = CheckSpec.of(task.outputs, task.args, "")
    inputs = random_inputs(spec, np.random.default_rng(int.from_bytes(os.urandom(4), "little")))
    got = kernel(*[inputs[t.name] for t in kernel.inputs])
    got = got if isinstance(got, tuple) else (got,)
    want = reference_outputs(list(task.outputs), **inputs)
    for t, value in zip(kernel.outputs, got):
        check_close(value, want[t.name], spec.rtol, spec.atol)
    return kernel


def _progress(progress: bool | None) -> bool:
    if progress is not None:
        return progress
    from ..settings import Settings
    return Settings.from_env().progress

