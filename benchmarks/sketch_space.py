"""Measure a grid of the GPU auto-scheduler's own sketch space exhaustively, as a Kernel Tuner cache.

The strategies were developed on the six spaces of ../shared/datasets; this script makes
spaces of another kind on our own hardware, which no setting was chosen on: the Triton
kernels that `autoschedule_cuda` generates from tensor expressions, over a grid of its
sketch (tile sizes, launch order, warps and stages, and its switches: PERSISTENT, TMA,
TMA_STORE, EPILOGUE_SPLIT, RELAYOUT), for two workloads of docs/benchmarks/gpu.md and six more:

  matmul_bias_gelu  float16 4096^3 matmul with bias and GELU fused (four switches)
  conv2d            float16 NCHW convolution 32x64x56x56, 64 filters 3x3, padding 1
                    (three switches)
  matmul_splitk     float16 256x2048x8192 matmul: few output tiles and a long K, so the
                    sketch adds SPLIT_K {1..16} (three switches)
  batch_matmul      float16 96 x (1024x64 @ 64x1024), attention's scores Q K^T: a short K,
                    so tiles, warps and the launch matter more than pipelining (two switches)
  softmax           float16 softmax over the rows of 16384x4096: memory-bound, the rows
                    sketch (BLOCK_R, BLOCK_C, num_warps, num_stages; no switches)
  batch_matmul_pv   float16 96 x (1024x1024 @ 1024x64), attention's output P V: a narrow
                    N and a long K (two switches)
  conv2d_deep       float16 NCHW convolution 32x256x14x14, 256 filters 3x3, padding 1: a
                    long K (2,304) over few output tiles, so the sketch adds split-K to a
                    convolution (three switches)
  matmul_relu_tall  float16 16384x1024x4096 matmul with bias and ReLU fused: tall and
                    narrow (four switches)

Every configuration of the grid that the sketch's constraints allow is measured by the
auto-scheduler's own pipeline (generated, compiled in a pool of processes, checked
against the float32 torch reference on fresh random inputs, timed with CUDA events and
a cold L2 in an isolated worker), in random order, into a SQLite records database; the
records are then written as a Kernel Tuner cache (`time` = median of the runs in ms,
`compile_time` and `benchmark_time` in ms; a configuration that did not compile is a
`CompilationFailedConfig`, one that crashed, hung or computed a wrong result a
`RuntimeFailedConfig`). A configuration that runs over 4 times slower than the best so
far is timed with fewer runs (the runner's cut-off): its time is rougher, never its rank
near the top.

Usage (CUDA machine):  PYTHONPATH=src python benchmarks/sketch_space.py --workload conv2d --out $OUT
Dry run on a CPU:      PYTHONPATH=src TRITON_INTERPRET=1 python benchmarks/sketch_space.py --cpu --workload conv2d
Then:                  tensortune bench strategies --dataset OUT/sketch_conv2d-H100.json.gz
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpu_autoschedule import matmul_bias_gelu
from triton_space import device_name, write_cache

from tensortune.measure import ErrorKind, MeasureResult
from tensortune.search import SearchStrategy
from tensortune.space import Config, Space
from tensortune.te import workloads

# the grid measured per workload: parameters not named keep all of the sketch's values
GRIDS: dict[str, dict[str, list[Any]]] = {
    "matmul_bias_gelu": dict(BLOCK_M=[64, 128, 256], BLOCK_N=[64, 128, 256], BLOCK_K=[32, 64, 128], GROUP_M=[1, 8],
                             num_warps=[4, 8], num_stages=[2, 3, 4, 5]),
    "conv2d": dict(BLOCK_M=[16, 32, 64], BLOCK_N=[32, 64, 128], BLOCK_K=[16, 32, 64], GROUP_M=[1, 8],
                   num_warps=[4, 8], num_stages=[2, 3, 4]),
    "matmul_splitk": dict(BLOCK_M=[32, 64, 128, 256], BLOCK_N=[64, 128, 256], BLOCK_K=[64, 128], GROUP_M=[1, 8],
                        num_warps=[4, 8], num_stages=[3, 4]),
    "batch_matmul": dict(BLOCK_M=[32, 64, 128, 256], BLOCK_N=[32, 64, 128, 256], GROUP_M=[1, 8]),
    "softmax": {},
    "batch_matmul_pv": dict(BLOCK_M=[32, 64, 128, 256], BLOCK_K=[32, 64, 128], GROUP_M=[1, 8]),
    "conv2d_deep": dict(BLOCK_M=[32, 64, 128], BLOCK_N=[64, 128, 256], BLOCK_K=[32, 64], GROUP_M=[1, 8],
                        num_warps=[4, 8], num_stages=[2, 3, 4], SPLIT_K=[1, 2, 4]),
    "matmul_relu_tall": dict(BLOCK_M=[64, 128, 256], BLOCK_N=[64, 128, 256], BLOCK_K=[32, 64, 128], GROUP_M=[1, 8],
                             num_warps=[4, 8], num_stages=[2, 3, 4, 5]),
}
CPU_GRIDS: dict[str, dict[str, list[Any]]] = {
    "matmul_bias_gelu": dict(BLOCK_M=[16], BLOCK_N=[16, 32], BLOCK_K=[16], GROUP_M=[1], num_warps=[2],
                             num_stages=[2], PERSISTENT=[False], TMA=[False], TMA_STORE=[False]),
    "conv2d": dict(BLOCK_M=[16], BLOCK_N=[16, 32], BLOCK_K=[16], GROUP_M=[1], num_warps=[2], num_stages=[2],
                   PERSISTENT=[False]),
    "matmul_splitk": dict(BLOCK_M=[16], BLOCK_N=[16, 32], BLOCK_K=[16], GROUP_M=[1], num_warps=[2], num_stages=[2],
                        PERSISTENT=[False], TMA=[False], TMA_STORE=[False]),
    "batch_matmul": dict(BLOCK_M=[16], BLOCK_N=[16, 32], BLOCK_K=[16], GROUP_M=[1], num_warps=[2], num_stages=[2],
                         PERSISTENT=[False]),
    "softmax": dict(BLOCK_R=[1, 2], BLOCK_C=[64], num_warps=[1], num_stages=[1]),
    "batch_matmul_pv": dict(BLOCK_M=[16], BLOCK_N=[16, 32], BLOCK_K=[16], GROUP_M=[1], num_warps=[2],
                            num_stages=[2], PERSISTENT=[False], TMA=[False], TMA_STORE=[False]),
    "conv2d_deep": dict(BLOCK_M=[16], BLOCK_N=[16, 32], BLOCK_K=[16], GROUP_M=[1], num_warps=[2], num_stages=[2],
                        PERSISTENT=[False]),
    "matmul_relu_tall": dict(BLOCK_M=[16], BLOCK_N=[16, 32], BLOCK_K=[16], GROUP_M=[1], num_warps=[2],
                             num_stages=[2], PERSISTENT=[False], TMA=[False], TMA_STORE=[False]),
}
KEEP_RUNS = 32
COMPILE_FAILURES = {ErrorKind.COMPILE_ERROR, ErrorKind.OUT_OF_RESOURCES, ErrorKind.INVALID}


def computation(name: str, cpu: bool) -> Any:
    if name == "matmul_bias_gelu":
        return matmul_bias_gelu(*((32, 32, 32) if cpu else (4096, 4096, 4096)))
    if name == "matmul_splitk":  # few output tiles and a long K: the sketch adds split-K
        return workloads.matmul(*((16, 32, 2048) if cpu else (256, 2048, 8192)), "float16")
    if name == "batch_matmul":
        return workloads.batch_matmul(*((2, 16, 32, 16) if cpu else (96, 1024, 1024, 64)), "float16")
    if name == "batch_matmul_pv":
        return workloads.batch_matmul(*((2, 16, 32, 32) if cpu else (96, 1024, 64, 1024)), "float16")
    if name == "softmax":
        return workloads.softmax(*((4, 64) if cpu else (16384, 4096)), "float16")
    if name == "conv2d":
        n, c, h, w, k = (2, 16, 6, 6, 8) if cpu else (32, 64, 56, 56, 64)
        return workloads.conv2d_nchw(n, c, h, w, k, 3, 3, 1, 1, "float16")
    if name == "conv2d_deep":  # K = 256 * 3 * 3 = 2,304 over 98 tiles of 128x128: split-K applies
        n, c, h, w, k = (2, 16, 4, 4, 8) if cpu else (32, 256, 14, 14, 256)
        return workloads.conv2d_nchw(n, c, h, w, k, 3, 3, 1, 1, "float16")
    if name == "matmul_relu_tall":
        return workloads.matmul_bias_relu(*((64, 32, 32) if cpu else (16384, 1024, 4096)), "float16")
    raise SystemExit(f"unknown workload {name!r}; choose one of {', '.join(GRIDS)}")


def grid_configs(space: Space, grid: dict[str, list[Any]]) -> tuple[dict[str, list[Any]], list[Config]]:
    """The grid's values per parameter of `space`, and its configurations the space allows."""
    values = {p.name: list(grid.get(p.name, list(p.values))) for p in space.params}
    configs = []
    for combo in itertools.product(*values.values()):
        config = Config(dict(zip(values, combo)))
        if space.is_valid(config):
            configs.append(config)
    return values, configs


