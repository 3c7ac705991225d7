"""Measure a large Triton matmul space exhaustively on the GPU and save it as a Kernel Tuner cache.

The strategies benchmark (`tensortune bench strategies`) replays exhaustively measured
spaces. The six of ../shared/datasets are the ones the strategies were developed on;
this script makes new ones on our own hardware, which no setting was chosen on: every
configuration of an fp16 matmul (BLOCK_M x BLOCK_N x BLOCK_K x GROUP_M x num_stages x
num_warps, 2,400 configurations) on each shape given.

Per shape: all configurations are compiled in parallel first (a configuration that needs
more shared memory than the device has fails there, as `CompilationFailedConfig`), each
one that compiled is checked against torch.matmul on fresh random inputs
(`RuntimeFailedConfig` if wrong or if it crashes), then timed with CUDA events and a
cold L2 in one pass over all of them in random order. The cache records per
configuration the median of its runs as `time` (ms), the runs (`times`, at most 32),
`compile_time` and `benchmark_time` (ms, what tuning spent on it), so a replay can
account simulated tuning time.

Usage (CUDA machine):  PYTHONPATH=src python benchmarks/triton_space.py --out OUT --shapes 2048x2048x2048
Dry run on a CPU:      PYTHONPATH=src TRITON_INTERPRET=1 python benchmarks/triton_space.py --cpu --out /tmp/s
Then:                  tensortune bench strategies --dataset OUT/triton_matmul_2048x2048x2048-H100.json.gz
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

import triton

from triton_matmul import grid_of, make_args, matmul_kernel, parse, synchronize

GRID = dict(BLOCK_M=(16, 32, 64, 128, 256), BLOCK_N=(16, 32, 64, 128, 256), BLOCK_K=(16, 32, 64, 128),
            GROUP_M=(1, 8), num_stages=(2, 3, 4, 5), num_warps=(2, 4, 8))
CPU_GRID = dict(BLOCK_M=(16, 32), BLOCK_N=(16, 32), BLOCK_K=(16,), GROUP_M=(1, 8), num_stages=(2,), num_warps=(4,))
KEEP_RUNS = 32


def measure_shape(shape: str, grid: dict, cpu: bool, dtype: str, seed: int) -> dict:
    """Every configuration of `grid` on one shape: the Kernel Tuner cache's `cache` entries."""
    import torch

    from tensortune.frontends.triton.isolated import compile_args
    from tensortune.measure.cuda_timer import CudaTimer
    from tensortune.measure.triton_compile import device_max_shared, precompile
    from tensortune.space import Config

    names = list(grid)
    configs = [Config(dict(zip(names, values))) for values in itertools.product(*grid.values())]
    M, N, K = parse(shape)
    device = "cpu" if cpu else "cuda"
    args = make_args(M, N, K, device, dtype)
    start = time.perf_counter()
    builds = precompile(matmul_kernel, configs, compile_args(args), target=None if cpu else "auto",
                        max_shared=None if cpu else device_max_shared())
    compile_wall = time.perf_counter() - start
    expected = (args[0].float() @ args[1].float())
    timer = _host_timer() if cpu else CudaTimer(budget_seconds=0.02, warmup_seconds=0.005)
    entries: dict[str, dict] = {}
    runnable = []
    for b in builds:
        c = b.config
        key = ",".join(str(c[n]) for n in names)
        entry = {**dict(c), "compile_time": round(b.compile_seconds * 1000, 3), "benchmark_time": 0.0}
        entries[key] = entry
        if not b.ok:
            entry.update(time="CompilationFailedConfig", message=b.message[:160])
            continue
        fn = (lambda c=c: matmul_kernel[grid_of(M, N)](*args, **dict(c)))
        try:
            args[2].normal_()  # stale output must not pass the check
            fn()
            synchronize(cpu)
            if not torch.allclose(args[2].float(), expected, rtol=2e-2, atol=1e-1):
                entry.update(time="RuntimeFailedConfig", message="wrong result")
                continue
        except Exception as exc:  # noqa: BLE001 - this configuration's failure
            entry.update(time="RuntimeFailedConfig", message=f"{type(exc).__name__}: {str(exc)[:160]}")
            continue
        runnable.append((key, fn))
    random.Random(seed).shuffle(runnable)
    for key, fn in runnable:
        t0 = time.perf_counter()
        runs_ms = [t * 1000 for t in timer.time(fn)]
        entries[key].update(time=statistics.median(runs_ms), times=runs_ms[:KEEP_RUNS],
                            benchmark_time=round((time.perf_counter() - t0) * 1000, 3))
    ok = [e for e in entries.values() if not isinstance(e["time"], str)]
    best = min(ok, key=lambda e: e["time"]) if ok else None
    print(f"{shape}: {len(configs)} configurations, compiled in {compile_wall:.0f} s, {len(ok)} ran, "
          f"best {best['time']:.4f} ms" if best else f"{shape}: nothing ran", file=sys.stderr, flush=True)
    return entries


def _host_timer():
    class HostTimer:
        def time(self, fn):
            out = []
            for _ in range(3):
                t0 = time.perf_counter()
                fn()
                out.append(time.perf_counter() - t0)
            return out
    return HostTimer()


def device_name(cpu: bool) -> str:
    if cpu:
        return "cpu (TRITON_INTERPRET)"
    import torch

    return torch.cuda.get_device_name().replace(" ", "_")


def _shape(text: str) -> str:
    parts = text.split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"a shape is MxNxK with three positive whole numbers, got {text!r}")
    return text


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for the caches")
    p.add_argument("--shapes", nargs="+", default=["2048x2048x2048"], type=_shape, help="MxNxK shapes")
    p.add_argument("--dtype", default="float16")
    p.add_argument("--cpu", action="store_true", help="dry run under TRITON_INTERPRET=1 with a tiny grid")
    p.add_argument("--seed", type=int, default=0, help="order of the timing pass")
    opts = p.parse_args()
    grid = CPU_GRID if opts.cpu else GRID
    shapes = ["32x32x16"] if opts.cpu else opts.shapes
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    device = device_name(opts.cpu)
    short = "cpu" if opts.cpu else ("H100" if "H100" in device else device.split("_")[-1])
    for shape in shapes:
        cache = measure_shape(shape, grid, opts.cpu, opts.dtype, opts.seed)
        doc = {"device_name": device, "kernel_name": f"triton matmul {opts.dtype} {shape}",
               "problem_size": list(parse(shape)), "tune_params_keys": list(grid),
               "tune_params": {k: list(v) for k, v in grid.items()}, "objective": "time",
               "time_is": "median of the runs, ms", "triton": triton.__version__,
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cache": cache}
        write_cache(out / f"triton_matmul_{shape}-{short}.json.gz", doc)


def write_cache(path: Path, doc: dict) -> None:
    """Save a Kernel Tuner cache, gzipped (its `cache` entry last, as Kernel Tuner reads it)."""
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(doc, f)
    print(f"wrote {path}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
