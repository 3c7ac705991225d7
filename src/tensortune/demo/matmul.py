"""The main job: tune the C matmul template on this CPU, with numpy measured beside it.

Example:
    >>> space = matmul_space(threads=2)
    >>> space.is_valid(default_config(threads=2))
    True
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

import numpy as np

from ..backends import ArrayArg, CBuilder, CProblem, CRunner, ScalarArg
from ..backends.c_kernel import run_c_candidate
from ..db import Database, Target, Workload
from ..measure import CandidateError, ErrorKind, Executor, MeasureResult, Timer
from ..space import Boolean, Categorical, Config, Ordinal, Space
from ..tuner import Budget, Tuner


def matmul_source() -> str:
    return files("tensortune.demo").joinpath("matmul.c").read_text()


def matmul_space(threads: int | None = None) -> Space:
    threads = threads or os.cpu_count() or 1
    return Space(
        [
            Ordinal("TILE_M", [4, 8, 16, 32, 64]),
            Ordinal("TILE_N", [32, 64, 128, 256]),
            Ordinal("TILE_K", [32, 64, 128, 256, 512]),
            Categorical("ORDER", [0, 1]),
            Boolean("PACK_B"),
            Ordinal("UNROLL", [1, 2, 4, 8]),
            Ordinal("THREADS", sorted({1, threads})),
        ],
        constraints=["TILE_M * TILE_N <= 8192", "TILE_K * TILE_N <= 65536"],
    )


def default_config(threads: int | None = None) -> Config:
    """What one would write without tuning: 32-cubed tiles, every core."""
    return Config(TILE_M=32, TILE_N=32, TILE_K=32, ORDER=0, PACK_B=False, UNROLL=1,
                  THREADS=threads or os.cpu_count() or 1)


def matmul_reference(A: np.ndarray, B: np.ndarray, C: np.ndarray) -> dict[str, np.ndarray]:
    return {"C": A @ B}


def matmul_problem(m: int, n: int, k: int) -> CProblem:
    return CProblem(
        matmul_source(), "matmul",
        (ArrayArg("A", (m, k)), ArrayArg("B", (k, n)), ArrayArg("C", (m, n), role="out"),
         ScalarArg("M", m), ScalarArg("N", n), ScalarArg("K", k)),
        reference=matmul_reference, rtol=1e-3, atol=1e-4,
    )


@dataclass(frozen=True)
class DemoReport:
    best_config: dict[str, Any]
    best_gflops: float
    baseline_gflops: float
    numpy_gflops: float
    trials: int
    failures: int
    seconds: float
    from_db: bool
    db: str
    workload: str
    shape: tuple[int, int, int]
    strategy: str
    search_best_gflops: float = 0.0  # the fastest candidate's median while searching (as `db list` shows it)
    rounds: int = 0  # interleaved rounds of the re-timing that gives best, baseline and numpy GFLOP/s

    @property
    def speedup(self) -> float:
        return self.best_gflops / self.baseline_gflops if self.baseline_gflops else float("nan")


def _gflops(m: int, n: int, k: int, seconds: float) -> float:
    return 2.0 * m * n * k / seconds / 1e9 if seconds and np.isfinite(seconds) else 0.0


def numpy_matmul_times(m: int, n: int, k: int, timer: Timer) -> tuple[float, ...]:
    """numpy's (OpenBLAS's) float32 matmul on the same shape; runs in the same worker."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    return timer.time(lambda: np.matmul(a, b))


def numpy_workload(m: int, n: int, k: int) -> Workload:
    return Workload.make("numpy.matmul", np.__version__, {"M": m, "N": n, "K": k, "dtype": "float32"})


def run_demo(db: Database, m: int = 512, n: int = 512, k: int = 512, budget: Budget | None = None,
             strategy: str = "auto", seed: int | None = None, retune: bool = False,
             progress: bool = True, jobs: int | None = None, rounds: int = 5,
             retry_failed: bool = False, executor: str | Executor | None = None,
             ray_address: str | None = None) -> DemoReport:
    """Tune (or answer from the database) and compare with the default and numpy.

    The final figures come from re-timing the best, the default and numpy interleaved,
    `rounds` times each in the same worker process, so that load from other processes
    hits all three alike; those timings are recorded with strategy "compare".
    Every configuration read from the database is checked against the template's space
    before it is built: a record of anything else (an imported file, a damaged row) is
    never compiled. `retry_failed`: measure again the candidates recorded as failed.
    `executor="ray"` builds and measures the search's candidates on a Ray cluster's nodes
    of this CPU (`ray_address`); the final comparison is timed here.
    """
    start = time.perf_counter()
    budget = budget or Budget(seconds=60)
    problem = matmul_problem(m, n, k)
    workload = Workload.make("demo.matmul_c", problem.source, {"M": m, "N": n, "K": k, "dtype": "float32"})
    target = Target.cpu()
    timer = Timer(warmup_seconds=0.02, min_repeats=5, budget_seconds=0.15)
    space = matmul_space()
    baseline_cfg = default_config()
    previous = _recorded_comparison(db, workload, target, space) if not (retune or retry_failed) else None
    if previous is not None:
        best, baseline, numpy_result, trials, failures = previous
        return _report(best, baseline, numpy_result, trials, failures, start, True, db, workload,
                       (m, n, k), strategy, _search_best(db, workload, target), rounds)
    runner = CRunner(problem, timer)
    builder = CBuilder(problem, jobs=jobs)
    try:
        tuner = Tuner(space, runner, builder=builder, workload=workload, target=target, db=db,
                      strategy=strategy, budget=budget, seed=seed, progress=progress,
                      description=f"matmul {m}x{n}x{k}", retune=retune, retry_failed=retry_failed,
                      executor=executor, ray_address=ray_address)
        if retune or baseline_cfg.digest not in db.measured_configs(workload, target):
            for measured in runner.run(builder.build([baseline_cfg])):
                db.add(workload, target, measured, strategy="baseline")
        result = tuner.run()
        finalists = [r.config for r in db.top_k(workload, target, 16)
                     if r.config != baseline_cfg and _in_space(space, r.config)][:4]
        *contenders, baseline, numpy_result = _compare(db, workload, target, problem, builder, runner,
                                                       finalists + [baseline_cfg], timer, rounds)
        best = min(contenders + [baseline], key=lambda r: r.time)
    finally:
        runner.close()
        builder.close()
    return _report(best, baseline, numpy_result, result.trials + result.reused, result.failures, start,
                   False, db, workload, (m, n, k), strategy, _search_best(db, workload, target), rounds)


