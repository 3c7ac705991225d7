"""A tuner run again round after round (as a task scheduler runs each kernel's tuner): its
strategy told only what it has not heard ("new", what `Tuner` does) against told every
record of the store again at each round ("old"), on replayed, exhaustively measured
spaces. Reported: the mean score (the optimum's time over the best found) after all
rounds, per dataset, and how many seeds each variant won.

Usage (datasets from ../shared/datasets/kernel_tuner, or TENSORTUNE_DATASETS):
    python benchmarks/tuner_rounds.py gemm-RTX_3090.json.gz,pnpoly-RTX_3090.json.gz SEEDS ROUNDS PER_ROUND \
        STRATEGY OUT.json
"""

from __future__ import annotations

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
DATASETS = os.environ.get("TENSORTUNE_DATASETS", os.path.join(HERE, "..", "..", "shared", "datasets", "kernel_tuner"))


def one_run(task: tuple) -> tuple[str, int, str, float]:
    """(dataset, seed, variant, score) of one tuner run `rounds` times, `per_round` trials each."""
    name, seed, variant, rounds, per_round, strategy = task
    ds = cached_dataset(os.path.join(DATASETS, name))
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
    return name, seed, variant, ds.score(best)


def main() -> None:
    names, seeds = sys.argv[1].split(","), range(int(sys.argv[2]))
    rounds, per_round, strategy, out = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
    tasks = [(n, s, v, rounds, per_round, strategy) for n in names for s in seeds for v in ("old", "new")]
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
    with open(out, "w") as f:
        json.dump({"command": sys.argv[1:], "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                   "rows": rows, "old_mean": statistics.mean(every_old), "new_mean": statistics.mean(every_new)},
                  f, indent=1)


if __name__ == "__main__":
    main()
