"""What the H100 CUDA convolution space looks like, and where the default search gets stuck on it.

Reads docs/benchmarks/spaces_held_out/cuda_convolution-H100.json.gz (benchmarks/cuda_conv_space.py)
and prints, writing the same as JSON:

1. the space: configurations, failures, the best, how many score 0.90 or more and what
   they share, and how steady the recorded runs are;
2. its agreement with the A100 and A4000 caches of the same space (../shared/datasets):
   Kendall tau of the times over the configurations that ran on both, what each one's
   optimum scores on the other, and the best H100 score among each one's 20 fastest;
3. the trap: the most common final configuration of the default's runs that end below
   0.90, and what each of its one-parameter neighbours scores;
4. traces of the default (`auto`) at N=200, seeds 0..29, through the real `Tuner` with a
   records database: the final score, and how often each run measured the winning tile and
   switches (those of the optimum, any block size).

Usage (from the repository root):
    .venv/bin/python benchmarks/cuda_conv_analysis.py [--json docs/benchmarks/cuda_convolution_analysis.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from collections import Counter
from concurrent.futures import ProcessPoolExecutor

from tensortune.bench.replay import cached_dataset
from tensortune.db import Database, Target, Workload
from tensortune.model.metrics import kendall_tau
from tensortune.space import Config
from tensortune.tuner import Tuner

HERE = os.path.dirname(os.path.abspath(__file__))
SPACE = os.path.join(HERE, "..", "docs", "benchmarks", "spaces_held_out", "cuda_convolution-H100.json.gz")
DATASETS = os.path.join(HERE, "..", "..", "shared", "datasets", "kernel_tuner")
BLOCK = ("block_size_x", "block_size_y")
GROUP = ("tile_size_x", "tile_size_y", "read_only", "use_padding", "use_shmem")


def scores(ds) -> dict:
    """Each configuration's t_opt / t (0 for a failure)."""
    return {c: ds.score(r.time) if r.ok else 0.0 for c, r in ds.results.items()}


def timing(ds) -> dict:
    """How steady the recorded runs are: medians over configurations of the runs per
    configuration, of the first run over the median of the rest, and of the median absolute
    deviation of the runs over their median."""
    runs = [r.extra["runs_ms"] for r in ds.results.values() if r.ok and len(r.extra.get("runs_ms", ())) > 2]
    return {"runs_per_configuration": statistics.median(len(x) for x in runs),
            "first_over_rest": round(statistics.median(x[0] / statistics.median(x[1:]) for x in runs), 4),
            "spread": round(statistics.median(statistics.median(abs(t - statistics.median(x)) for t in x)
                                              / statistics.median(x) for x in runs), 5)}


def trace(seed: int, budget: int) -> dict:
    ds = cached_dataset(SPACE)
    db = Database(":memory:")
    result = Tuner(ds.space, ds.runner(), workload=Workload.make(ds.name), target=Target.make("replay", ds.device),
                   db=db, budget=budget, seed=seed, progress=False).run()
    winning = tuple(ds.best_config[k] for k in GROUP)
    measured = [r.config for r in db.all_records()]
    return {"seed": seed, "score": ds.score(result.best_time), "best": dict(result.best_config),
            "winning_group_measured": sum(tuple(c[k] for k in GROUP) == winning for c in measured)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", default=None)
    p.add_argument("--seeds", type=int, default=30)
    p.add_argument("--budget", type=int, default=200)
    p.add_argument("--jobs", type=int, default=2)
    opts = p.parse_args()
    ds = cached_dataset(SPACE)
    h100 = scores(ds)
    good = [c for c, s in h100.items() if s >= 0.90]
    shared = {k: sorted({c[k] for c in good}) for k in ds.space.names if len({c[k] for c in good}) == 1}
    out: dict = {"space": {
        "configurations": len(h100), "failed": ds.failures, "best_ms": ds.optimum * 1000,
        "best": dict(ds.best_config), "at_least_0.90": len(good), "what_they_share": shared,
        "median_score": statistics.median(s for s in h100.values() if s > 0), **timing(ds)}}
    print(f"space: {len(h100)} configurations, {ds.failures} failed, best {ds.optimum * 1000:.4f} ms, "
          f"{len(good)} at >= 0.90, all with {shared}; runs: {timing(ds)}")

    out["agreement"] = {}
    for other in ("convolution_milo-A100", "convolution_milo-A4000"):
        path = os.path.join(DATASETS, f"{other}.json.gz")
        if not os.path.exists(path):
            print(f"{other}: not at {path}, skipped")
            continue
        src = cached_dataset(path)
        both = [c for c in h100 if h100[c] > 0 and src.results[c].ok]
        tau = kendall_tau([src.results[c].time for c in both], [ds.results[c].time for c in both])
        fastest = sorted(both, key=lambda c: src.results[c].time)[:20]
        row = {"kendall_tau": round(tau, 3), "its_optimum_here": round(h100[src.best_config], 3),
               "h100_optimum_there": round(src.score(src.results[ds.best_config].time), 3),
               "best_here_of_its_20_fastest": round(max(h100[c] for c in fastest), 3)}
        out["agreement"][other] = row
        print(f"{other}: {row}")

    with ProcessPoolExecutor(opts.jobs) as pool:
        runs = list(pool.map(trace, range(opts.seeds), [opts.budget] * opts.seeds))
    stuck = Counter(tuple(r["best"].items()) for r in runs if r["score"] < 0.90)
    trap = dict(stuck.most_common(1)[0][0]) if stuck else dict(ds.best_config)
    neighbours = {}
    for name in (*GROUP, *BLOCK):
        param = next(q for q in ds.space.params if q.name == name)
        neighbours[name] = {str(v): round(h100[c], 3) if (c := Config({**trap, name: v})) in h100 else None
                            for v in param.values if v != trap[name]}
    reached = [r["winning_group_measured"] for r in runs if r["score"] == 1.0]
    out["trap"] = {"config": trap, "score": round(h100[Config(trap)], 3),
                   "runs_ending_there": stuck.most_common(1)[0][1] if stuck else 0,
                   "one_parameter_neighbours": neighbours}
    out["traces"] = {"budget": opts.budget, "seeds": opts.seeds, "runs": runs,
                     "mean_score": statistics.mean(r["score"] for r in runs),
                     "runs_at_1.0": len(reached), "their_winning_group_measurements": sorted(reached)}
    print(f"trap {trap} scores {out['trap']['score']}; {out['trap']['runs_ending_there']} of {opts.seeds} runs "
          f"at N={opts.budget} end there")
    for name, row in neighbours.items():
        print(f"  {name:14s} {row}")
    for r in runs:
        if r["score"] < 0.90:
            print(f"  seed {r['seed']:2d} ends at {r['score']:.3f}, measured the winning tile and switches "
                  f"{r['winning_group_measured']} times")
    print(f"{len(reached)} runs end at 1.0, measuring the winning tile and switches {min(reached, default=0)} to "
          f"{max(reached, default=0)} times (median {statistics.median(reached) if reached else 0})")
    if opts.json:
        with open(opts.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1, default=str)


if __name__ == "__main__":
    main()
