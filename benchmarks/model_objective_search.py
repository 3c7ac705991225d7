"""The cost model's objective inside the search: ranking against regression.

Replays the default strategy (`auto`) on the six Kernel Tuner spaces of
../shared/datasets at one budget, once with the pairwise-ranking model (the default) and
once with `XGBParams(objective="regression")` (optionally with deeper trees), every run
a fresh run at that budget, seeds 0..repeats-1. Prints the mean score t_opt / t_best per
dataset and over the six, and writes JSON (dataset -> variant -> mean).

Usage (from the repository root):
    .venv/bin/python benchmarks/model_objective_search.py [--budget 100] [--repeats 20] [--jobs 2]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
from concurrent.futures import ProcessPoolExecutor

from tensortune.bench.replay import replay_run
from tensortune.datasets import dataset_name
from tensortune.model import XGBParams

VARIANTS = {
    "rank (default)": XGBParams(),
    "regression": XGBParams(objective="regression"),
    "regression, depth 7": XGBParams(objective="regression", max_depth=7),
}


def _score(task: tuple[str, str, int, int]) -> float:
    path, variant, budget, seed = task
    return replay_run(path, "auto", budget, seed, options={"model_params": VARIANTS[variant]}).score


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", default=os.path.join(here, "..", "..", "shared", "datasets", "kernel_tuner"))
    p.add_argument("--budget", type=int, default=100)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--json", default=os.path.join(here, "..", "docs", "benchmarks", "model_objective_search.json"))
    args = p.parse_args()
    paths = sorted(glob.glob(os.path.join(args.datasets, "*.json.gz")))
    if not paths:
        raise SystemExit(f"no Kernel Tuner caches (*.json.gz) in {args.datasets}")
    out: dict[str, dict[str, float]] = {}
    with ProcessPoolExecutor(args.jobs) as pool:
        for path in paths:
            name = dataset_name(path)
            for variant in VARIANTS:
                tasks = [(path, variant, args.budget, seed) for seed in range(args.repeats)]
                out.setdefault(name, {})[variant] = round(statistics.mean(pool.map(_score, tasks)), 4)
    out["mean"] = {v: round(statistics.mean(out[d][v] for d in out), 4) for v in VARIANTS}
    print(f"auto at N={args.budget}, {args.repeats} seeds: mean t_opt / t_best")
    print("| dataset | " + " | ".join(VARIANTS) + " |")
    print("| --- |" + " --- |" * len(VARIANTS))
    for name, row in out.items():
        print(f"| {name} | " + " | ".join(f"{row[v]:.3f}" for v in VARIANTS) + " |")
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump({"budget": args.budget, "repeats": args.repeats, "strategy": "auto", "scores": out}, f, indent=2)


if __name__ == "__main__":
    main()
