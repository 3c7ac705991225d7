"""Does tuning on a new GPU start better from another GPU's records? Replayed on real data.

convolution_milo was measured exhaustively on an A100 and on an RTX A4000 (the same
kernel and space, ../shared/datasets/kernel_tuner). For each direction (source ->
target) and seed, a records database first receives what tuning the source GPU would
have left in it: a default-strategy run of `--source-budget` measurements on the source
(the same seed). Then the target GPU is tuned at each budget twice, as fresh `Tuner` runs
with that database: with transfer (the search starts from a model pre-trained on the
source's records, `Tuner(transfer=True)`, the default) and cold (`transfer=False`).
Score = t_opt / t_best_found on the target (1.0 = its optimum).

`--pairs` names other directions: the same space measured on the H100 with our own kernel
(docs/benchmarks/spaces_held_out/cuda_convolution-H100.json.gz, benchmarks/cuda_conv_space.py)
is a third device, and a second implementation, to transfer to.

Usage (from the repository root):
    .venv/bin/python benchmarks/transfer_devices.py [--repeats 20] [--budgets 20,50,100]
        [--source-budget 200] [--json docs/benchmarks/transfer_devices.json] [--datasets DIR]
        [--pairs convolution_milo-A100:cuda_convolution-H100,convolution_milo-A4000:cuda_convolution-H100]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from functools import lru_cache

from tensortune.datasets import load_kernel_tuner_cache
from tensortune.db import Database, Target, Workload
from tensortune.tuner import Tuner

HERE = os.path.dirname(os.path.abspath(__file__))
DATASETS = os.path.join(HERE, "..", "..", "shared", "datasets", "kernel_tuner")
HELD_OUT = os.path.join(HERE, "..", "docs", "benchmarks", "spaces_held_out")
PAIRS = [("convolution_milo-A4000", "convolution_milo-A100"), ("convolution_milo-A100", "convolution_milo-A4000")]
WORKLOAD = Workload.make("convolution_milo")  # one kernel, one space: the devices differ


@lru_cache(maxsize=2)  # each worker process reads each cache once, not once per seed
def _dataset(name: str, datasets: str = DATASETS):
    ours = os.path.join(HELD_OUT, f"{name}.json.gz")
    return load_kernel_tuner_cache(ours if os.path.exists(ours) else os.path.join(datasets, f"{name}.json.gz"))


def one_seed(args: tuple[str, str, int, list[int], int, str]) -> dict:
    """Scores on the target for every budget, with and without transfer, for one seed
    (the last argument: the folder of the Kernel Tuner caches)."""
    source_name, target_name, source_budget, budgets, seed, datasets = args
    source, target = _dataset(source_name, datasets), _dataset(target_name, datasets)
    db = Database(":memory:")
    Tuner(source.space, source.runner(), workload=WORKLOAD, target=Target.make("replay", source.device),
          db=db, budget=source_budget, seed=seed, progress=False).run()
    source_records = list(db.all_records())
    scores: dict = {}
    for budget in budgets:
        for transfer in (True, False):
            # the target's own records are kept apart per run: a fresh database holding only the source's
            run_db = Database(":memory:")
            run_db.import_records(source_records)
            tuner = Tuner(target.space, target.runner(), workload=WORKLOAD,
                          target=Target.make("replay", target.device), db=run_db, budget=budget, seed=seed,
                          progress=False, transfer=transfer)
            result = tuner.run()
            scores[(budget, transfer)] = (target.score(result.best_time), tuner.transferred_from)
    return {"seed": seed, "scores": scores}


def _budgets(text: str) -> list[int]:
    try:
        budgets = [int(b) for b in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"budgets must be comma-separated whole numbers, got {text!r}") from None
    if not budgets or min(budgets) < 1:
        raise argparse.ArgumentTypeError(f"budgets must be at least 1, got {text!r}")
    return budgets


def _pairs(text: str) -> list[tuple[str, str]]:
    pairs = [tuple(p.split(":")) for p in text.split(",")]
    if not all(len(p) == 2 and all(p) for p in pairs):
        raise argparse.ArgumentTypeError(f"pairs must be SOURCE:TARGET,..., got {text!r}")
    return pairs  # type: ignore[return-value]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--budgets", default="20,50,100", type=_budgets, help="comma-separated measurement budgets")
    p.add_argument("--source-budget", type=int, default=200)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--json", default=None)
    p.add_argument("--pairs", default=PAIRS, type=_pairs, help="SOURCE:TARGET dataset names, comma-separated")
    p.add_argument("--datasets", default=DATASETS, help="folder of the Kernel Tuner caches")
    opts = p.parse_args()
    if not os.path.isdir(opts.datasets):
        sys.exit(f"no datasets at {opts.datasets}")
    budgets = opts.budgets
    start = time.perf_counter()
    out: dict = {}
    with ProcessPoolExecutor(opts.jobs) as pool:
        for source_name, target_name in opts.pairs:
            tasks = [(source_name, target_name, opts.source_budget, budgets, s, opts.datasets)
                     for s in range(opts.repeats)]
            runs = list(pool.map(one_seed, tasks))
            row = {}
            for budget in budgets:
                for transfer in (True, False):
                    ss = [r["scores"][(budget, transfer)][0] for r in runs]
                    row[f"{budget}/{'transfer' if transfer else 'cold'}"] = {
                        "mean": round(statistics.mean(ss), 4), "min": round(min(ss), 4),
                        "at_least_0.9": sum(x >= 0.9 for x in ss)}
            row["transferred_from_records"] = runs[0]["scores"][(budgets[0], True)][1]
            out[f"{source_name} -> {target_name}"] = row
    print(f"{'direction':48s} {'budget':>6s} {'cold':>14s} {'transfer':>14s}")
    for direction, row in out.items():
        for budget in budgets:
            cold, warm = row[f"{budget}/cold"], row[f"{budget}/transfer"]
            print(f"{direction:48s} {budget:6d} {cold['mean']:8.3f} ({cold['at_least_0.9']:2d}) "
                  f"{warm['mean']:8.3f} ({warm['at_least_0.9']:2d})")
    print(f"mean over {opts.repeats} seeds, (runs >= 0.90); {time.perf_counter() - start:.0f} s")
    if opts.json:
        with open(opts.json, "w", encoding="utf-8") as f:
            json.dump({"source_budget": opts.source_budget, "repeats": opts.repeats, "budgets": budgets,
                       "results": out, "wall_seconds": round(time.perf_counter() - start, 1)}, f, indent=2)


if __name__ == "__main__":
    main()