def _in_space(space: Space, config: Config) -> bool:
    try:
        return space.is_valid(config)
    except Exception:  # noqa: BLE001 - a value the space cannot even compare is not in it
        return False


def _compare(db: Database, workload: Workload, target: Target, problem: CProblem, builder: CBuilder,
             runner: CRunner, configs: list[Config], timer: Timer, rounds: int) -> list[MeasureResult]:
    """Re-time `configs` (the last is the baseline) and numpy interleaved; record them.

    A finalist that fails now (it crashes, hangs or is wrong on these inputs) is recorded
    as failed, which takes it out of the ranking, and dropped from the comparison; the
    baseline failing is an error."""
    builds = [b for b in builder.build(configs)]  # cached libraries: no compilation
    m, n, k = (a.value for a in problem.args[3:6])
    times: dict[Config, list[float]] = {c: [] for c in configs}
    numpy_times: list[float] = []
    for r in range(rounds):
        for b in list(builds):
            try:
                if not b.ok:
                    raise CandidateError(b.error or ErrorKind.COMPILE_ERROR, b.message)
                times[b.config].extend(runner.worker.call(run_c_candidate, b.artifact, problem, timer, 7000 + r))
            except CandidateError as exc:
                if b.config == configs[-1]:
                    raise
                db.add(workload, target, MeasureResult.failed(b.config, exc.kind, f"on re-timing: {exc}",
                                                              exc.environment), strategy="compare")
                builds.remove(b)
                del times[b.config]
        numpy_times.extend(runner.worker.call(numpy_matmul_times, m, n, k, timer))
    results = [MeasureResult(c, tuple(t)) for c, t in times.items()]
    fastest = min(results, key=lambda r: r.time)
    for res in results:
        role = "best" if res is fastest else "baseline" if res.config == configs[-1] else "finalist"
        db.add(workload, target, MeasureResult(res.config, res.times, extra={"role": role}), strategy="compare")
    numpy_result = MeasureResult(Config(), tuple(numpy_times))
    db.add(numpy_workload(m, n, k), target, numpy_result, strategy="compare")
    return results + [numpy_result]


def _recorded_comparison(db: Database, workload: Workload, target: Target, space: Space):
    """The last comparison recorded, if its configurations are the template's own."""
    if db.finished_sessions(workload, target) == 0:
        return None
    records = db.records(workload, target)
    compared = {r.extra.get("role"): r.to_result() for r in records
                if r.strategy == "compare" and r.ok and _in_space(space, r.config)}
    compared.setdefault("baseline", compared.get("best"))  # when the default itself won
    m, n, k = (workload.key[x] for x in "MNK")
    numpy_records = [r for r in db.records(numpy_workload(m, n, k), target) if r.strategy == "compare"]
    if "best" not in compared or "baseline" not in compared or not numpy_records:
        return None
    tuned = [r for r in records if r.strategy not in ("compare",)]
    return (compared["best"], compared["baseline"], numpy_records[-1].to_result(),
            len({r.config for r in tuned}), sum(1 for r in tuned if not r.ok))


def _search_best(db: Database, workload: Workload, target: Target) -> float:
    """The fastest median recorded while searching (not by the re-timing), in seconds."""
    times = [r.time for r in db.records(workload, target) if r.ok and r.strategy != "compare"]
    return min(times, default=math.inf)


def _report(best: MeasureResult, baseline: MeasureResult, numpy_result: MeasureResult, trials: int,
            failures: int, start: float, from_db: bool, db: Database, workload: Workload,
            shape: tuple[int, int, int], strategy: str, search_best: float, rounds: int) -> DemoReport:
    m, n, k = shape
    return DemoReport(
        best_config=best.config.as_dict(), best_gflops=_gflops(m, n, k, best.time),
        baseline_gflops=_gflops(m, n, k, baseline.time), numpy_gflops=_gflops(m, n, k, numpy_result.time),
        trials=trials, failures=failures, seconds=time.perf_counter() - start, from_db=from_db,
        db=db.where, workload=workload.id_text, shape=shape, strategy=strategy,
        search_best_gflops=_gflops(m, n, k, search_best), rounds=rounds,
    )
