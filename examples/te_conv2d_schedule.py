"""A hand-written schedule for conv2d (NCHW, 3x3, padding 1), against the default
schedule, numpy (im2col + matmul) and, when installed, torch.

The schedule:
  padding      computed once at the root, in parallel, vectorized along the rows
  cache_write  each output tile (F filters x Y rows x X columns) accumulates locally
  split        filters, rows and columns into tiles; X=16 does not divide 56: the tail
               is guarded and split off the full tiles by the code generator
  fuse         batch, filter tiles and row tiles into one parallel loop
  compute_at   the accumulator inside each column tile, reductions outermost
  unroll       the 3 x 3 window, filters and rows of the tile; vectorize its columns

    .venv/bin/python examples/te_conv2d_schedule.py --channels 64 --size 56 --rounds 7
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
from tensortune.te.workloads import conv2d_nchw


def hand_schedule(w, ft: int = 8, yt: int = 2, xt: int = 16) -> te.Schedule:
    conv = w.output
    s = te.create_schedule(w.outputs)
    pad = s["pad"]
    pad.parallel(pad.fuse("b", "ch"))
    pad.vectorize("z")
    CL = s.cache_write(conv)
    c = s[conv]
    fo, fi = c.split("f", ft)
    yo, yi = c.split("y", yt)
    xo, xi = c.split("x", xt)
    c.reorder("b", fo, yo, xo, fi, yi, xi)
    c.parallel(c.fuse("b", fo, yo))
    c.vectorize(xi)
    s[CL].compute_at(c, xo)
    s[CL].reorder("rc", "rr", "rs", "b", "f", "y", "x")
    s[CL].vectorize("x")
    s[CL].unroll("rr")  # the 3 x 3 window unrolled: no short loops around the tile
    s[CL].unroll("rs")
    s[CL].unroll("f")
    s[CL].unroll("y")
    return s


def im2col_conv(data: np.ndarray, weight: np.ndarray, stride: int = 1, padding: int = 1) -> np.ndarray:
    n, c, h, w = data.shape
    k, _, r, s = weight.shape
    padded = np.pad(data, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    win = np.lib.stride_tricks.sliding_window_view(padded, (r, s), axis=(2, 3))[:, :, ::stride, ::stride]
    oh, ow = win.shape[2], win.shape[3]
    cols = win.transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, c * r * s)
    return (cols @ weight.reshape(k, -1).T).reshape(n, oh, ow, k).transpose(0, 3, 1, 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--channels", type=int, default=64)
    ap.add_argument("--filters", type=int, default=64)
    ap.add_argument("--size", type=int, default=56)
    ap.add_argument("--stride", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args()
    w = conv2d_nchw(args.batch, args.channels, args.size, args.size, args.filters, 3, 3, args.stride, 1)
    schedules = {"default": te.create_schedule(w.outputs), "hand-written": hand_schedule(w)}
    print(schedules["hand-written"])
    kernels = {name: te.build(s, w.args) for name, s in schedules.items()}

    rng = np.random.default_rng(0)
    data = rng.standard_normal(w.inputs[0].shape, dtype=np.float32)
    weight = rng.standard_normal(w.inputs[1].shape, dtype=np.float32)
    out = np.empty(w.output.shape, np.float32)
    want = im2col_conv(data, weight, args.stride)
    for k in kernels.values():
        check_close(k(data, weight), want, 1e-3, 1e-3)
    calls = {name: (lambda k=k: k(data, weight, out)) for name, k in kernels.items()}
    calls["numpy im2col"] = lambda: im2col_conv(data, weight, args.stride)
    try:
        import torch
        td, tw = torch.from_numpy(data), torch.from_numpy(weight)
        check_close(torch.nn.functional.conv2d(td, tw, stride=args.stride, padding=1).numpy(), want, 1e-3, 1e-3)
        calls["torch"] = lambda: torch.nn.functional.conv2d(td, tw, stride=args.stride, padding=1)
    except ImportError:
        pass
    timer = Timer(warmup_seconds=0.05, min_repeats=3, budget_seconds=0.3)
    medians: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(args.rounds):
        for name, fn in calls.items():
            if name == "default" and len(medians[name]) >= 3:
                continue
            medians[name].append(float(np.median(timer.time(fn))))
    result = {name: float(np.median(v)) for name, v in medians.items()}
    print(f"\nconv2d NCHW {w.output.shape} <- {w.inputs[0].shape} * {w.inputs[1].shape}, stride {args.stride}, on "
          f"{platform.processor() or platform.machine()}, {time.strftime('%Y-%m-%d')}, {args.rounds} interleaved "
          "rounds (medians)")
    print(f"{'schedule':14s} {'ms':>9s} {'GFLOP/s':>9s} {'vs default':>11s}")
    for name, t in result.items():
        print(f"{name:14s} {t * 1e3:9.2f} {w.flops / t / 1e9:9.1f} {result['default'] / t:10.1f}x")
    for peer in ("numpy im2col", "torch"):
        if peer in result:
            print(f"hand-written vs {peer}: {result[peer] / result['hand-written']:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"shape": dict(w.key), "seconds": result,
                       "gflops": {k: w.flops / t / 1e9 for k, t in result.items()},
                       "steps": schedules["hand-written"].to_json()}, f, indent=1)


if __name__ == "__main__":
    main()
