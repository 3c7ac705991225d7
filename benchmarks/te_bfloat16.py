"""bfloat16 against float32 in te's C kernels, beside torch, on this CPU.

Two computations, each written once per dtype and scheduled the same way:
  matmul      N x N x N, the packed register-tile schedule of
              examples/te_matmul_schedule.py (bfloat16 tiles hold float32, so the
              inner loop is the float32 one after the loads are widened)
  residual    relu(x * 1.5 + r) over M elements, parallel and vectorized: memory bound,
              where 2-byte storage halves the bytes moved
against torch on the same arrays (matmul: `torch.mm`; residual: `torch.relu(torch.add(r, x,
alpha=1.5))`) in float32 and bfloat16. Every kernel is checked against the NumPy interpreter first;
timings are interleaved (every contender once per round) and the medians reported.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/te_bfloat16.py --size 512 --elements 16777216 \
        --rounds 7 --json docs/benchmarks/te_bfloat16.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # several OpenMP runtimes in one process

import numpy as np

from tensortune import te
from tensortune.measure import Timer, check_close
from tensortune.te.arrays import to_torch
from tensortune.te.dtype import numpy_dtype


def matmul(n: int, dtype: str) -> tuple[te.Tensor, te.Tensor, te.Tensor, te.Schedule]:
    C = te.parse("C(i, j) +=! A(i, k) * B(k, j)", dtype=dtype, A=(n, n), B=(n, n))
    A, B = te.placeholders(C)
    s = te.create_schedule(C)
    CL = s.cache_write(C)
    BP = s.cache_read(B, [CL])
    io, jo, ii, ji = s[C].tile("i", "j", 8, 32)
    s[C].reorder(jo, io)
    s[C].parallel(jo)
    s[C].vectorize(ji)
    s[CL].compute_at(s[C], io)
    s[BP].compute_at(s[C], jo)
    s[BP].vectorize(s[BP].loops[-1])
    s[CL].reorder("k", "i", "j")
    s[CL].unroll("i")
    s[CL].vectorize("j")
    return A, B, C, s


def residual(m: int, dtype: str) -> tuple[te.Tensor, te.Tensor, te.Tensor, te.Schedule]:
    X = te.placeholder((m,), dtype, "X")
    R = te.placeholder((m,), dtype, "R")
    Y = te.compute((m,), lambda i: te.max(X[i] * 1.5 + R[i], 0.0), name="Y")
    s = te.create_schedule(Y)
    o, i = s[Y].split("i", 256)
    s[Y].parallel(o)
    s[Y].vectorize(i)
    return X, R, Y, s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--elements", type=int, default=1 << 22)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args()
    import torch
    
    threads = int(os.environ.get("OMP_NUM_THREADS", os.cpu_count() or 1))
    torch.set_num_threads(threads)
    n, m = args.size, args.elements
    rng = np.random.default_rng(0)
    a32, b32 = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    x32, r32 = rng.standard_normal(m, dtype=np.float32), rng.standard_normal(m, dtype=np.float32)
    calls, work = {}, {}
    for dtype in ("float32", "bfloat16"):
        nd = numpy_dtype(dtype)
        a, b, x, r = a32.astype(nd), b32.astype(nd), x32.astype(nd), r32.astype(nd)
        A, B, C, s = matmul(n, dtype)
        mm = te.build(s, [A, B, C])
        out = np.empty((n, n), nd)
        check_close(mm(a, b), te.evaluate(C, {A: a, B: b}), 2e-2, 2e-2)
        X, R, Y, s = residual(m, dtype)
        res = te.build(s, [X, R, Y])
        y = np.empty(m, nd)
        check_close(res(x, r), te.evaluate(Y, {X: x, R: r}), 2e-2, 2e-2)
        ta, tb, tx, tr = to_torch(a), to_torch(b), to_torch(x), to_torch(r)
        tout, ty = to_torch(out).clone(), to_torch(y).clone()
        calls[f"matmul te {dtype}"] = lambda mm=mm, a=a, b=b, out=out: mm(a, b, out)
        calls[f"matmul torch {dtype}"] = lambda ta=ta, tb=tb, tout=tout: torch.mm(ta, tb, out=tout)
        calls[f"residual te {dtype}"] = lambda res=res, x=x, r=r, y=y: res(x, r, y)
        calls[f"residual torch {dtype}"] = lambda tx=tx, tr=tr, ty=ty: torch.relu_(torch.add(tr, tx, alpha=1.5,
                                                                                             out=ty))
        for k in (f"matmul te {dtype}", f"matmul torch {dtype}"):
            work[k] = ("GFLOP/s", 2.0 * n ** 3)
        for k in (f"residual te {dtype}", f"residual torch {dtype}"):
            work[k] = ("GB/s", 3.0 * m * nd.itemsize)  # two arrays read, one written
    timer = Timer(warmup_seconds=0.05, min_repeats=3, budget_seconds=0.3)
    medians: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(args.rounds):
        for name, fn in calls.items():
            medians[name].append(float(np.median(timer.time(fn))))
    result = {name: float(np.median(v)) for name, v in medians.items()}
    load = os.getloadavg()[0]
    print(f"\nbfloat16 vs float32: matmul {n}^3, residual over {m} elements; {threads} thread(s); "
          f"{platform.processor() or platform.machine()}; load {load:.1f}; {time.strftime('%Y-%m-%d')}; "
          f"{args.rounds} interleaved rounds (medians)")
    print(f"{'kernel':26s} {'ms':>9s} {'rate':>14s}")
    for name, t in result.items():
        unit, amount = work[name]
        print(f"{name:26s} {t * 1e3:9.3f} {amount / t / 1e9:8.1f} {unit}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"size": n, "elements": m, "threads": threads, "load": load, "date": time.strftime("%Y-%m-%d"),
                       "rounds": args.rounds, "seconds": result,
                       "rates": {k: work[k][1] / t / 1e9 for k, t in result.items()},
                       "units": {k: work[k][0] for k in result}}, f, indent=1)


if __name__ == "__main__":
    main()
