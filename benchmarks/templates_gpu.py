"""The GPU matmul template against the GPU auto-scheduler and cuBLAS at equal measurements.

For each shape, `tensortune.template.examples.gpu_matmul` is tuned (`task.tune(budget=T)`:
its knobs over the contraction pattern's options, checked against the NumPy interpreter)
and the same expressions are auto-scheduled (`autoschedule_cuda(budget=T)`: the pattern's
whole sketch, seeds first), both into one records database. Then the two winners and
`torch.matmul` (cuBLAS) are checked against a float32 product on fresh inputs and timed
by one CudaTimer (CUDA events, L2 flushed before every run, median) in interleaved rounds.
Rows go to `<out>/templates_gpu.json` as they are measured; the table comes last.

Usage (on a CUDA machine, from the repository root):
  PYTHONPATH=src python benchmarks/templates_gpu.py --trials 32 --out $OUT
  PYTHONPATH=src python benchmarks/templates_gpu.py --shapes 4096x4096x4096 --out $OUT   # one shape
Smoke test on the CPU (a tiny shape in Triton's interpreter; times mean nothing):
  PYTHONPATH=src python benchmarks/templates_gpu.py --quick --out /tmp/tg
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

SHAPES = ((4096, 4096, 4096), (1024, 1024, 1024), (8192, 8192, 1024), (256, 4096, 4096))
QUICK_SHAPES = ((32, 48, 64),)


def rel_error(got: Any, want: Any) -> float:
    import torch
    got = got.float()
    if not bool(torch.isfinite(got).all()):
        return float("inf")
    return float((got - want).abs().max()) / (float(want.abs().max()) or 1.0)


def run_shape(shape: tuple[int, int, int], args: argparse.Namespace, timer: Any) -> dict[str, Any]:
    import torch

    from tensortune.backends.triton import autoschedule_cuda
    from tensortune.template.examples import gpu_matmul

    m, n, k = shape
    device = "cpu" if args.quick else "cuda"
    task = gpu_matmul(m, n, k)
    start = time.perf_counter()
    tuned = task.tune(budget=args.trials, db=args.db, retune=args.retune, progress=False, seed=args.seed,
                      cache_dir=args.cache)
    t_seconds = time.perf_counter() - start
    start = time.perf_counter()
    auto = autoschedule_cuda(task.outputs[0], budget=args.trials, db=args.db, retune=args.retune, progress=False,
                             seed=args.seed, cache_dir=args.cache)
    a_seconds = time.perf_counter() - start
    gen = torch.Generator(device=device).manual_seed(args.seed + 1)  # fresh inputs, not the tuning's
    a = torch.randn(m, k, device=device, dtype=torch.float16, generator=gen)
    b = torch.randn(k, n, device=device, dtype=torch.float16, generator=gen)
    want = a.float() @ b.float()
    out = torch.empty(m, n, device=device, dtype=torch.float16)
    contenders = {"template": lambda: tuned.kernel(a, b, out=out),
                  "autoschedule": lambda: auto(a, b, out=out),
                  "cublas": lambda: torch.matmul(a, b, out=out)}
    errors = {}
    for name, fn in contenders.items():
        out.fill_(float("nan"))
        fn()
        errors[name] = rel_error(out, want)
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(args.rounds):
        for name, fn in contenders.items():
            times[name].append(statistics.median(timer.time(fn)) * 1e6)
    us = {name: statistics.median(ts) for name, ts in times.items()}
    flops = 2.0 * m * n * k
    row = {"shape": list(shape), "trials": args.trials, "template_space": task.space.size,
           "sketch_space": task.cuda.sketch.space.size, "template_config": dict(tuned.config),
           "template_options": dict(tuned.options), "autoschedule_config": dict(auto.config),
           "measured_now": {"template": tuned.trials, "autoschedule": auto.tuning.trials},
           "tuning_seconds": {"template": round(t_seconds, 1), "autoschedule": round(a_seconds, 1)},
           "errors": errors, "correct": all(e <= 1e-2 for e in errors.values()), "us": us, "rounds_us": times,
           "tflops": {name: flops / (t * 1e-6) / 1e12 for name, t in us.items()}}
    print(f"{m}x{n}x{k}: " + ", ".join(f"{name} {t:.1f} us" for name, t in us.items())
          + f" (errors {', '.join(f'{e:.1e}' for e in errors.values())})", flush=True)
    return row


def table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'shape':<18} {'template us':>12} {'autosched us':>13} {'cuBLAS us':>10} {'tmpl/cuBLAS':>11} "
             f"{'tmpl/auto':>9} {'space':>6}"]
    for r in rows:
        us = r["us"]
        lines.append(f"{'x'.join(map(str, r['shape'])):<18} {us['template']:>12.1f} {us['autoschedule']:>13.1f} "
                     f"{us['cublas']:>10.1f} {us['cublas'] / us['template']:>11.2f} "
                     f"{us['autoschedule'] / us['template']:>9.2f} {r['template_space']:>6}")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=32, help="measurements for each tuner")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="/tmp/templates_gpu")
    p.add_argument("--db", default=None, help="records (default <out>/records.db)")
    p.add_argument("--cache", default=None, help="generated modules (default <out>/modules)")
    p.add_argument("--retune", action="store_true", help="tune again even where --db has records")
    p.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES),
                   help="MxNxK,... (default: %(default)s)")
    p.add_argument("--quick", action="store_true", help="a tiny shape in Triton's interpreter: a smoke test")
    args = p.parse_args()
    try:
        shapes = QUICK_SHAPES if args.quick else tuple(tuple(int(x) for x in s.split("x")) for s in args.shapes.split(","))
    except ValueError:
        print(f"--shapes: expected MxNxK,..., got {args.shapes!r}", file=sys.stderr)
        return 2
    if any(len(s) != 3 for s in shapes):
        print(f"--shapes: expected MxNxK,..., got {args.shapes!r}", file=sys.stderr)
        return 2
    if args.quick:
        os.environ["TRITON_INTERPRET"] = "1"  # before Triton is imported
        args.trials, args.rounds = min(args.trials, 4), 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    args.db = args.db or str(out / "records.db")
    args.cache = args.cache or str(out / "modules")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from tensortune.backends.triton.tune import default_timer

    timer = default_timer(args.quick)
    report: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                              "machine": platform.node(), "trials": args.trials, "rounds": args.rounds, "rows": []}
    if not args.quick:
        import torch
        if not torch.cuda.is_available():
            print("templates_gpu.py needs a CUDA GPU (none is visible); run with --quick for the CPU smoke test "
                  "under Triton's interpreter", file=sys.stderr)
            return 2
        report["gpu"] = torch.cuda.get_device_name()
    for shape in shapes:
        report["rows"].append(run_shape(shape, args, timer))
        (out / "templates_gpu.json").write_text(json.dumps(report, indent=1, default=str))
    print(table(report["rows"]))
    return 0 if all(r["correct"] for r in report["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
