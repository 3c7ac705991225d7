"""`autoschedule` and `autoschedule_many`: fast kernels from tensor expressions, no schedule written.

The first call searches (sketches, annotation, evolutionary search guided by the cost
model), records every measured schedule in the records database, re-times the finalists
interleaved, and returns the winner compiled and verified. A later call with the same
expressions, target and database builds the recorded winner without searching.

Example:
    >>> import numpy as np
    >>> from tensortune import te
    >>> from tensortune.te import workloads
    >>> k = autoschedule(workloads.matmul(32, 32, 32), budget=4, db=":memory:", progress=False)
    >>> a, b = np.ones((32, 32), "float32"), np.ones((32, 32), "float32")
    >>> float(k(a, b)[0, 0]), k.trials
    (32.0, 4)
"""

from __future__ import annotations

import hashlib
import math
import os
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..db import Database, Record, Target, Workload
from ..measure import Executor, LocalExecutor, MeasureResult, Timer, check_close, make_executor
from ..space import Config, Space
from ..tasks import ScheduleResult, Task, TaskScheduler, concurrent_rounds
from ..te.build import Kernel, build, reference_outputs
from ..te.dtype import TEError
from ..te.schedule import Schedule
from ..te.tensor import Tensor, graph
from ..search import create_strategy
from ..tuner import Budget, Tuner, standing
from .rounds import TunerRounds
from .holes import SketchSpace
from .measure import CheckSpec, SketchBuilder, SketchRunner, kernel_args, random_inputs
from .search import SketchSearch
from .sketch import RULES_VERSION

TARGETS = ("cpu", "c", "llvm")
GPU_TARGETS = ("cuda", "gpu")


@dataclass(frozen=True)
class ScheduledKernel:
    """A compiled, verified kernel found by the auto-scheduler; call it like `te.Kernel`.

    `time` (seconds per call) is the median of the winner's interleaved re-timing against
    the other finalists (its record says `confirm` in `tensortune db best`) when `confirm`
    is above 1, the default; otherwise, or when built from the records, the median of the
    record it comes from. `gflops` is `flops / time`. `db best` ranks every record by its
    own median and says what measured it, so a candidate timed fast once while searching
    can stand above the confirmed winner there.
    """

    kernel: Kernel = field(repr=False)  # its repr holds the whole C source
    config: Config
    workload: Workload
    time: float  # seconds per call: see above
    trials: int  # measured by this call (0 when built from the records)
    tuning_seconds: float
    from_db: bool
    flops: float
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def __call__(self, *arrays: np.ndarray) -> Any:
        return self.kernel(*arrays)

    @property
    def sketch(self) -> str:
        return self.config["sketch"]

    @property
    def schedule(self) -> Schedule:
        return self.kernel.schedule

    @property
    def source(self) -> str:
        return self.kernel.source

    @property
    def steps(self) -> list[dict[str, Any]]:
        return self.kernel.schedule.to_json()

    @property
    def gflops(self) -> float:
        return self.flops / self.time / 1e9 if self.time > 0 and math.isfinite(self.time) else 0.0


@dataclass(frozen=True)
class Problem:
    """What is auto-scheduled: outputs, kernel arguments, a name, and its sketch space."""

    name: str
    outputs: tuple[Tensor, ...]
    args: tuple[Tensor, ...]
    sketch_space: SketchSpace
    workload: Workload

    @staticmethod
    def of(outputs_or_function: Any, args: Sequence[Tensor] | None = None, name: str | None = None) -> Problem:
        obj = outputs_or_function
        if callable(obj) and not isinstance(obj, Tensor):
            obj = obj()
        default_name = None
        if hasattr(obj, "outputs") and hasattr(obj, "inputs") and not isinstance(obj, Tensor):
            default_name = getattr(obj, "name", None)
            args = list(args) if args is not None else list(obj.inputs) + list(obj.outputs)
            obj = obj.outputs
        outs = [obj] if isinstance(obj, Tensor) else list(obj) if isinstance(obj, (list, tuple)) else []
        if not outs or not all(isinstance(t, Tensor) for t in outs):
            raise TEError(f"autoschedule needs tensors (or a function returning them), got {outputs_or_function!r}")
        sp = SketchSpace.of(outs)
        kargs = tuple(kernel_args(sp, args))
        name = name or default_name or "+".join(t.name for t in outs)
        key = {"args": [[t.name, list(t.shape), t.dtype] for t in kargs], "rules": RULES_VERSION}
        return Problem(name, tuple(outs), kargs, sp, Workload.make(f"te:{name}", graph_text(outs), key))

    @property
    def flops(self) -> float:
        return float(self.sketch_space.graph.flops)


