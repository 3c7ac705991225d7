"""A hand-written schedule for a float32 matmul, against the default schedule and numpy.

The computation is written once; the schedule says how it runs:
  cache_write  accumulate each MR x NR output tile in a local buffer (registers, once
               its rows are unrolled and its columns vectorized)
  cache_read   pack the NR-column panel of B that a column of tiles reads (contiguous)
  tile         MR x NR output tiles; column panels outermost, in parallel
  compute_at   the packed panel once per column panel, the accumulator once per tile,
               k outermost inside it
  unroll       the MR rows of the register tile
  vectorize    the NR columns (a constant extent, a multiple of 16 floats)

    .venv/bin/python examples/te_matmul_schedule.py --size 1024 --rounds 7

Every kernel is checked against numpy before it is timed; the timings are interleaved
(default, hand-written, numpy in each round) and the medians reported.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

# Several OpenMP/BLAS runtimes in one process (ours, OpenBLAS's, torch's) whose idle
# threads spin would starve each other on a 2-core machine: let idle threads sleep.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np

from tensortune import te
from tensortune.measure import Timer, check_close


def matmul(n: int):
    C = te.parse("C(i, j) +=! A(i, k) * B(k, j)", A=(n, n), B=(n, n))
    A, B = te.placeholders(C)
    return A, B, C


def hand_schedule(A, B, C, mr: int = 8, nr: int = 32) -> te.Schedule:
    s = te.create_schedule(C)
    CL = s.cache_write(C)  # C.local: the accumulator tile; C copies it out
    BP = s.cache_read(B, [CL])  # B.local: the packed panel C.local reads
    io, jo, ii, ji = s[C].tile("i", "j", mr, nr)
    s[C].reorder(jo, io)  # a panel of B serves a whole column of tiles
    s[C].parallel(jo)
    s[C].vectorize(ji)
    s[CL].compute_at(s[C], io)  # C.local covers one MR x NR tile
    s[BP].compute_at(s[C], jo)  # B.local: K x NR, contiguous (its reader C.local runs inside jo)
    s[BP].vectorize(s[BP].loops[-1])
    s[CL].reorder("k", "i", "j")  # k outside: the tile stays in registers across k
    s[CL].unroll("i")
    s[CL].vectorize("j")
    return s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--mr", type=int, default=8)
    ap.add_argument("--nr", type=int, default=32)
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args()
    n = args.size
    A, B, C = matmul(n)
    schedules = {"default": te.create_schedule(C), "hand-written": hand_schedule(A, B, C, args.mr, args.nr)}
    print(schedules["hand-written"])
    print("steps:", json.dumps(schedules["hand-written"].to_json()))
    kernels = {name: te.build(s, [A, B, C]) for name, s in schedules.items()}

    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    out = np.empty((n, n), np.float32)
    for name, k in kernels.items():
        check_close(k(a, b), a @ b, 1e-3, 1e-3)
    calls = {name: (lambda k=k: k(a, b, out)) for name, k in kernels.items()}
    calls["numpy"] = lambda: np.matmul(a, b, out=out)
    timer = Timer(warmup_seconds=0.05, min_repeats=3, budget_seconds=0.3)
    medians: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(args.rounds):
        for name, fn in calls.items():
            if name == "default" and medians[name] and len(medians[name]) >= 3:
                continue  # seconds per call: three rounds are enough
            medians[name].append(float(np.median(timer.time(fn))))
    flops = 2.0 * n ** 3
    result = {name: float(np.median(v)) for name, v in medians.items()}
    print(f"\nfloat32 matmul {n}^3 on {platform.processor() or platform.machine()}, "
          f"{time.strftime('%Y-%m-%d')}, {args.rounds} interleaved rounds (medians)")
    print(f"{'schedule':14s} {'ms':>9s} {'GFLOP/s':>9s} {'vs default':>11s} {'vs numpy':>9s}")
    for name, t in result.items():
        print(f"{name:14s} {t * 1e3:9.2f} {flops / t / 1e9:9.1f} {result['default'] / t:10.1f}x "
              f"{result['numpy'] / t:8.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"size": n, "seconds": result, "gflops": {k: flops / t / 1e9 for k, t in result.items()},
                       "steps": schedules["hand-written"].to_json()}, f, indent=1)


if __name__ == "__main__":
    main()
