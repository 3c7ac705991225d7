"""Tensor expressions auto-scheduled for the GPU, side by side with torch eager and torch.compile.

Workloads (float16): matmul 4096^3 and 256x14336x4096, matmul + bias + GELU (4096^3),
softmax over the rows of 4096x8192, layer norm of 8192x4096, conv2d NCHW (N=32, C=64,
H=W=56, K=64, 3x3, padding 1). Each is written as tensor expressions, auto-scheduled
by `autoschedule_cuda` (sketch seeds, then evolutionary search with the XGBoost cost
model; candidates compiled in parallel, checked against a float32 reference and timed
in an isolated worker; every record in the database), and compared with torch eager
(cuBLAS / cuDNN / ATen kernels) and torch.compile(mode="max-autotune"), all timed by the
same CudaTimer (CUDA events, L2 flushed before every run, median).

Phases (one call to the GPU is at most 10 minutes, so tuning and the comparison can be
two runs; the comparison rebuilds each tuned kernel from the records without searching):
  --phase tune     tune every workload into --db, write tune.json (trials, seconds)
  --phase compare  build the recorded winners, compile torch.compile max-autotune, time
                   all three side by side, write gpu_autoschedule.json, print the table
  --phase all      both in one process

Usage (on a CUDA machine):
  PYTHONPATH=src python benchmarks/gpu_autoschedule.py --phase all --out $OUT
Dry run on a CPU (tiny shapes, Triton interpreter, no torch.compile):
  PYTHONPATH=src python benchmarks/gpu_autoschedule.py --cpu
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tensortune import te
from tensortune.te import workloads

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_common as gc  # noqa: E402

START = time.perf_counter()


@dataclass(frozen=True)
class Workload:
    name: str
    make: Callable[[], Any]  # -> te computation
    eager: Callable[..., Any]  # torch on the inputs
    trials: int
    fused: bool  # the figure: beat eager and match torch.compile (else: within 10% of the library)
    flops: float
    bytes: float


def matmul_bias_gelu(m: int, n: int, k: int, dtype: str = "float16") -> Any:
    A = te.placeholder((m, k), dtype, "A")
    B = te.placeholder((k, n), dtype, "B")
    bias = te.placeholder((n,), dtype, "bias")
    r = te.reduce_axis(k, "k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")

    def gelu(i: Any, j: Any) -> Any:
        x = C[i, j] + bias[j]
        return 0.5 * x * (1.0 + te.erf(x * 0.7071067811865476))

    D = te.compute((m, n), gelu, name="D")
    return workloads.Computation("matmul_bias_gelu", (A, B, bias), (D,), 2.0 * m * n * k + 8.0 * m * n)


def suite(cpu: bool) -> list[Workload]:
    import torch
    import torch.nn.functional as F

    if cpu:  # tiny shapes for the interpreter
        mm, tall, rows, ln, conv = (64, 64, 64), (16, 96, 64), (16, 128), (16, 64), (2, 8, 6, 6, 8)
    else:
        mm, tall, rows, ln, conv = (4096, 4096, 4096), (256, 14336, 4096), (4096, 8192), (8192, 4096), \
            (32, 64, 56, 56, 64)
    n, c, h, w, k = conv
    half = 2.0
    return [
        Workload(f"matmul {mm[0]}^3", lambda: workloads.matmul(*mm, "float16"), lambda a, b: a @ b, 64, False,
                 2.0 * mm[0] * mm[1] * mm[2], half * (mm[0] * mm[2] + mm[2] * mm[1] + mm[0] * mm[1])),
        Workload(f"matmul {tall[0]}x{tall[1]}x{tall[2]}", lambda: workloads.matmul(*tall, "float16"),
                 lambda a, b: a @ b, 64, False, 2.0 * tall[0] * tall[1] * tall[2],
                 half * (tall[0] * tall[2] + tall[2] * tall[1] + tall[0] * tall[1])),
        Workload(f"matmul+bias+gelu {mm[0]}^3", lambda: matmul_bias_gelu(*mm),
                 lambda a, b, bias: F.gelu(torch.addmm(bias, a, b)), 48, True,
                 2.0 * mm[0] * mm[1] * mm[2], half * (mm[0] * mm[2] + mm[2] * mm[1] + mm[0] * mm[1] + mm[1])),
        Workload(f"softmax {rows[0]}x{rows[1]}", lambda: workloads.softmax(*rows, "float16"),
                 lambda x: torch.softmax(x, dim=-1), 32, True, 5.0 * rows[0] * rows[1], half * 2 * rows[0] * rows[1]),
        Workload(f"layer_norm {ln[0]}x{ln[1]}", lambda: workloads.layer_norm(*ln, dtype="float16"),
                 lambda x, g, b: F.layer_norm(x, (ln[1],), g, b, 1e-5), 32, True, 8.0 * ln[0] * ln[1],
                 half * (2 * ln[0] * ln[1] + 2 * ln[1])),
        Workload(f"conv2d {n}x{c}x{h}x{w} k{k} 3x3",
                 lambda: workloads.conv2d_nchw(n, c, h, w, k, 3, 3, 1, 1, "float16"),
                 lambda x, wt: F.conv2d(x, wt, padding=1), 64, True, 2.0 * n * k * h * w * c * 9,
                 half * (n * c * h * w + k * c * 9 + n * k * h * w)),
    ]


def inputs_for(comp: Any, device: str, seed: int) -> list[Any]:
    import torch

    g = torch.Generator(device="cpu").manual_seed(seed)
    return [torch.randn(t.shape, generator=g).to(device=device, dtype=torch.float16) for t in comp.inputs]


def median(times: tuple[float, ...]) -> float:
    return statistics.median(times) if times else math.inf


def tune_phase(work: list[Workload], args: argparse.Namespace, report: dict[str, Any]) -> None:
    from tensortune.backends.triton import autoschedule_cuda
    from tensortune.db import Database

    db = Database(args.db)
    for wl in work:
        comp = wl.make()
        trials = max(4, int(wl.trials * args.budget_scale))
        print(f"[tune] {wl.name}: {trials} trials", flush=True)
        start = time.perf_counter()
        kernel = autoschedule_cuda(comp.output, budget=trials, db=db, retune=True, progress=False,
                                   cache_dir=args.cache, jobs=args.jobs)
        seconds = time.perf_counter() - start
        errors: dict[str, int] = {}
        from tensortune.backends.triton.tune import cuda_target, cuda_workload
        from tensortune.backends.triton.patterns import analyze
        from tensortune.backends.triton.source import GenOptions
        from tensortune.backends.triton.kernel import interpreting

        plan = analyze(comp.output)
        records = db.records(cuda_workload(plan, GenOptions("float16", interpreting())), cuda_target(interpreting()))
        for r in records:
            if not r.ok:
                kind = str(getattr(r.error, "value", r.error))
                errors[kind] = errors.get(kind, 0) + 1
        report["tune"][wl.name] = {
            "trials": kernel.tuning.trials, "tuning_seconds": round(seconds, 2),
            "search_seconds": round(kernel.tuning.seconds, 2), "failures": kernel.tuning.failures,
            "errors": errors, "best_time_in_search": kernel.tuning.best_time, "config": dict(kernel.config),
            "confirmation": dict(kernel.tuning.extra), "pattern": plan.kind, "records": len(records),
            "source": kernel.source,
        }
        print(f"[tune] {wl.name}: {kernel.tuning.trials} trials in {seconds:.1f} s, best "
              f"{kernel.tuning.best_time * 1e6:.1f} us, failures {errors}, config {dict(kernel.config)}", flush=True)
        write(args, report)


def compare_phase(work: list[Workload], args: argparse.Namespace, report: dict[str, Any]) -> None:
    import torch

    from tensortune.backends.triton import autoschedule_cuda
    from tensortune.db import Database

    device = "cpu" if args.cpu else "cuda"
    db = Database(args.db)
    t = gc.make_timer(args.cpu, budget_seconds=0.3, warmup_seconds=0.05, min_repeats=20, max_repeats=2000)
    for wl in work:
        comp = wl.make()
        row: dict[str, Any] = {"workload": wl.name, "fused": wl.fused, "flops": wl.flops, "bytes": wl.bytes}
        kernel = autoschedule_cuda(comp.output, budget=4, db=db, progress=False, cache_dir=args.cache, jobs=args.jobs)
        row["tensortune_from"] = kernel.tuning.source
        row["config"] = dict(kernel.config)
        x = inputs_for(comp, device, seed=123)
        eager_out = wl.eager(*x)
        tt_out = kernel(*x)
        prev = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        want = wl.eager(*[v.float() for v in x])  # the float32 reference
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = prev
        row["error_tensortune_vs_fp32"] = gc.rel_error(tt_out, want)
        row["error_eager_vs_fp32"] = gc.rel_error(eager_out, want)
        impls: dict[str, Callable[[], Any]] = {"eager": lambda: wl.eager(*x), "tensortune": lambda: kernel(*x)}
        late = args.deadline and time.perf_counter() - START > args.deadline
        if late:
            row["compile_skipped"] = f"past --deadline {args.deadline} s"
        if not args.cpu and not args.no_compile and not late:
            # max-autotune as asked, and the same autotuning without CUDA graphs: the graphs copy
            # non-static inputs into their own buffers on every call, which costs more than they save
            # here (the L2 flush before each timed run already hides launch overhead)
            for key, mode in (("compile", "max-autotune"), ("compile_nocg", "max-autotune-no-cudagraphs")):
                torch._dynamo.reset()
                compiled = torch.compile(wl.eager, mode=mode)
                start = time.perf_counter()
                out = compiled(*x)
                torch.cuda.synchronize()
                row[f"{key}_seconds"] = round(time.perf_counter() - start, 2)
                row[f"error_{key}_vs_fp32"] = gc.rel_error(out, want)
                impls[key] = (lambda f=compiled: f(*x))
        times = {}
        for name, fn in impls.items():
            times[name] = t.time(fn)
        for name, ts in times.items():
            row[f"{name}_us"] = median(ts) * 1e6
            row[f"{name}_spread"] = (statistics.median(abs(v - median(ts)) for v in ts) / median(ts)) if ts else None
        tt = row["tensortune_us"]
        row["tensortune_tflops"] = wl.flops / (tt * 1e-6) / 1e12
        row["tensortune_gbps"] = wl.bytes / (tt * 1e-6) / 1e9
        row["speedup_vs_eager"] = row["eager_us"] / tt
        if "compile_us" in row:
            row["best_compile_us"] = min(row["compile_us"], row.get("compile_nocg_us", math.inf))
            row["speedup_vs_compile"] = row["best_compile_us"] / tt
        tuned = report["tune"].get(wl.name, {})
        row["trials"] = tuned.get("trials")
        row["tuning_seconds"] = tuned.get("tuning_seconds")
        if wl.fused:
            ok = row["speedup_vs_eager"] > 1.0 and row.get("speedup_vs_compile", 0.0) >= 1.0
            row["figure"] = "faster than eager and at least torch.compile"
        else:
            ok = row["speedup_vs_eager"] >= 0.9
            row["figure"] = "within 10% of cuBLAS"
        row["figure_met"] = bool(ok)
        report["compare"][wl.name] = row
        print(f"[compare] {wl.name}: tensortune {tt:.1f} us, eager {row['eager_us']:.1f} us"
              + (f", compile {row['compile_us']:.1f} us / no-cudagraphs {row['compile_nocg_us']:.1f} us "
               f"(compile {row['compile_seconds']} s)" if "compile_us" in row else "")
              + f"; errors tt {row['error_tensortune_vs_fp32']:.2e}", flush=True)
        write(args, report)


def write(args: argparse.Namespace, report: dict[str, Any]) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_autoschedule.json").write_text(json.dumps(report, indent=1, default=str))


def table(report: dict[str, Any]) -> str:
    head = (f"{'workload':<28} {'tensortune':>11} {'eager':>9} {'compile*':>9} {'x eager':>8} {'x compile':>9} "
            f"{'TFLOP/s':>8} {'GB/s':>7} {'trials':>6} {'tune s':>7} {'compile s':>9}  figure")
    lines = [head, "-" * len(head)]
    for name, r in report["compare"].items():
        comp = f"{r['best_compile_us']:9.1f}" if "best_compile_us" in r else f"{'-':>9}"
        xc = f"{r['speedup_vs_compile']:9.2f}" if "speedup_vs_compile" in r else f"{'-':>9}"
        lines.append(
            f"{name:<28} {r['tensortune_us']:9.1f}us {r['eager_us']:7.1f}us {comp} {r['speedup_vs_eager']:8.2f} {xc} "
            f"{r['tensortune_tflops']:8.1f} {r['tensortune_gbps']:7.0f} {str(r.get('trials') or '-'):>6} "
            f"{str(r.get('tuning_seconds') or '-'):>7} {str(r.get('compile_seconds', '-')):>9}  "
            f"{'MET' if r['figure_met'] else 'not met'}: {r['figure']}")
    lines.append("compile*: the faster of torch.compile mode='max-autotune' and 'max-autotune-no-cudagraphs'; "
                 "compile s: the first (cold) max-autotune compile")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--phase", choices=["tune", "compare", "all"], default="all")
    parser.add_argument("--out", default=os.environ.get("OUT", "bench-out"))
    parser.add_argument("--db", default=None, help="records database (default: <out>/records.db)")
    parser.add_argument("--tune-json", default=None, help="tuning report of an earlier --phase tune run")
    parser.add_argument("--cache", default=None, help="where generated kernels are written")
    parser.add_argument("--only", default="", help="comma-separated substrings of workload names")
    parser.add_argument("--tune", default="", help="tune only these (substrings); the others come from --db")
    parser.add_argument("--budget-scale", type=float, default=1.0)
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--deadline", type=float, default=0.0,
                        help="seconds after start past which torch.compile is skipped (to end within a time limit)")
    parser.add_argument("--cpu", action="store_true", help="dry run: tiny shapes under TRITON_INTERPRET=1")
    args = parser.parse_args()
    if args.cpu:
        os.environ["TRITON_INTERPRET"] = "1"
        args.budget_scale = min(args.budget_scale, 0.1)
    args.db = args.db or str(Path(args.out) / "records.db")
    args.cache = args.cache or str(Path(args.out) / "kernels")
    work = suite(args.cpu)
    if args.only:
        keys = [k.strip() for k in args.only.split(",") if k.strip()]
        work = [w for w in work if any(k in w.name for k in keys)]
    import torch

    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join(sys.argv),
        "machine": (torch.cuda.get_device_name() if torch.cuda.is_available() else platform.processor() or "cpu"),
        "versions": gc.versions(),
        "cpus": os.cpu_count(), "tune": {}, "compare": {},
    }
    if args.tune_json:
        report["tune"] = json.loads(Path(args.tune_json).read_text()).get("tune", {})
    if args.phase in ("tune", "all"):
        keys = [k.strip() for k in args.tune.split(",") if k.strip()]
        tune_phase([w for w in work if not keys or any(k in w.name for k in keys)], args, report)
    if args.phase in ("compare", "all"):
        compare_phase(work, args, report)
        print()
        print(table(report))
    write(args, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