def graph_text(outputs: Iterable[Tensor]) -> str:
    """A canonical text of the expressions (what the workload's hash is taken of)."""
    lines = []
    for t in graph(list(outputs)):
        if t.op is None:
            lines.append(f"{t.name}: placeholder{list(t.shape)} {t.dtype}")
        else:
            axes = ", ".join(f"{a.name}:{a.extent}" for a in t.op.axes + t.op.reduce_axes)
            lines.append(f"{t.name}{list(t.shape)} {t.dtype} [{axes}] = {t.op.body}")
    return "\n".join(lines)


def _open_db(db: Any) -> Database:
    from ..frontends.callable import open_db
    return open_db(db)


def _check_target(target: str) -> None:
    if target not in TARGETS:
        raise TEError(f"autoschedule supports target='cpu' (C with OpenMP for this machine) and target='cuda' "
                      f"(Triton kernels), got {target!r}")


def recorded_candidates(db: Database, workload: Workload, target: Target, space: Space) -> list[Record]:
    """The records worth rebuilding, best first: confirmed winners (latest first), then the
    rest by time. Only configurations of `space` whose latest record about the candidate
    is a success: a record of another version of the sketches, or a damaged or crafted
    one, is never built."""
    latest = standing([r.to_result() for r in db.records(workload, target)])
    good = {c for c, r in latest.items() if r.ok}
    records = [r for r in db.records(workload, target) if r.ok and r.config in good and _in_space(space, r.config)]
    confirmed = sorted((r for r in records if r.extra.get("confirmed")), key=lambda r: -r.created_at)
    return confirmed + sorted((r for r in records if not r.extra.get("confirmed")), key=lambda r: r.time)


def recorded_best(db: Database, workload: Workload, target: Target, space: Space) -> Record | None:
    """The record to rebuild: the latest confirmed winner if any, else the fastest record."""
    found = recorded_candidates(db, workload, target, space)
    return found[0] if found else None


def _in_space(space: Space, config: Config) -> bool:
    try:
        return space.is_valid(config)
    except Exception:  # noqa: BLE001 - a value the space cannot even compare is not in it
        return False


REBUILD_TRIES = 3  # recorded configurations tried before a rebuild gives up


def rebuild_recorded(problem: Problem, db: Database, target: Target, trials: int, seconds: float,
                     from_db: bool) -> ScheduledKernel | None:
    """The best recorded schedule, built and verified; one that no longer builds or checks
    is skipped with a warning (and the next tried), never allowed to fail every call."""
    for record in recorded_candidates(db, problem.workload, target, problem.sketch_space.space)[:REBUILD_TRIES]:
        try:
            return finish_kernel(problem, record.config, record.time, trials, seconds, from_db)
        except Exception as exc:  # noqa: BLE001 - a record that cannot be rebuilt is skipped, not fatal
            warnings.warn(f"{problem.name}: the recorded schedule {record.config.to_json()[:200]} could not be "
                          f"rebuilt ({type(exc).__name__}: {str(exc)[:200]}); skipped", stacklevel=3)
    return None