class GridOrder(SearchStrategy):
    """Proposes a fixed list of configurations, in order: an exhaustive pass over a grid."""

    name = "grid"

    def __init__(self, space: Space, configs: Sequence[Config]) -> None:
        super().__init__(space, 0, len(configs))
        self.todo = list(configs)

    def ask(self, n: int) -> list[Config]:
        out = []
        while self.todo and len(out) < n:
            c = self.todo.pop(0)
            if self.propose(c):
                out.append(c)
        return out


def plain(value: Any) -> Any:
    """Switches as 0/1, Kernel Tuner's convention (its genetic algorithm, annealing and
    differential evolution fail on spaces with boolean values)."""
    return int(value) if isinstance(value, bool) else value


def cache_entry(r: MeasureResult) -> dict[str, Any]:
    """A Kernel Tuner cache record: the parameter values, then what was measured."""
    entry: dict[str, Any] = {k: plain(v) for k, v in r.config.items()}
    entry.update(compile_time=round(r.compile_seconds * 1000, 3), benchmark_time=round(r.run_seconds * 1000, 3))
    if r.ok:
        runs_ms = [t * 1000 for t in r.times]
        entry.update(time=r.time * 1000, times=runs_ms[:KEEP_RUNS])
    else:
        failed = "CompilationFailedConfig" if r.error in COMPILE_FAILURES else "RuntimeFailedConfig"
        entry.update(time=failed, message=f"{r.error}: {r.message[:160]}")
    return entry


