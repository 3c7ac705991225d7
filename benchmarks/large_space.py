"""Search overhead on a sparse, huge space: a table constraint against a predicate.

The space is hotspot's (Kernel Tuner's hotspot example, as in benchmark_hub's
hotspot_milo: 9 parameters, a 22.2-million-point product, five constraints); its valid
configurations are enumerated with NumPy and given synthetic times (a smooth function of
the parameters plus noise, the same every run), since only the search's own cost is
measured here, never its score. The same space is built three ways and tuned with the
same in-memory runner, side by side in one run:

- `table`: `Constraint.allowed` over the valid rows (how replayed caches are read now);
- `predicate`: a callable testing membership in the same rows (how they were read before);
- `rules`: the five constraints as expression strings (how a user would write them).

Prints, per way and strategy, the wall seconds of building the space and of a tuning run
at each budget (the runner answers instantly, so that is all search), and what reading the
space as a Kernel Tuner cache costs (in a fresh process), and writes JSON.

Usage (from the repository root):
    .venv/bin/python benchmarks/large_space.py [--budgets 20,100,200] [--json docs/benchmarks/large_space.json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator

import numpy as np

from tensortune.db import Target, Workload
from tensortune.measure import BuildResult, MeasureResult
from tensortune.space import Constraint, Space
from tensortune.tuner import Tuner

PARAMS = {
    "block_size_x": [1, 2, 4, 8, 16] + [32 * i for i in range(1, 33)],
    "block_size_y": [2**i for i in range(6)],
    "tile_size_x": list(range(1, 11)),
    "tile_size_y": list(range(1, 11)),
    "temporal_tiling_factor": list(range(1, 11)),
    "max_tfactor": [10],
    "loop_unroll_factor_t": list(range(1, 11)),
    "sh_power": [0, 1],
    "blocks_per_sm": [0, 1, 2, 3, 4],
}
SHARED = ("(block_size_x*tile_size_x + temporal_tiling_factor*2)"
          " * (block_size_y*tile_size_y + temporal_tiling_factor*2) * (2+sh_power) * 4")
RULES = [
    "block_size_x*block_size_y >= 32",
    "temporal_tiling_factor % loop_unroll_factor_t == 0",
    "block_size_x*block_size_y <= 1024",
    f"{SHARED} <= 48*1024",
    f"blocks_per_sm == 0 or {SHARED} * blocks_per_sm <= 48*1024",
]


def valid_rows() -> tuple[list[tuple[int, ...]], np.ndarray]:
    """Every configuration the rules allow, and a synthetic time (ms) for each."""
    grids = np.meshgrid(*[np.array(v) for v in PARAMS.values()], indexing="ij")
    a = {n: g.ravel() for n, g in zip(PARAMS, grids)}
    bx, by, tx, ty = a["block_size_x"], a["block_size_y"], a["tile_size_x"], a["tile_size_y"]
    tt, bs = a["temporal_tiling_factor"], a["blocks_per_sm"]
    shared = (bx * tx + tt * 2) * (by * ty + tt * 2) * (2 + a["sh_power"]) * 4  # RULES, vectorized
    ok = ((bx * by >= 32) & (tt % a["loop_unroll_factor_t"] == 0) & (bx * by <= 1024)
          & (shared <= 48 * 1024) & ((bs == 0) | (shared * bs <= 48 * 1024)))
    idx = np.nonzero(ok)[0]
    rows = list(zip(*(a[n][idx].tolist() for n in PARAMS)))
    rng = np.random.default_rng(0)
    times = (1 + 0.03 * (np.log2(a["block_size_x"][idx]) - 5) ** 2 + 0.05 * np.abs(a["tile_size_x"][idx] - 4)
             + 0.05 * np.abs(a["tile_size_y"][idx] - 3) + 0.06 * np.abs(a["temporal_tiling_factor"][idx] - 4)
             + 0.1 * a["sh_power"][idx] + 0.2 * rng.random(idx.size))
    return rows, times


class TableRunner:
    """Answers each configuration with its synthetic time (no device, no delay)."""

    def __init__(self, times: dict[tuple[int, ...], float]) -> None:
        self.times = times

    def run(self, builds: Iterable[BuildResult]) -> Iterator[MeasureResult]:
        for b in builds:
            yield MeasureResult(b.config, (self.times[tuple(b.config[n] for n in PARAMS)] / 1000,))


def build(way: str, rows: list[tuple[int, ...]]) -> Space:
    if way == "table":
        return Space(PARAMS, constraints=[Constraint.allowed(list(PARAMS), rows)])
    if way == "predicate":
        members = set(rows)

        def measured(cfg: dict) -> bool:
            return tuple(cfg[n] for n in PARAMS) in members

        return Space(PARAMS, constraints=[measured])
    return Space(PARAMS, constraints=RULES)


def load_cache(rows: list[tuple[int, ...]], times: np.ndarray) -> dict[str, float]:
    """Write the rows as a gzipped Kernel Tuner cache, and read it back in a fresh process:
    its wall seconds and the memory the read dataset holds."""
    code = ("import sys, time\n"
            "from tensortune.datasets import load_kernel_tuner_cache\n"
            "def rss():  # resident kB now (Linux)\n"
            "    return int(next(l for l in open('/proc/self/status') if l.startswith('VmRSS')).split()[1])\n"
            "before, start = rss(), time.perf_counter()\n"
            "ds = load_kernel_tuner_cache(sys.argv[1])\n"
            "print(time.perf_counter() - start, ds.space.size, (rss() - before) / 1024)\n")
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "hotspot_like.json.gz")
        cache = {",".join(map(str, r)): {"time": t, "compile_time": 500.0, "benchmark_time": 20.0}
                 for r, t in zip(rows, times.tolist())}
        with gzip.open(path, "wt") as f:
            json.dump({"device_name": "synthetic", "tune_params_keys": list(PARAMS), "tune_params": PARAMS,
                       "cache": cache}, f)
        seconds, size, megabytes = subprocess.run([sys.executable, "-c", code, path], check=True, text=True,
                                                  capture_output=True).stdout.split()
    assert int(size) == len(rows)
    return {"seconds": round(float(seconds), 2), "memory_mb": round(float(megabytes))}


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budgets", default="20,100,200")
    p.add_argument("--strategies", default="random,auto")
    p.add_argument("--ways", default="table,predicate,rules",
                   help="predicate,rules also run on commits before table constraints (for a before/after)")
    p.add_argument("--json", default=os.path.join(here, "..", "docs", "benchmarks", "large_space.json"))
    args = p.parse_args()
    budgets = [int(b) for b in args.budgets.split(",")]
    import xgboost  # noqa: F401  (imported before any timing, not by the first run)

    rows, times = valid_rows()
    rules = Space(PARAMS, constraints=RULES)
    assert all(rules.is_valid(dict(zip(PARAMS, r))) for r in rows[::997]), "RULES and valid_rows disagree"
    members = set(rows)
    assert all(tuple(c.values()) in members for c in rules.sample(200, seed=0)), "RULES and valid_rows disagree"
    runner = TableRunner(dict(zip(rows, times.tolist())))
    out: dict = {"valid": len(rows), "cartesian": int(np.prod([len(v) for v in PARAMS.values()])),
                 "machine": platform.platform(), "python": platform.python_version(), "ways": {}}
    out["cache_load"] = load_cache(rows, times)
    print(f"reading it as a Kernel Tuner cache: {out['cache_load']}", flush=True)
    for way in args.ways.split(","):
        start = time.perf_counter()
        space = build(way, rows)
        size = space.size
        entry = {"build_seconds": round(time.perf_counter() - start, 2), "size": size,
                 "size_is_exact": space.size_is_exact, "runs": {}}
        for strategy in args.strategies.split(","):
            for budget in budgets:
                start = time.perf_counter()
                result = Tuner(space, runner, workload=Workload.make("hotspot_like"),
                               target=Target.make("replay", "synthetic"), db=None, strategy=strategy,
                               budget=budget, seed=0, progress=False).run()
                assert result.trials == budget
                entry["runs"][f"{strategy}@{budget}"] = round(time.perf_counter() - start, 2)
                print(way, strategy, budget, entry["runs"][f"{strategy}@{budget}"], "s", flush=True)
        out["ways"][way] = entry
    cols = list(next(iter(out["ways"].values()))["runs"])
    print(f"\nhotspot-like space: {out['valid']:,} valid of {out['cartesian']:,}; wall seconds")
    print("| way | build + size | size (exact?) | " + " | ".join(cols) + " |")
    print("| --- | --- | --- |" + " --- |" * len(cols))
    for way, e in out["ways"].items():
        print(f"| {way} | {e['build_seconds']} | {e['size']:,} ({'yes' if e['size_is_exact'] else 'estimate'}) | "
              + " | ".join(str(e["runs"][c]) for c in cols) + " |")
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)
    print(f"JSON: {args.json}")


if __name__ == "__main__":
    main()