class _Session(TunerRounds[ScheduledKernel]):
    """One problem's search: its tuner (kept between rounds of a task scheduler)."""

    winner_fallback = "; trying the next records"

    def __init__(self, problem: Problem, db: Database, target: Target, strategy: str, seed: int,
                 jobs: int, progress: bool, timer: Timer | None, expected_trials: int | None = None,
                 retry_failed: bool = False, executor: Executor | None = None) -> None:
        self.problem = problem
        self.db, self.target = db, target
        sp = problem.sketch_space
        self.spec = CheckSpec.of(problem.outputs, problem.args, problem.workload.source_hash)
        self.runner = SketchRunner(self.spec, seed=seed) if timer is None else \
            SketchRunner(self.spec, timer=timer, seed=seed)
        self.builder = SketchBuilder(sp, problem.args, jobs=jobs)
        chooser = SketchSearch(sp, seed=seed, budget=expected_trials) if strategy == "evolutionary" else \
            create_strategy(strategy, sp.space, seed=seed, budget=expected_trials)
        self.tuner = Tuner(sp.space, self.runner, workload=problem.workload, target=target, db=db,
                           builder=self.builder, strategy=chooser, budget=expected_trials, seed=seed,
                           batch_size=8 if executor is None or executor.name == "local" else None,
                           progress=progress, description=problem.name, retry_failed=retry_failed,
                           executor=executor or LocalExecutor())
        self.results: list[MeasureResult] = []
        self.seconds = 0.0

    def build_kernel(self, config: Config, best_time: float, trials: int, seconds: float) -> ScheduledKernel:
        return finish_kernel(self.problem, config, best_time, trials, seconds, False)

    def rebuild_kernel(self, trials: int, seconds: float) -> ScheduledKernel | None:
        return rebuild_recorded(self.problem, self.db, self.target, trials, seconds, False)

    def failure_message(self) -> str:
        return (f"auto-scheduling {self.problem.name!r} measured no working schedule "
                f"({len(self.results)} trials, all failed); see the records database")


def finish_kernel(problem: Problem, config: Config, best_time: float, trials: int, seconds: float,
                  from_db: bool) -> ScheduledKernel:
    """Build `config` with te and verify it on fresh random inputs against the interpreter."""
    from .measure import schedule_source
    schedule, _, sargs = schedule_source(problem.sketch_space, config, problem.args)
    kernel = build(schedule, sargs)
    spec = CheckSpec.of(problem.outputs, problem.args, "")
    inputs = random_inputs(spec, np.random.default_rng(int.from_bytes(os.urandom(4), "little")))
    got = kernel(*[inputs[t.name] for t in kernel.inputs])
    got = got if isinstance(got, tuple) else (got,)
    want = reference_outputs(problem.outputs, **inputs)
    for t, value in zip(kernel.outputs, got):
        check_close(value, want[t.name], spec.rtol, spec.atol)
    return ScheduledKernel(kernel, config, problem.workload, best_time, trials, seconds, from_db, problem.flops)


