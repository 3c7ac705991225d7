"""A decode step's matrix-vector products: tensortune's tuned kernel against cuBLAS and max-autotune.

The shapes of the Llama decode step (hidden 2048, intermediate 8192, 512-wide key and value
projections; bfloat16, one token) with the epilogues the model fuses into them (SiLU times
the up projection, the residual add), plus two shapes no setting was chosen on (a 7B
model's up projection 1x4096 -> 11008, and four rows 4x3072 -> 768). Each is written as
tensor expressions (`x[M, K] @ W[N, K]^T`, then the epilogue), auto-scheduled by
`CudaSearch` (its sketch offers the matrix-vector kernel, GEMV, beside the tiled `tl.dot`
kernel; every candidate checked against the float32 reference), checked again on fresh
inputs, and timed in interleaved rounds by one CudaTimer (CUDA events, L2 flushed, median)
beside eager torch (`F.linear`, which runs cuBLAS, then the epilogue's ops) and
`torch.compile(mode="max-autotune-no-cudagraphs")` of the same function (compiled while
the run is under `--compile-deadline` seconds). Rates are bytes moved (weight, inputs,
output) per second, as a share of the H100's 3.35 TB/s. The best GEMV and the best tiled
candidate measured by the search are reported apart. Each row goes to `<out>/gemv.json`
as it is measured; the table comes last.

Usage (on a CUDA machine, from the repository root; under 200 s on an H100 with 16 CPUs):
  PYTHONPATH=src python benchmarks/gemv.py --out $OUT
Smoke test on the CPU (tiny shapes, Triton's interpreter, no torch.compile; times mean nothing):
  PYTHONPATH=src python benchmarks/gemv.py --smoke --out /tmp/gemv
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_common as gc  # noqa: E402
import gpu_kernels as gk  # noqa: E402

START = time.perf_counter()
HBM_BYTES_PER_S = 3.35e12  # H100 SXM


@dataclass(frozen=True)
class Shape:
    name: str
    m: int
    n: int
    k: int
    epilogue: str  # none | silu_mul | residual
    tuned_on: bool  # a shape of the decode model the variant's seeds were chosen for


SHAPES = [
    Shape("q-proj", 1, 2048, 2048, "none", True),
    Shape("kv-proj", 1, 512, 2048, "none", True),
    Shape("o-proj+res", 1, 2048, 2048, "residual", True),
    Shape("up-proj", 1, 8192, 2048, "none", True),
    Shape("gate-silu*up", 1, 8192, 2048, "silu_mul", True),
    Shape("down-proj+res", 1, 2048, 8192, "residual", True),
    Shape("7b-up-proj", 1, 11008, 4096, "none", False),
    Shape("4rows-3072->768", 4, 768, 3072, "residual", False),
]
SMOKE = [Shape("q-proj", 1, 48, 96, "none", True), Shape("gate-silu*up", 1, 40, 100, "silu_mul", True),
         Shape("4rows+res", 4, 24, 64, "residual", False)]


def graph(s: Shape, dtype: str) -> Any:
    """The te graph: y = x @ W^T in float32, the epilogue, the cast back to `dtype`."""
    from tensortune import te

    x = te.placeholder((s.m, s.k), dtype, "x")
    w = te.placeholder((s.n, s.k), dtype, "w")
    r = te.reduce_axis(s.k, "r")
    acc = te.compute((s.m, s.n), lambda i, j: te.sum(te.cast(x[i, r], "float32") * te.cast(w[j, r], "float32"),
                                                     axis=r), name="acc")
    if s.epilogue == "none":
        return te.compute((s.m, s.n), lambda i, j: te.cast(acc[i, j], dtype), name="y")
    other = te.placeholder((s.m, s.n), dtype, "up" if s.epilogue == "silu_mul" else "res")
    if s.epilogue == "silu_mul":
        return te.compute((s.m, s.n), lambda i, j: te.cast(acc[i, j] * te.sigmoid(acc[i, j])
                                                           * te.cast(other[i, j], "float32"), dtype), name="y")
    return te.compute((s.m, s.n), lambda i, j: te.cast(acc[i, j] + te.cast(other[i, j], "float32"), dtype),
                      name="y")


def torch_fn(s: Shape) -> Any:
    import torch.nn.functional as F

    if s.epilogue == "silu_mul":
        return lambda x, w, up: F.silu(F.linear(x, w)) * up
    if s.epilogue == "residual":
        return lambda x, w, res: F.linear(x, w) + res
    return lambda x, w: F.linear(x, w)


def moved_bytes(s: Shape, item: int) -> int:
    extra = s.m * s.n if s.epilogue != "none" else 0
    return item * (s.n * s.k + s.m * s.k + s.m * s.n + extra)


def best_of(results: list[Any], gemv: bool) -> dict[str, Any] | None:
    ok = [r for r in results if r.ok and bool(r.config.get("GEMV", False)) == gemv]
    if not ok:
        return None
    best = min(ok, key=lambda r: r.time)
    return {"us": best.time * 1e6, "config": dict(best.config), "measured": len(ok)}


def run_shape(s: Shape, args: argparse.Namespace, tuning: gk.SharedTuning, timer: Any) -> dict[str, Any]:
    import torch

    device = "cpu" if args.quick else "cuda"
    dtype = "bfloat16"
    output = graph(s, dtype)
    kernel, seconds = tuning.kernel(output, args.trials, dtype)
    given = gk.inputs(output, device, seed=args.seed + 1)
    names = [t for t in ("x", "w", "up", "res") if t in given]
    fn = torch_fn(s)
    want = fn(*(given[n].float() for n in names)).float()
    impls = {"tensortune": lambda: kernel(*(given[n] for n in kernel.input_names)),
             "cublas": lambda: fn(*(given[n] for n in names))}
    skipped = {}
    if args.quick or args.no_compile:
        skipped["max-autotune"] = "not run (--smoke or --no-compile)"
    elif time.perf_counter() - START > args.compile_deadline:
        skipped["max-autotune"] = f"past --compile-deadline {args.compile_deadline} s"
    else:
        torch._dynamo.reset()
        compiled = torch.compile(fn, mode="max-autotune-no-cudagraphs", dynamic=False)
        t0 = time.perf_counter()
        try:
            compiled(*(given[n] for n in names))
            torch.cuda.synchronize()
            impls["max-autotune"] = lambda: compiled(*(given[n] for n in names))
        except Exception as exc:  # noqa: BLE001 - the peer's failure is reported, the row goes on
            skipped["max-autotune"] = f"failed: {type(exc).__name__}: {str(exc)[:300]}"
        skipped["max-autotune compile s"] = round(time.perf_counter() - t0, 1)
    errors = {name: gc.rel_error(f(), want) for name, f in impls.items()}
    times = gc.interleaved_us(impls, timer, args.rounds)
    us = {name: statistics.median(ts) for name, ts in times.items()}
    moved = moved_bytes(s, 2)
    row = {"shape": f"{s.m}x{s.k}->{s.n}", "epilogue": s.epilogue, "tuned_on": s.tuned_on, "bytes": moved,
           "us": us, "rounds_us": times, "hbm_share": {n: moved / (t * 1e-6) / HBM_BYTES_PER_S for n, t in us.items()},
           "errors": errors, "correct": errors["tensortune"] <= 3e-2, "notes": skipped,
           "config": dict(kernel.config), "gemv_chosen": bool(kernel.config.get("GEMV", False)),
           "trials": kernel.tuning.trials, "failures": kernel.tuning.failures, "tuning_seconds": round(seconds, 1),
           "best_gemv": best_of(tuning.results, True), "best_tiled": best_of(tuning.results, False)}
    knobs = " ".join(f"{k}={kernel.config[k]}" for k in ("GEMV", "BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_K",
                                                           "num_warps", "num_stages") if k in kernel.config)
    print(f"[{s.name}] {row['shape']}: " + ", ".join(f"{n} {t:.1f}us" for n, t in us.items())
          + f"; {knobs}; {seconds:.0f} s tuning", flush=True)
    return row


def table(rows: dict[str, dict[str, Any]]) -> str:
    head = (f"{'shape':<16} {'M x K -> N':<16} {'epilogue':<9} {'tensortune':>10} {'%HBM':>5} {'cuBLAS':>9} "
            f"{'%HBM':>5} {'max-at':>9} {'%HBM':>5} {'x cuBLAS':>8} {'x max-at':>8} {'GEMV':>5} {'best GEMV':>9} "
            f"{'best tl.dot':>11}  check")
    lines = [head, "-" * len(head)]

    def cell(r: dict[str, Any], name: str) -> str:
        if name not in r["us"]:
            return f"{'-':>9} {'-':>5}"
        return f"{r['us'][name]:7.1f}us {100 * r['hbm_share'][name]:4.0f}%"

    for name, r in rows.items():
        tt = r["us"]["tensortune"]
        x_lib = r["us"]["cublas"] / tt
        x_mat = r["us"]["max-autotune"] / tt if "max-autotune" in r["us"] else None
        g, d = r["best_gemv"], r["best_tiled"]
        lines.append(
            f"{name + ('' if r['tuned_on'] else ' *'):<16} {r['shape']:<16} {r['epilogue']:<9} "
            f"{tt:8.1f}us {100 * r['hbm_share']['tensortune']:4.0f}% {cell(r, 'cublas')} {cell(r, 'max-autotune')} "
            f"{x_lib:8.2f} " + (f"{x_mat:8.2f} " if x_mat else f"{'-':>8} ")
            + f"{'yes' if r['gemv_chosen'] else 'no':>5} "
            + (f"{g['us']:7.1f}us " if g else f"{'-':>9} ") + (f"{d['us']:9.1f}us " if d else f"{'-':>11} ")
            + (" ok" if r["correct"] else " WRONG") + f" {r['errors']['tensortune']:.1e}")
    lines.append("%HBM: bytes moved (weight, inputs, output) per second as a share of 3.35 TB/s; x > 1: tensortune "
                 "is faster; best GEMV / best tl.dot: the fastest matrix-vector and tiled candidates the search "
                 "measured (its own timing); * a shape no setting was chosen on")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.environ.get("OUT", "bench-out/gemv"))
    parser.add_argument("--trials", type=int, default=24, help="search trials per shape")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    parser.add_argument("--shapes", default="", help="comma-separated shape names (default: all)")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile max-autotune")
    parser.add_argument("--compile-deadline", type=float, default=120.0,
                        help="seconds after which max-autotune is no longer compiled for the next shapes")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", dest="quick", action="store_true",
                        help="tiny shapes under TRITON_INTERPRET=1 on the CPU (times mean nothing)")
    args = parser.parse_args()
    if args.quick:
        os.environ["TRITON_INTERPRET"] = "1"  # before Triton is imported
        args.trials, args.rounds = min(args.trials, 4), 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    args.db = str(out / "records.db")
    args.cache = str(Path("/tmp") / ("tt-gemv-smoke" if args.quick else "tt-gemv"))
    args.max_autotune, args.retune, args.deadline, args.no_compile = True, True, 0.0, args.no_compile or args.quick
    gk.ARGS = args
    import torch

    if not args.quick and not torch.cuda.is_available():
        print("gemv.py needs a CUDA GPU; --smoke runs it in Triton's interpreter", file=sys.stderr)
        return 2
    shapes = gc.select_by_name(SMOKE if args.quick else SHAPES, args.shapes, "shapes")
    if shapes is None:
        return 2
    timer = gc.make_timer(args.quick, budget_seconds=0.1, warmup_seconds=0.02, min_repeats=10, max_repeats=1000)
    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join(sys.argv), "machine": gc.machine(args.quick),
        "cpus": os.cpu_count(), "smoke": args.quick, "hbm_bytes_per_s": HBM_BYTES_PER_S, "versions": gc.versions(),
        "rows": {}}
    path = out / "gemv.json"
    by_name = {s.name: s for s in shapes}
    tuning = gk.SharedTuning(args, confirm=not args.quick)  # args.retune: every shape searched
    try:
        gc.measure_rows(by_name, lambda name: run_shape(by_name[name], args, tuning, timer), report, "rows", path,
                        START)
    finally:
        tuning.close()
    rows = report["rows"]
    decode = [r for r in rows.values() if r["tuned_on"]]
    if decode:
        share = sum(r["bytes"] for r in decode) / (sum(r["us"]["tensortune"] for r in decode) * 1e-6) / HBM_BYTES_PER_S
        report["decode_hbm_share"] = share
        path.write_text(json.dumps(report, indent=1, default=str))
    print()
    print(table(rows))
    if decode:
        geo = math.exp(statistics.fmean(math.log(r["us"]["cublas"] / r["us"]["tensortune"]) for r in decode))
        print(f"decode shapes: {100 * report['decode_hbm_share']:.0f}% of HBM bandwidth overall, "
              f"{geo:.2f}x cuBLAS (geometric mean)")
    failed = sorted(report.get("failed", {})) or "none"
    print(f"{len(rows)} shapes in {time.perf_counter() - START:.0f} s; failed {failed}; results in {path}")
    return gc.exit_status(report, "rows")


if __name__ == "__main__":
    sys.exit(main())
