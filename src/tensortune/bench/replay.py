"""Replaying strategies on measured spaces and scoring how close they get to the optimum.

One run is a fresh strategy at one budget, driven by the real `Tuner` loop with a
replay runner: the score is t_opt / t_best_found (1.0 = found the optimum). Runs go to
worker processes in parallel; each worker loads a dataset once.

Example:
    >>> run = replay_run("../shared/datasets/kernel_tuner/pnpoly-RTX_3090.json.gz", "random", 20, seed=0)
    >>> run.trials, 0 < run.score <= 1
    (20, True)
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from ..datasets import ReplayDataset, load_kernel_tuner_cache


@dataclass(frozen=True)
class RunResult:
    """One replayed tuning run."""

    dataset: str
    strategy: str
    budget: int
    seed: int
    score: float
    trials: int
    failures: int
    simulated_seconds: float
    wall_seconds: float


@lru_cache(maxsize=8)
def cached_dataset(path: str) -> ReplayDataset:
    """A replayed space, read once per process (forked workers inherit what the parent read)."""
    return load_kernel_tuner_cache(path)


def replay_run(path: str | os.PathLike[str], strategy: str, budget: int, seed: int,
               batch_size: int = 1, options: dict[str, Any] | None = None) -> RunResult:
    """Tune a replayed dataset with a fresh strategy for `budget` measurements."""
    from ..db import Target, Workload
    from ..tuner import Tuner

    ds = cached_dataset(str(path))
    runner = ds.runner()
    start = time.perf_counter()
    result = Tuner(ds.space, runner, workload=Workload.make(ds.name), target=Target.make("replay", ds.device),
                   db=None, strategy=strategy, strategy_options=options, budget=budget, seed=seed,
                   batch_size=batch_size, progress=False).run()
    wall = time.perf_counter() - start
    return RunResult(ds.name, strategy, budget, seed, ds.score(result.best_time), result.trials,
                     result.failures, runner.simulated_seconds, wall)


@dataclass(frozen=True)
class ReplayTask:
    """One run to make: a fresh `strategy` (or peer) on the dataset at `path`."""

    path: str
    strategy: str
    budget: int
    seed: int
    batch_size: int = 1
    options: dict[str, Any] | None = None


def _run_task(task: ReplayTask) -> RunResult:
    from .peers import is_peer, peer_run

    if is_peer(task.strategy):
        return peer_run(task.path, task.strategy, task.budget, task.seed)
    return replay_run(task.path, task.strategy, task.budget, task.seed, task.batch_size, task.options)


def run_many(paths: Sequence[str], strategies: Sequence[str], budgets: Sequence[int],
             repeats: int | dict[str, int], jobs: int = 1, batch_size: int = 1,
             on_result: Any = None, first_seed: int = 0,
             options: dict[str, dict[str, Any]] | None = None) -> list[RunResult]:
    """Every (dataset, strategy, budget, repeat) run, in `jobs` processes. A strategy may
    also be a peer tuner (`kt:genetic_algorithm`, `optuna:tpe`: `tensortune.bench.peers`).

    `repeats` may differ per strategy (a dict, strategy -> repeats); repeat i runs with
    seed `first_seed + i` (another `first_seed` checks that a figure holds beyond the
    seeds it was first measured on). `options` (strategy -> keyword arguments) configures
    a strategy, e.g. {"evolutionary": {"explore_switches": True}}."""
    tasks = []
    for path in paths:
        for strategy in strategies:
            reps = repeats[strategy] if isinstance(repeats, dict) else repeats
            for budget in budgets:
                for seed in range(first_seed, first_seed + reps):
                    tasks.append(ReplayTask(str(path), strategy, int(budget), seed, batch_size,
                                            (options or {}).get(strategy)))
    return run_tasks(tasks, jobs, on_result)


def run_tasks(tasks: Sequence[ReplayTask], jobs: int = 1, on_result: Any = None) -> list[RunResult]:
    """The runs of `tasks`, in `jobs` processes, longest budgets first (that keeps the
    workers busy to the end); `on_result` sees each run as it finishes."""
    ordered = sorted(tasks, key=lambda t: -t.budget)
    results: list[RunResult] = []
    if jobs <= 1:
        for t in ordered:
            results.append(_run_task(t))
            if on_result:
                on_result(results[-1])
        return results
    import multiprocessing

    ctx = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
        for r in pool.map(_run_task, ordered, chunksize=1):
            results.append(r)
            if on_result:
                on_result(r)
    return results


def summarize(results: Iterable[RunResult]) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    """dataset -> strategy -> budget -> {mean, se, p10, runs, ...} of scores; `se` is the
    standard error of the mean (0 for a single run), to tell a difference from seed noise."""
    groups: dict[tuple[str, str, int], list[RunResult]] = {}
    for r in results:
        groups.setdefault((r.dataset, r.strategy, r.budget), []).append(r)
    out: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for (ds, st, b), runs in sorted(groups.items()):
        scores = np.asarray([r.score for r in runs])
        out.setdefault(ds, {}).setdefault(st, {})[str(b)] = {
            "mean": round(float(scores.mean()), 4),
            "se": round(float(scores.std(ddof=1) / np.sqrt(len(scores))), 4) if len(scores) > 1 else 0.0,
            "p10": round(float(np.percentile(scores, 10)), 4),
            "runs": len(runs),
            "simulated_hours": round(float(np.mean([r.simulated_seconds for r in runs])) / 3600, 4),
            "wall_seconds": round(float(np.mean([r.wall_seconds for r in runs])), 4),
        }
    return out


def mean_over_datasets(summary: dict[str, Any]) -> dict[str, dict[str, float]]:
    """strategy -> budget -> mean score over the datasets that ran it."""
    acc: dict[str, dict[str, list[float]]] = {}
    for per_strategy in summary.values():
        for st, per_budget in per_strategy.items():
            for b, stats in per_budget.items():
                acc.setdefault(st, {}).setdefault(b, []).append(stats["mean"])
    return {st: {b: round(float(np.mean(v)), 4) for b, v in sorted(pb.items(), key=lambda kv: int(kv[0]))}
            for st, pb in acc.items()}