def autoschedule(outputs_or_function: Any, target: str = "cpu", budget: Budget | int | float | None = None,
                 db: Database | str | os.PathLike[str] | None = None, *, args: Sequence[Tensor] | None = None,
                 name: str | None = None, strategy: str = "evolutionary", seed: int = 0, jobs: int | None = None,
                 retune: bool = False, confirm: int = 4, confirm_rounds: int = 7, progress: bool | None = None,
                 timer: Timer | None = None, retry_failed: bool = False, executor: str | Executor | None = None,
                 ray_address: str | None = None, **gpu_options: Any) -> ScheduledKernel:
    """Search for a fast schedule of the expressions and return it compiled and verified.

    `outputs_or_function`: output tensor(s), a `te.workloads` computation, or a function
    returning either. `budget`: trials (int), seconds (float) or a `Budget` (default 64
    trials). With records of these expressions in `db`, the recorded winner is rebuilt
    without searching, unless `retune` (then the search resumes from the records) or
    `retry_failed` (the same, measuring again the candidates recorded as failed).
    `strategy`: "evolutionary" (cost-model guided) or any registered strategy name.
    `jobs`: compile processes (default 2 on the CPU, one per core for CUDA).
    Attention (scores, an optional mask, a softmax over the keys and the weighted sum, as
    `te.workloads.attention_stages` builds it) becomes one fused C kernel on the CPU
    (`autoschedule.attention`), returned as an `AttentionKernel`, its block sizes searched.
    `target="cuda"` hands the graph to the GPU auto-scheduler (`backends.triton`), with
    `strategy`, `jobs`, `timer`, `confirm` (> 1: re-time finalists) and `gpu_options` passed on.
    `executor="ray"`: candidates are compiled and measured on a Ray cluster's nodes of the
    target (this CPU, or this GPU: one actor per GPU; `ray_address`, docs/distributed.md);
    the finalists are re-timed here.
    """
    if target in GPU_TARGETS:
        if args is not None or name is not None or retry_failed:
            raise TEError("args=, name= and retry_failed= apply to target='cpu' only")
        from ..extras import needs_extra
        with needs_extra(f"te.autoschedule(target={target!r})", extra="triton"):
            import torch  # noqa: F401  (both are needed; say so before any work)
            import triton  # noqa: F401
            from ..backends.triton import autoschedule_cuda
        return autoschedule_cuda(outputs_or_function, budget=64 if budget is None else budget, db=db, seed=seed,
                                 strategy=strategy, jobs=jobs, timer=timer, confirm=confirm > 1, retune=retune,
                                 progress=_progress(progress), executor=executor, ray_address=ray_address,
                                 **gpu_options)
    if gpu_options:
        raise TEError(f"unknown option(s) {sorted(gpu_options)} for target {target!r}")
    _check_target(target)
    from .attention import autoschedule_attention, fused_attention_problem
    fused = fused_attention_problem(outputs_or_function, args, name)
    if fused is not None:  # attention: one fused kernel, its block sizes searched
        return autoschedule_attention(fused, _open_db(db), budget, seed=seed, jobs=2 if jobs is None else jobs,
                                      retune=retune or retry_failed, confirm=confirm, confirm_rounds=confirm_rounds,
                                      progress=_progress(progress), timer=timer)
    problem = Problem.of(outputs_or_function, args, name)
    database = _open_db(db)
    tgt = Target.cpu()
    if not (retune or retry_failed):
        kernel = rebuild_recorded(problem, database, tgt, 0, 0.0, True)
        if kernel is not None:
            return kernel
    limit = Budget.of(budget, default_trials=64)
    runs_on = make_executor(executor, ray_address)
    try:
        session = _Session(problem, database, tgt, strategy, seed, 2 if jobs is None else jobs, _progress(progress),
                           timer, limit.trials, retry_failed, runs_on)
        session.run(limit)
    finally:
        if executor is None or isinstance(executor, str):
            runs_on.close()
    return session.finish(confirm, confirm_rounds)


def _progress(progress: bool | None) -> bool:
    if progress is not None:
        return progress
    from ..settings import Settings
    return Settings.from_env().progress


@dataclass(frozen=True)
class ScheduledMany:
    """The kernels of `autoschedule_many`, in order, and how the budget was shared."""

    kernels: tuple[ScheduledKernel, ...]
    allocation: ScheduleResult | None

    def __iter__(self):
        return iter(self.kernels)

    def __len__(self) -> int:
        return len(self.kernels)

    def __getitem__(self, k: int) -> ScheduledKernel:
        return self.kernels[k]