def measure(name: str, cpu: bool, seed: int, seconds: float | None, db_path: Path) -> dict[str, Any]:
    from tensortune.backends.triton.kernel import interpreting
    from tensortune.backends.triton.patterns import analyze
    from tensortune.backends.triton.sketches import sketch
    from tensortune.backends.triton.source import GenOptions
    from tensortune.backends.triton.tune import _sms, autoschedule_cuda, cuda_target, cuda_workload
    from tensortune.db import Database
    from tensortune.measure.cuda_timer import CudaTimer
    from tensortune.tuner import Budget

    comp = computation(name, cpu)
    interpret = interpreting()
    options = GenOptions("float16", interpret, False)
    plan = analyze(comp.output)
    sk = sketch(plan, options, _sms(interpret))
    values, configs = grid_configs(sk.space, (CPU_GRIDS if cpu else GRIDS)[name])
    random.Random(seed).shuffle(configs)  # drift over the pass must not favour one region
    print(f"{name}: {len(configs)} configurations of the grid are in the sketch's space", file=sys.stderr, flush=True)
    timer = None if interpret else CudaTimer(budget_seconds=0.02, warmup_seconds=0.005, min_repeats=10,
                                             max_repeats=200)
    start = time.perf_counter()
    # autoschedule_cuda measures the sketch's seeds first; those outside the grid are left out below
    budget = Budget(trials=len(configs) + len(sk.seeds), seconds=seconds)
    try:
        autoschedule_cuda(comp, budget=budget, db=str(db_path), strategy=GridOrder(sk.space, configs),
                          retune=True, confirm=False, timer=timer, progress=True)
    except Exception as exc:  # noqa: BLE001 - no candidate ran: the records still say why
        print(f"{name}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    wall = time.perf_counter() - start
    in_grid = set(configs)
    with Database(db_path) as db:
        records = [r for r in db.records(cuda_workload(plan, options), cuda_target(interpret)) if r.config in in_grid]
    cache = {",".join(str(plain(r.config[k])) for k in values): cache_entry(r.to_result()) for r in records}
    ok = [e["time"] for e in cache.values() if not isinstance(e["time"], str)]
    print(f"{name}: {len(cache)} of {len(configs)} measured in {wall:.0f} s, {len(ok)} ran, "
          f"best {min(ok):.4f} ms" if ok else f"{name}: nothing ran", file=sys.stderr, flush=True)
    # the cache goes last: Kernel Tuner reads (and appends to) it as the file's tail
    return {"tune_params_keys": list(values), "tune_params": {k: [plain(v) for v in vs] for k, vs in values.items()},
            "measured": len(cache),
            "grid_size": len(configs), "wall_seconds": round(wall, 1), "cache": cache}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", required=True, choices=sorted(GRIDS))
    p.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for the cache and the records")
    p.add_argument("--cpu", action="store_true", help="dry run under TRITON_INTERPRET=1 with a tiny grid")
    p.add_argument("--seed", type=int, default=0, help="order of the measuring pass")
    p.add_argument("--seconds", type=float, default=None, help="stop measuring after this long")
    opts = p.parse_args()
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    device = device_name(opts.cpu)
    short = "cpu" if opts.cpu else ("H100" if "H100" in device else device.split("_")[-1])
    result = measure(opts.workload, opts.cpu, opts.seed, opts.seconds, out / f"sketch_{opts.workload}-{short}.db")
    import triton

    doc = {"device_name": device, "kernel_name": f"tensortune sketch {opts.workload}", "objective": "time",
           "time_is": "median of the runs, ms", "triton": triton.__version__,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), **result}
    write_cache(out / f"sketch_{opts.workload}-{short}.json.gz", doc)


if __name__ == "__main__":
    main()
