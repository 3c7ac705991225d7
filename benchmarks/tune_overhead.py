"""The tuning loop's own cost per trial on a cheap callable: paced cost-model refits
(what `tt.tune` does) against a refit after every measurement, with Optuna's TPE beside.

A cheap callable is where the loop's own cost shows: its measurement takes ~20 ms (the
default Timer's repeats), so a cost-model refit of tens of milliseconds after each
trial doubles the run. Each row tunes the same callable over the same 1,280-point space
with the default strategy (`auto`: `evolutionary` below 100 trials, `screened_tpe` from
100) for the same seeds; the loop's cost is the wall time less the time spent measuring
(each result's `run_seconds`; for Optuna, the time inside the objective), per trial.
The model's library is imported before any row is timed.

Usage (from the repository root):
    .venv/bin/python benchmarks/tune_overhead.py [--budgets 50,200,500] [--seeds 3] \
        [--json docs/benchmarks/tune_overhead.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from typing import Any

from tensortune.db import Database, Target, Workload
from tensortune.frontends.callable import PACE_SECONDS, PACE_SHARE
from tensortune.measure import CallableRunner, Timer
from tensortune.space import Space
from tensortune.tuner import Tuner

SPACE = {"a": list(range(16)), "b": list(range(16)), "c": [1, 2, 4, 8, 16]}


def cheap(a: int, b: int, c: int) -> int:
    return sum(range((a * b + c) % 7))


def tensortune_row(budget: int, seed: int, paced: bool) -> dict[str, float]:
    runner = CallableRunner(cheap, Timer())
    tuner = Tuner(Space(SPACE), runner, workload=Workload.make("cheap"), target=Target.make("cpu", "bench"),
                  db=Database(":memory:"), budget=budget, seed=seed, progress=False, transfer=False)
    if paced:
        tuner.strategy.pace_model(PACE_SHARE, PACE_SECONDS)
    start = time.perf_counter()
    result = tuner.run()
    wall = time.perf_counter() - start
    measuring = sum(r.run_seconds for r in result.history)
    return {"trials": result.trials, "wall_s": wall, "loop_ms_per_trial": 1e3 * (wall - measuring) / result.trials}


def optuna_row(budget: int, seed: int) -> dict[str, float]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    timer = Timer()
    measuring = 0.0

    def objective(trial: Any) -> float:
        nonlocal measuring
        config = {k: trial.suggest_categorical(k, v) for k, v in SPACE.items()}
        begin = time.perf_counter()
        times = timer.time(lambda: cheap(**config))
        measuring += time.perf_counter() - begin
        return statistics.median(times)

    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
    start = time.perf_counter()
    study.optimize(objective, n_trials=budget)
    wall = time.perf_counter() - start
    return {"trials": budget, "wall_s": wall, "loop_ms_per_trial": 1e3 * (wall - measuring) / budget}


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", default="50,200,500")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--json", default=os.path.join(here, "..", "docs", "benchmarks", "tune_overhead.json"))
    args = parser.parse_args()
    import xgboost  # noqa: F401 - imported once, outside every timed row

    rows: dict[str, dict[str, list[dict[str, float]]]] = {}
    for budget in (int(b) for b in args.budgets.split(",")):
        for seed in range(args.seeds):
            for name, run in (("tensortune, paced refits", lambda: tensortune_row(budget, seed, True)),
                              ("tensortune, refit every trial", lambda: tensortune_row(budget, seed, False)),
                              ("optuna TPE (peer)", lambda: optuna_row(budget, seed))):
                rows.setdefault(str(budget), {}).setdefault(name, []).append(run())
    print(f"{'budget':>6}  {'run':<32} {'loop ms/trial (median, min-max)':>34}  {'wall s':>8}")
    summary: dict[str, Any] = {}
    for budget, by_name in rows.items():
        for name, runs in by_name.items():
            loop = [r["loop_ms_per_trial"] for r in runs]
            wall = statistics.median(r["wall_s"] for r in runs)
            print(f"{budget:>6}  {name:<32} {statistics.median(loop):>16.2f} ({min(loop):.2f}-{max(loop):.2f}){'':>5}"
                  f"  {wall:>8.2f}")
            summary.setdefault(budget, {})[name] = {"loop_ms_per_trial_median": statistics.median(loop),
                                                    "loop_ms_per_trial": loop, "wall_s_median": wall}
    out = {"machine": f"{platform.processor() or platform.machine()} x{os.cpu_count()}",
           "date": time.strftime("%Y-%m-%d"), "seeds": args.seeds, "space": SPACE, "results": summary}
    with open(args.json, "w") as f:
        json.dump(out, f, indent=2)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
