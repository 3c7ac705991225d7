"""A bandit over strategies (OpenTuner's AUC bandit) against the default, on measured spaces.

Replays `auto`, `bandit` with its default arms (evolutionary + local) and three other
sets of arms, and random search, on the six Kernel Tuner spaces of ../shared/datasets and
the nine H100 spaces of docs/benchmarks/spaces, at 20, 50, 100 and 200 measurements,
20 seeds each, all in one run; prints the mean score over each group of spaces and writes
dataset -> strategy -> budget -> {mean, se, p10, ...} as JSON.

Usage (from the repository root):
    .venv/bin/python benchmarks/bandit.py [--jobs 2] [--json docs/benchmarks/strategies_bandit.json]
"""

from __future__ import annotations

import argparse
import functools
import glob
import json
import os
import sys
import time

from tensortune.bench.replay import run_many, summarize
from tensortune.search.bandit import BanditSearch
from tensortune.search.base import register_strategy

ARM_SETS = {  # name in the table -> arms
    "bandit[evolutionary+model_based]": ("evolutionary", "model_based"),
    "bandit[evolutionary+local+genetic]": ("evolutionary", "local", "genetic"),
    "bandit[all five]": ("evolutionary", "model_based", "local", "genetic", "annealing"),
}
BUDGETS = (20, 50, 100, 200)


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default=os.path.join(here, "..", "..", "shared", "datasets", "kernel_tuner"))
    parser.add_argument("--spaces", default=os.path.join(here, "..", "docs", "benchmarks", "spaces"))
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json", default=os.path.join(here, "..", "docs", "benchmarks", "strategies_bandit.json"))
    args = parser.parse_args()
    kernel_tuner = sorted(glob.glob(os.path.join(args.datasets, "*-*.json.gz")))
    h100 = sorted(glob.glob(os.path.join(args.spaces, "*.json.gz")))
    if not kernel_tuner:
        sys.exit(f"no Kernel Tuner caches at {args.datasets}")
    for name, arms in ARM_SETS.items():
        # forked workers inherit the registry
        register_strategy(name, functools.partial(BanditSearch, arms=arms))  # type: ignore[arg-type]
    strategies = ["auto", "bandit", *ARM_SETS, "random"]
    start = time.perf_counter()
    total = len(kernel_tuner + h100) * len(strategies) * len(BUDGETS) * args.repeats
    done = [0]

    def progress(_run: object) -> None:
        done[0] += 1
        if done[0] % 300 == 0 or done[0] == total:
            print(f"  {done[0]}/{total} runs, {time.perf_counter() - start:.0f} s", flush=True)

    results = run_many(kernel_tuner + h100, strategies, BUDGETS, args.repeats, jobs=args.jobs, on_result=progress)
    wall = time.perf_counter() - start
    summary = summarize(results)
    groups = {"six Kernel Tuner spaces": [_name(p) for p in kernel_tuner], "nine H100 spaces": [_name(p) for p in h100]}
    means: dict[str, dict[str, dict[str, float]]] = {}
    print(f"{len(results)} runs, {args.repeats} seeds each, {wall:.0f} s wall with {args.jobs} jobs")
    for group, names in groups.items():
        if not names:
            continue
        print(f"\nmean score over the {group}        " + "".join(f"N={b:<7}" for b in BUDGETS) + "search s/run at N=100")
        means[group] = {}
        for s in strategies:
            row = {str(b): sum(summary[n][s][str(b)]["mean"] for n in names) / len(names) for b in BUDGETS}
            wall_100 = sum(summary[n][s]["100"]["wall_seconds"] for n in names) / len(names)
            means[group][s] = {**row, "wall_seconds_at_100": wall_100}
            print(f"  {s:36s}" + "".join(f"{row[str(b)]:<9.3f}" for b in BUDGETS) + f"{wall_100:.3f}")
    a100 = "convolution_milo-A100"
    if a100 in summary:
        print(f"\n{a100} at N=100: " + ", ".join(f"{s} {summary[a100][s]['100']['mean']:.3f}" for s in strategies))
    with open(args.json, "w") as f:
        json.dump({"command": "benchmarks/bandit.py", "repeats": args.repeats, "budgets": list(BUDGETS),
                   "arm_sets": {"bandit": ["evolutionary", "local"], **{k: list(v) for k, v in ARM_SETS.items()}},
                   "wall_seconds": wall, "group_means": means, "datasets": summary}, f, indent=1)
    print(f"wrote {args.json}")


def _name(path: str) -> str:
    return os.path.basename(path).split(".json")[0]


if __name__ == "__main__":
    main()
