"""A bandit over strategies (OpenTuner's AUC bandit) against the default, on measured spaces.

Replays `auto`, `bandit` with its default arms (evolutionary + local), other sets of
arms, and random search, on the six Kernel Tuner spaces of ../shared/datasets and the
measured spaces of docs/benchmarks/spaces (or the folders given), at 20, 50, 100 and 200
measurements, 20 seeds each, all in one run; prints the mean score over each group of
spaces and, per space, each strategy's difference to `auto` on the same seeds, and writes
dataset -> strategy -> budget -> {mean, se, p10, ...} as JSON.

Usage (from the repository root):
    .venv/bin/python benchmarks/bandit.py [--jobs 2] [--json docs/benchmarks/strategies_bandit.json]
    .venv/bin/python benchmarks/bandit.py --arm-sets screened_tpe+evolutionary --budgets 100 \
        --repeats 100 --spaces docs/benchmarks/spaces docs/benchmarks/spaces_held_out --json OUT
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time
from collections import defaultdict

import numpy as np

from tensortune.bench.replay import RunResult, run_many, summarize
from tensortune.search.bandit import DEFAULT_ARMS
from tensortune.search.base import register_strategy

ARM_SETS = {  # name in the table -> arms
    "bandit[evolutionary+model_based]": ("evolutionary", "model_based"),
    "bandit[evolutionary+local+genetic]": ("evolutionary", "local", "genetic"),
    "bandit[all five]": ("evolutionary", "model_based", "local", "genetic", "annealing"),
    "bandit[screened_tpe+evolutionary]": ("screened_tpe", "evolutionary"),  # the default's two searches
}


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default=os.path.join(here, "..", "..", "shared", "datasets", "kernel_tuner"))
    parser.add_argument("--spaces", nargs="*", default=[os.path.join(here, "..", "docs", "benchmarks", "spaces")],
                        help="folders of measured spaces, each a group of its own")
    parser.add_argument("--arm-sets", default=",".join(ARM_SETS),
                        help=f"which bandits to run, of {', '.join(ARM_SETS)} (names without 'bandit[' and ']' "
                             "will do); the bandit with its default arms runs too when all of them are chosen")
    parser.add_argument("--budgets", default="20,50,100,200")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json", default=os.path.join(here, "..", "docs", "benchmarks", "strategies_bandit.json"))
    args = parser.parse_args()
    budgets = [int(b) for b in args.budgets.split(",")]
    sets = [n if n in ARM_SETS else f"bandit[{n}]" for n in args.arm_sets.split(",") if n]
    if unknown := [n for n in sets if n not in ARM_SETS]:
        sys.exit(f"unknown arm sets {unknown}; known: {', '.join(ARM_SETS)}")
    groups = {"six Kernel Tuner spaces": sorted(glob.glob(os.path.join(args.datasets, "*-*.json.gz")))}
    if not groups["six Kernel Tuner spaces"]:
        sys.exit(f"no Kernel Tuner caches at {args.datasets}")
    for folder in args.spaces:
        found = sorted(glob.glob(os.path.join(folder, "*.json.gz")))
        groups[f"{len(found)} spaces of {os.path.relpath(folder)}"] = found
    for name in sets:  # forked workers inherit the registry
        register_strategy(name, "bandit", arms=ARM_SETS[name])
    strategies = ["auto", *(["bandit"] if len(sets) == len(ARM_SETS) else []), *sets, "random"]
    paths = [p for found in groups.values() for p in found]
    start = time.perf_counter()
    total = len(paths) * len(strategies) * len(budgets) * args.repeats
    done = [0]

    def progress(_run: object) -> None:
        done[0] += 1
        if done[0] % 300 == 0 or done[0] == total:
            print(f"  {done[0]}/{total} runs, {time.perf_counter() - start:.0f} s", flush=True)

    results = run_many(paths, strategies, budgets, args.repeats, jobs=args.jobs, on_result=progress,
                       first_seed=args.first_seed)
    wall = time.perf_counter() - start
    summary = summarize(results)
    paired = paired_with_auto(results)
    means: dict[str, dict[str, dict[str, float]]] = {}
    print(f"{len(results)} runs, {args.repeats} seeds each from {args.first_seed}, {wall:.0f} s wall with "
          f"{args.jobs} jobs")
    for group, found in groups.items():
        names = [_name(p) for p in found]
        if not names:
            continue
        print(f"\nmean score over the {group}".ljust(60) + "  " + "".join(f"N={b:<7}" for b in budgets) + "search s/run")
        means[group] = {}
        for s in strategies:
            row = {str(b): sum(summary[n][s][str(b)]["mean"] for n in names) / len(names) for b in budgets}
            wall_run = sum(summary[n][s][str(budgets[-1])]["wall_seconds"] for n in names) / len(names)
            means[group][s] = {**row, f"wall_seconds_at_{budgets[-1]}": wall_run}
            print(f"  {s:56s}" + "".join(f"{row[str(b)]:<9.3f}" for b in budgets) + f"{wall_run:.3f}")
    print("\nper space, mean and (difference to auto on the same seeds +- its standard error), N=" +
          "/".join(map(str, budgets)))
    for name in sorted(paired):
        for s in strategies[1:]:
            print(f"  {name:36s} {s:36s} " + "  ".join(
                f"{summary[name][s][str(b)]['mean']:.3f} ({paired[name][s][str(b)]['mean_difference']:+.3f}"
                f"+-{paired[name][s][str(b)]['se']:.3f})" for b in budgets))
    with open(args.json, "w") as f:
        json.dump({"command": "benchmarks/bandit.py " + " ".join(sys.argv[1:]), "repeats": args.repeats,
                   "first_seed": args.first_seed, "budgets": budgets,
                   "arm_sets": {**({"bandit": list(DEFAULT_ARMS)} if "bandit" in strategies else {}),
                                **{k: list(ARM_SETS[k]) for k in sets}},
                   "wall_seconds": wall, "group_means": means, "paired_with_auto": paired,
                   "datasets": summary}, f, indent=1)
    print(f"wrote {args.json}")


def paired_with_auto(results: list[RunResult]) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    """dataset -> strategy -> budget -> the mean and standard error of (score - auto's score)
    over the seeds both ran."""
    scores: dict[tuple[str, str, int], dict[int, float]] = defaultdict(dict)
    for r in results:
        scores[(r.dataset, r.strategy, r.budget)][r.seed] = r.score
    out: dict[str, dict[str, dict[str, dict[str, float]]]] = defaultdict(lambda: defaultdict(dict))
    for (dataset, strategy, budget), by_seed in scores.items():
        auto = scores.get((dataset, "auto", budget), {})
        diffs = [by_seed[s] - auto[s] for s in by_seed if s in auto]
        if strategy == "auto" or len(diffs) < 2:
            continue
        d = np.asarray(diffs)
        out[dataset][strategy][str(budget)] = {"mean_difference": float(d.mean()),
                                               "se": float(d.std(ddof=1) / np.sqrt(len(d))), "runs": len(d)}
    return {d: dict(v) for d, v in out.items()}


def _name(path: str) -> str:
    return os.path.basename(path).split(".json")[0]


if __name__ == "__main__":
    main()
