"""A tuner run again round after round (as a task scheduler runs each kernel's tuner): its
strategy told only what it has not heard ("new", what `Tuner` does) against told every
record of the store again at each round ("old"), on replayed, exhaustively measured
spaces. Reported: the mean score (the optimum's time over the best found) after all
rounds, per dataset, and how many seeds each variant won.

Usage (datasets from ../shared/datasets/kernel_tuner, or --datasets):
    python benchmarks/tuner_rounds.py gemm-RTX_3090.json.gz,pnpoly-RTX_3090.json.gz --seeds 40 --rounds 8 \
        --per-round 8 --strategy evolutionary --json OUT.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor

from tensortune.bench.replay import cached_dataset
from tensortune.db import Database, Target, Workload
from tensortune.tuner import Budget, Tuner

HERE = os.path.dirname(os.path.abspath(__file__))
DATASETS = os.path.join(HERE, "..", "..", "shared", "datasets", "kernel_tuner")


def one_run(task: tuple) -> tuple[str, int, str, float]:
    """(dataset, seed, variant, score) of one tuner run `rounds` times, `per_round` trials each."""
    path, seed, variant, rounds, per_round, strategy = task
    ds = cached_dataset(path)
    tuner = Tuner(ds.space, ds.runner(), workload=Workload.make(ds.name), target=Target.make("replay", ds.device),
                  db=Database(":memory:"), strategy=strategy, budget=per_round, seed=seed, progress=False)
    best = float("inf")
    for _ in range(rounds):
        if variant == "old":
            tuner._heard.clear()  # as before: every record told again
        tuner.budget = Budget(trials=per_round)
        result = tuner.run()
        if result.best is not None:
            best = min(best, result.best.time)
    return os.path.basename(path), seed, variant, ds.score(best)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", help="dataset files, comma-separated")
    parser.add_argument("--datasets", default=DATASETS, help="the folder holding them")
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--per-round", type=int, default=8)
    parser.add_argument("--strategy", default="evolutionary")
    parser.add_argument("--json", required=True, help="write the results here")
    args = parser.parse_args()
    names = args.names.split(",")
    missing = [n for n in names if not os.path.isfile(os.path.join(args.datasets, n))]
    if missing:
        parser.error(f"no dataset {', '.join(missing)} in {args.datasets}")
    if min(args.seeds, args.rounds, args.per_round) < 1:
        parser.error("--seeds, --rounds and --per-round must be at least 1")
    tasks = [(os.path.join(args.datasets, n), s, v, args.rounds, args.per_round, args.strategy)
             for n in names for s in range(args.seeds) for v in ("old", "new")]
    start = time.time()
    with ProcessPoolExecutor(2) as pool:
        scores: dict[tuple[str, str], list[float]] = {}
        for name, _, variant, score in pool.map(one_run, tasks):
            scores.setdefault((name, variant), []).append(score)
    rows = []
    print(f"{'dataset':34s} {'old':>7s} {'new':>7s} {'new won':>8s} {'old won':>8s}")
    for n in names:
        old, new = scores[(n, "old")], scores[(n, "new")]
        rows.append({"dataset": n, "old": statistics.mean(old), "new": statistics.mean(new), "seeds": len(old),
                     "new_better": sum(b > a for a, b in zip(old, new)),
                     "old_better": sum(a > b for a, b in zip(old, new))})
        r = rows[-1]
        print(f"{n:34s} {r['old']:7.4f} {r['new']:7.4f} {r['new_better']:8d} {r['old_better']:8d}")
    every_old = [x for n in names for x in scores[(n, "old")]]
    every_new = [x for n in names for x in scores[(n, "new")]]
    print(f"all datasets: old {statistics.mean(every_old):.4f}, new {statistics.mean(every_new):.4f} "
          f"({time.time() - start:.0f} s)")
    with open(args.json, "w") as f:
        json.dump({"command": sys.argv[1:], "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                   "rows": rows, "old_mean": statistics.mean(every_old), "new_mean": statistics.mean(every_new)},
                  f, indent=1)


if __name__ == "__main__":
    main()