def autoschedule_many(problems: Sequence[Any], weights: Sequence[float] | None = None,
                      budget: Budget | int | float | None = None,
                      db: Database | str | os.PathLike[str] | None = None, *, target: str = "cpu",
                      policy: str = "gradient", trials_per_round: int = 16, seed: int = 0, jobs: int = 2,
                      retune: bool = False, confirm: int = 4, confirm_rounds: int = 5,
                      timer: Timer | None = None, executor: str | Executor | None = None,
                      ray_address: str | None = None) -> ScheduledMany:
    """Auto-schedule several computations under one budget (trials in total), shared by the
    task scheduler (`policy` "gradient" or "round-robin") to minimise the weighted sum of
    their latencies (`weights`: how often each runs; default 1). `executor="ray"`: every
    round's candidates are built and measured on a Ray cluster's nodes of this CPU, one
    executor (and one set of measuring actors) shared by all the tasks; when one round
    holds fewer candidates than the cluster measures at once, several tasks' rounds run
    at once (`tasks.concurrent_rounds`)."""
    _check_target(target)
    if not problems:
        raise ValueError("autoschedule_many needs at least one computation")
    weights = list(weights) if weights is not None else [1.0] * len(problems)
    if len(weights) != len(problems):
        raise ValueError(f"{len(weights)} weights for {len(problems)} computations")
    parsed = [Problem.of(p) for p in problems]
    names = [p.name for p in parsed]
    if len(set(names)) != len(names):
        parsed = [Problem.of(p, name=f"{q.name}#{k}") for k, (p, q) in enumerate(zip(problems, parsed))]
    database = _open_db(db)
    tgt = Target.cpu()
    results: dict[int, ScheduledKernel] = {}
    sessions: dict[int, _Session] = {}
    runs_on = make_executor(executor, ray_address)
    try:
        allocation = _schedule_many(parsed, weights, budget, database, tgt, policy, trials_per_round, seed, jobs,
                                    retune, timer, runs_on, results, sessions)
    finally:
        if executor is None or isinstance(executor, str):
            runs_on.close()
    for k, s in sessions.items():
        results[k] = s.finish(confirm, confirm_rounds)
    return ScheduledMany(tuple(results[k] for k in range(len(parsed))), allocation)


def _schedule_many(parsed: list[Problem], weights: list[float], budget: Budget | int | float | None,
                   database: Database, tgt: Target, policy: str, trials_per_round: int, seed: int, jobs: int,
                   retune: bool, timer: Timer | None, runs_on: Executor, results: dict[int, ScheduledKernel],
                   sessions: dict[int, _Session]) -> ScheduleResult | None:
    """The searches of `autoschedule_many`, under the task scheduler."""
    for k, p in enumerate(parsed):
        kernel = None if retune else rebuild_recorded(p, database, tgt, 0, 0.0, True)
        if kernel is not None:
            results[k] = kernel
        else:
            # one progress bar per round would be noise: the scheduler's rounds are the progress
            sessions[k] = _Session(p, database, tgt, "evolutionary", seed + k, jobs, False, timer, executor=runs_on)
    allocation = None
    if sessions:
        tasks = [Task(parsed[k].name, sessions[k].tune, weight=weights[k], flops=parsed[k].flops,
                      group=_group(parsed[k])) for k in sessions]
        shared = Budget.of(budget, default_trials=64 * len(sessions))
        if shared.trials is not None:
            if shared.trials < len(sessions):
                raise ValueError(f"a budget of {shared.trials} trials cannot measure each of the "
                                 f"{len(sessions)} computations to tune once")
            # the warm-up gives every task one round: a round must not take another task's share
            trials_per_round = min(trials_per_round, shared.trials // len(sessions))
        at_once = 1 if runs_on.name == "local" else \
            concurrent_rounds(runs_on.parallelism(None, tgt), trials_per_round, len(tasks))
        allocation = TaskScheduler(tasks, budget=shared, policy=policy, trials_per_round=trials_per_round,
                                   seed=seed, concurrency=at_once).run()
    return allocation


def _group(p: Problem) -> str:
    """Similar tasks (same operator, other shapes) share a tag: the expression with shapes removed."""
    import re
    text = re.sub(r"\d+", "#", graph_text(p.outputs))
    return hashlib.sha256(text.encode()).hexdigest()[:12]
