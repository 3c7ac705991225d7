"""GPU measurement, for real: faults survived, timing spread, parallel vs serial compilation.

Three parts, in one run (write JSON to $OUT or --out, print a table last):

1. faults: a Triton fp16 matmul tuned over good configurations and four real faults (an
   out-of-bounds write, an infinite loop, a configuration over the shared-memory limit, a
   wrong result), built by the parallel precompiler and run by GpuRunner in an isolated
   worker; every result goes to a real SQLite database, and the winner is confirmed by
   interleaved re-timing.
2. spread: repeated CudaTimer measurements of a 4096^3 fp16 matmul (> 50 us) -- median
   absolute deviation over median, within a call and across calls -- beside
   triton.testing.do_bench on the same kernel; and a 1M-element add with and without
   CUDA-graph replay.
3. compile: 200 matmul configurations compiled by the process pool, and one after
   another in one process through Triton's own JIT path (what triton.autotune does),
   each from a cold cache; then a fresh process checks that every precompiled
   configuration is a cache hit under the real driver.

Usage (on a CUDA machine):  PYTHONPATH=src python benchmarks/gpu_measure.py
Dry run on a CPU:          PYTHONPATH=src python benchmarks/gpu_measure.py --cpu
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import triton
import triton.language as tl

from tensortune.db import Database, Target, Workload
from tensortune.measure.cuda_timer import CudaTimer
from tensortune.measure.gpu import GpuRunner, GpuTask, TensorArg, confirmed_result
from tensortune.measure.triton_compile import AdaptiveTimeout, compile_triton, kernel_reference, triton_builder
from tensortune.space import Config, Space
from tensortune.tuner import Tuner


@triton.jit
def matmul_kernel(a, b, c, flag, M, N, K, sam, sak, sbk, sbn, scm, scn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr = 8, FAULT: tl.constexpr = 0):
    """C = A @ B. FAULT 1 writes far out of bounds, 2 spins forever, 3 skips the last K tile."""
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    group = GROUP_M * num_n
    first_m = (pid // group) * GROUP_M
    size_m = min(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % size_m
    pid_n = (pid % group) // size_m
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a + rm[:, None] * sam + rk[None, :] * sak
    b_ptrs = b + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    tiles = tl.cdiv(K, BLOCK_K)
    if FAULT == 3:
        tiles = tiles - 1
    if FAULT == 2:
        spin = tl.load(flag)
        while spin > 0:
            spin = tl.load(flag, volatile=True)
    for k in range(0, tiles):
        mask_k = rk < K - k * BLOCK_K
        x = tl.load(a_ptrs, mask=(rm[:, None] < M) & mask_k[None, :], other=0.0)
        y = tl.load(b_ptrs, mask=mask_k[:, None] & (rn[None, :] < N), other=0.0)
        acc = tl.dot(x, y, acc)
        a_ptrs += BLOCK_K * sak
        b_ptrs += BLOCK_K * sbk
    c_ptrs = c + rm[:, None] * scm + rn[None, :] * scn
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    if FAULT == 1:
        c_ptrs += 1 << 40  # two terabytes past the end: an illegal address
    tl.store(c_ptrs, acc.to(c.dtype.element_ty), mask=mask)


def mm(bm, bn, bk, stages, warps, fault=0):
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_stages": stages, "num_warps": warps, "FAULT": fault}


VARIANTS = {
    "good_128x256x64_s3_w8": mm(128, 256, 64, 3, 8),
    "good_128x128x64_s4_w4": mm(128, 128, 64, 4, 4),
    "good_128x256x64_s4_w8": mm(128, 256, 64, 4, 8),
    "oob_write": mm(128, 128, 64, 4, 4, fault=1),
    "good_256x128x64_s3_w8": mm(256, 128, 64, 3, 8),
    "infinite_loop": mm(64, 64, 32, 3, 4, fault=2),
    "good_128x128x32_s4_w4": mm(128, 128, 32, 4, 4),
    "smem_over_limit": mm(256, 256, 128, 5, 8),
    "wrong_result": mm(128, 128, 64, 4, 4, fault=3),
    "good_64x128x64_s4_w4": mm(64, 128, 64, 4, 4),
    "good_128x64x64_s4_w4": mm(128, 64, 64, 4, 4),
}
EXPECTED = {"oob_write": "crashed", "infinite_loop": "timeout", "smem_over_limit": "out_of_resources",
            "wrong_result": "wrong_result"}


def kernel_config(config):
    return VARIANTS[config["variant"]] if "variant" in config else dict(config)


def launch_matmul(config, a, b, c, flag, M, N, K):
    cfg = kernel_config(config)
    grid = (triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"]),)
    matmul_kernel[grid](a, b, c, flag, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                        c.stride(0), c.stride(1), **cfg)


def reference_matmul(a, b, c, flag, M, N, K):
    return (a.float() @ b.float()).to(a.dtype)


def task_args(M, N, K):
    return (TensorArg((M, K), "float16"), TensorArg((K, N), "float16"), TensorArg((M, N), "float16", output=True),
            TensorArg((1,), "int32", init="ones"), M, N, K)


def compile_args(M, N, K):
    """The kernel's positional arguments as the launch passes them (strides decide specialisation)."""
    a, b, c, flag = task_args(M, N, K)[:4]
    return [a, b, c, flag, M, N, K, K, 1, N, 1, N, 1]


def compile_variant(ref, args, target, max_shared, config):
    return compile_triton(ref, args, target, max_shared, Config(kernel_config(config)))


# -- part 1: faults ---------------------------------------------------------------------

def run_faults(opts, out_dir: Path) -> dict:
    import functools

    from tensortune.measure.triton_compile import ParallelCompiler, warm_triton

    M = N = K = opts.size
    names = list(VARIANTS)
    space = Space({"variant": names})
    timer = CudaTimer(clock="host", budget_seconds=0.0, warmup_seconds=0.0, min_repeats=2) if opts.cpu \
        else CudaTimer(budget_seconds=0.1)
    task = GpuTask(launch_matmul, task_args(M, N, K), reference=reference_matmul, seed=1,
                   device="cpu" if opts.cpu else "cuda", timer=timer, name=f"matmul{M}")
    env = {"TRITON_INTERPRET": "1"} if opts.cpu else {}
    db_path = Path(tempfile.mkdtemp()) / "faults.db"
    db = Database(db_path)
    workload = Workload.make("bench-matmul-faults", source=str(VARIANTS), key={"M": M, "N": N, "K": K})
    target = Target.make("cuda" if not opts.cpu else "cpu", opts.device_name, opts.arch,
                         {"triton": triton.__version__})
    if opts.cpu:
        from tensortune.measure import NullBuilder
        builder = NullBuilder()
    else:
        tgt = opts.target
        compile_fn = functools.partial(compile_variant, kernel_reference(matmul_kernel),
                                       tuple(compile_args(M, N, K)), tgt, None)
        builder = ParallelCompiler(compile_fn, jobs=len(names), warm=functools.partial(warm_triton, tgt),
                                   timeout=AdaptiveTimeout(initial=120), stream=True)
    start = time.perf_counter()
    if opts.cpu:  # the worker re-imports this script at start: the kernel must be interpreted there
        os.environ["TRITON_INTERPRET"] = "1"
    with GpuRunner(task, timeout=opts.run_timeout, env=env) as runner:
        result = Tuner(space, runner, workload=workload, target=target, db=db, builder=builder,
                       strategy="exhaustive", budget=len(names), batch_size=len(names), progress=False).run()
        confirmation = runner.confirm(result.history, within=0.03, rounds=5)
        restarts = runner.restarts
    if opts.cpu:
        os.environ["TRITON_INTERPRET"] = "0"
    if hasattr(builder, "close"):
        builder.close()
    if confirmation is not None:
        best = next(r for r in result.history if r.config == confirmation.winner)
        db.add(workload, target, confirmed_result(best, confirmation), strategy="confirm")
    seconds = time.perf_counter() - start
    records = db.records(workload, target)
    db.close()
    shutil.copy(db_path, out_dir / "faults.db")
    rows = []
    for name in names:
        r = next(x for x in result.history if x.config["variant"] == name)
        rows.append({"variant": name, "error": str(r.error) if r.error else None,
                     "expected": EXPECTED.get(name), "median_us": r.time * 1e6 if r.ok else None,
                     "spread": r.spread if r.ok else None, "message": r.message[:300],
                     "compile_seconds": round(r.compile_seconds, 3), "restarted": bool(r.extra.get("worker_restarted"))})
    survived = all((row["error"] or None) == row["expected"] for row in rows)
    return {"rows": rows, "records_in_db": len(records), "candidates": len(names), "worker_restarts": restarts,
            "seconds": round(seconds, 2), "all_faults_as_expected": survived,
            "winner": dict(confirmation.winner) if confirmation else None,
            "confirmation": confirmation.as_extra() if confirmation else None,
            "confirmation_medians_us": {c["variant"]: m * 1e6 for c, m in confirmation.medians.items()}
            if confirmation else None}


# -- part 2: spread ---------------------------------------------------------------------

def mad_over_median(values):
    med = statistics.median(values)
    return statistics.median(abs(v - med) for v in values) / med


def run_spread(opts) -> dict:
    import torch
    from triton.testing import do_bench, do_bench_cudagraph

    M = N = K = 4096
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(M, K, device="cuda", dtype=torch.float16, generator=g)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16, generator=g)
    c = torch.empty(M, N, device="cuda", dtype=torch.float16)
    flag = torch.ones(1, device="cuda", dtype=torch.int32)
    cfg = Config(VARIANTS["good_128x256x64_s3_w8"])

    def kernel():
        launch_matmul(cfg, a, b, c, flag, M, N, K)
    kernel()
    torch.cuda.synchronize()
    err = float((c.float() - (a.float() @ b.float())).norm() / (a.float() @ b.float()).norm())
    calls = opts.spread_calls
    timers = {"default": CudaTimer(), "cooldown_2x": CudaTimer(cooldown=2.0),
              "warmup_100ms": CudaTimer(warmup_seconds=0.1), "no_cooldown": CudaTimer(cooldown=0.0)}
    runs: dict[str, list] = {name: [] for name in [*timers, "do_bench"]}
    rng = random.Random(0)
    for _ in range(calls):  # the variants interleaved, so drift (heat, clocks) touches all alike
        order = list(runs)
        rng.shuffle(order)
        for name in order:
            if name == "do_bench":
                try:
                    runs[name].append([t * 1e-3 for t in do_bench(kernel, return_mode="all")])
                except (AssertionError, TypeError, ValueError):  # an older triton: the median only
                    runs[name].append([do_bench(kernel, return_mode="median") * 1e-3])
            else:
                runs[name].append(list(timers[name].time(kernel)))
    variants = {}
    for name, per_call in runs.items():
        medians = [statistics.median(t) for t in per_call]
        within = [mad_over_median(t) for t in per_call]
        variants[name] = {"median_us": statistics.median(medians) * 1e6, "runs_per_call": statistics.median(map(len, per_call)),
                          "within_call_mad_over_median": within,
                          "within_median": statistics.median(within), "within_max": max(within),
                          "across_calls_mad_over_median": mad_over_median(medians),
                          "medians_us": [m * 1e6 for m in medians]}
    timer = timers["default"]
    torch_mm = [statistics.median(timer.time(lambda: torch.matmul(a, b))) for _ in range(3)]
    x = torch.randn(1 << 20, device="cuda")
    y = torch.randn(1 << 20, device="cuda")
    small = lambda: torch.add(x, y)  # noqa: E731
    small_plain = [statistics.median(CudaTimer(budget_seconds=0.05).time(small)) for _ in range(5)]
    small_graph = [statistics.median(CudaTimer(budget_seconds=0.05, cuda_graph=True).time(small)) for _ in range(5)]
    small_bench = [do_bench_cudagraph(small, rep=50, return_mode="median") * 1e-3 for _ in range(5)]
    flops = 2 * M * N * K
    return {
        "kernel": "triton fp16 matmul 4096^3, 128x256x64 s3 w8", "relative_error_vs_fp32": err,
        "calls": calls, "variants": variants,
        "tflops": flops / (variants["default"]["median_us"] * 1e-6) / 1e12,
        "torch_matmul_median_us": [m * 1e6 for m in torch_mm],
        "add_1M_plain_us": [m * 1e6 for m in small_plain], "add_1M_graph_us": [m * 1e6 for m in small_graph],
        "add_1M_do_bench_cudagraph_us": [m * 1e6 for m in small_bench],
    }


# -- part 3: compile --------------------------------------------------------------------

def compile_configs(n: int) -> list[Config]:
    grid = itertools.product([32, 64, 128, 256], [64, 128, 256], [32, 64, 128], [3, 4, 5], [4, 8])
    configs = [Config(BLOCK_M=m, BLOCK_N=nn, BLOCK_K=k, num_stages=s, num_warps=w) for m, nn, k, s, w in grid]
    random.Random(0).shuffle(configs)
    return configs[:n]


def serial_compile(configs_json: str, target_text: str) -> None:
    """Child process: compile one after another through triton's JIT warmup; print JSON."""
    from tensortune.measure.triton_compile import _warmup_arg, warm_triton

    target = tuple(json.loads(target_text)) if target_text != "gpu" else None
    warm_triton(target)
    args = [_warmup_arg(x) for x in compile_args(4096, 4096, 4096)]
    hashes, per_config, failures = [], [], 0
    for cfg in json.loads(configs_json):
        t0 = time.perf_counter()
        try:
            hashes.append(str(matmul_kernel.warmup(*args, grid=(1,), **cfg).hash))
        except Exception:  # noqa: BLE001 - counted, as triton.autotune would skip it
            hashes.append(None)
            failures += 1
        per_config.append(time.perf_counter() - t0)
    print("SERIAL_RESULT " + json.dumps({"hashes": hashes, "seconds": per_config, "failures": failures}))


def run_compile(opts) -> dict:
    configs = compile_configs(opts.compile_configs)
    root = Path(tempfile.mkdtemp(prefix="tt-compile-"))
    parallel_cache, serial_cache = root / "parallel", root / "serial"
    env = {"TRITON_CACHE_DIR": str(parallel_cache)}
    t0 = time.perf_counter()
    builder = triton_builder(matmul_kernel, compile_args(4096, 4096, 4096), target=opts.target, jobs=opts.jobs,
                             env=env, timeout=AdaptiveTimeout(initial=180))
    results = builder.build(configs)
    parallel_seconds = time.perf_counter() - t0
    builder.close()
    ok = [r for r in results if r.ok]
    target_text = "gpu" if not opts.cpu else json.dumps(list(opts.target))
    payload = json.dumps([dict(c) for c in configs])
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, __file__, "--serial-compile", payload, target_text],
                          env=dict(os.environ, TRITON_CACHE_DIR=str(serial_cache)), capture_output=True, text=True)
    serial_seconds = time.perf_counter() - t0
    serial = _child_result(proc, "SERIAL_RESULT")
    # a fresh process with the real driver: are the precompiled binaries cache hits?
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, __file__, "--serial-compile", payload, target_text],
                          env=dict(os.environ, TRITON_CACHE_DIR=str(parallel_cache)), capture_output=True, text=True)
    reload_seconds = time.perf_counter() - t0
    reload = _child_result(proc, "SERIAL_RESULT")
    hits = sum(1 for r, h in zip(results, reload["hashes"]) if r.ok and h == r.artifact.kernel_hash)
    compile_times = sorted(r.compile_seconds for r in ok)
    shutil.rmtree(root, ignore_errors=True)
    return {
        "configs": len(configs), "jobs": builder.jobs, "parallel_seconds": round(parallel_seconds, 2),
        "serial_seconds": round(serial_seconds, 2), "ratio_parallel_over_serial": parallel_seconds / serial_seconds,
        "parallel_ok": len(ok), "parallel_failed": {str(r.config): f"{r.error}: {r.message[:160]}"
                                                   for r in results if not r.ok},
        "serial_failures": serial["failures"], "serial_sum_of_compiles": round(sum(serial["seconds"]), 2),
        "distinct_binaries": len({r.artifact.binary_digest for r in ok}),
        "same_key_as_serial": sum(1 for r, h in zip(results, serial["hashes"]) if r.ok and h == r.artifact.kernel_hash),
        "cache_hits_in_fresh_process": hits, "reload_seconds": round(reload_seconds, 2),
        "reload_median_ms": statistics.median(reload["seconds"]) * 1e3,
        "compile_seconds_median": compile_times[len(compile_times) // 2] if compile_times else None,
        "compile_seconds_max": compile_times[-1] if compile_times else None,
        "final_adaptive_timeout": round(builder.timeout.current(), 1),
    }


def _child_result(proc: subprocess.CompletedProcess, tag: str) -> dict:
    for line in proc.stdout.splitlines():
        if line.startswith(tag + " "):
            return json.loads(line[len(tag) + 1:])
    raise RuntimeError(f"child failed (exit {proc.returncode}): {proc.stderr[-3000:]}")


# -- main -------------------------------------------------------------------------------

def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serial-compile":
        serial_compile(sys.argv[2], sys.argv[3])
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cpu", action="store_true", help="dry run on a CPU (interpreter, sm_90 compile target)")
    p.add_argument("--quick", action="store_true", help="fewer compile configurations and spread calls")
    p.add_argument("--parts", default="faults,spread,compile")
    p.add_argument("--out", default=os.environ.get("OUT", "bench-out"))
    p.add_argument("--jobs", type=int, default=None)
    opts = p.parse_args()
    out_dir = Path(opts.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    opts.size = 64 if opts.cpu else 4096
    opts.run_timeout = 20 if opts.cpu else 15
    opts.compile_configs = 8 if opts.cpu else (32 if opts.quick else 200)
    opts.spread_calls = 5 if opts.quick else 20
    report: dict = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "python": sys.version.split()[0],
                    "triton": triton.__version__, "cpus": os.cpu_count()}
    if opts.cpu:
        os.environ["TRITON_INTERPRET"] = "0"
        opts.target, opts.device_name, opts.arch = ("cuda", 90, 32), "cpu-dry-run", "cpu"
    else:
        import torch

        from tensortune.measure.triton_compile import detect_target
        opts.target = detect_target()
        opts.device_name = torch.cuda.get_device_name()
        opts.arch = f"sm_{opts.target[1]}"
        report.update(torch=torch.__version__, device=opts.device_name, target=list(opts.target))
    parts = opts.parts.split(",")
    for part, fn in (("faults", lambda: run_faults(opts, out_dir)), ("spread", lambda: run_spread(opts)),
                     ("compile", lambda: run_compile(opts))):
        if part not in parts or (part == "spread" and opts.cpu):
            continue
        t0 = time.perf_counter()
        try:
            report[part] = fn()
        except Exception as exc:  # noqa: BLE001 - one part failing must not lose the others
            import traceback
            report[part] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}
        report[part + "_wall_seconds"] = round(time.perf_counter() - t0, 1)
        (out_dir / "gpu_measure.json").write_text(json.dumps(report, indent=1, default=str))
        print(f"[{part}] done in {report[part + '_wall_seconds']} s", flush=True)
    print_table(report)


def print_table(r: dict) -> None:
    print(f"\n== gpu_measure on {r.get('device', 'cpu')} (triton {r['triton']}, {r['cpus']} cpus) ==")
    f = r.get("faults")
    if f and "rows" in f:
        print(f"{'variant':24} {'expected':17} {'got':17} {'median us':>10} {'restart':>7}")
        for row in f["rows"]:
            med = f"{row['median_us']:.1f}" if row["median_us"] else "-"
            print(f"{row['variant']:24} {str(row['expected'] or 'ok'):17} {str(row['error'] or 'ok'):17} "
                  f"{med:>10} {str(row['restarted']):>7}")
        print(f"faults as expected: {f['all_faults_as_expected']}; records in db: {f['records_in_db']} "
              f"({f['candidates']} candidates + the confirmed winner); worker restarts: {f['worker_restarts']}; "
              f"winner {f['winner']} confidence {f['confirmation']}")
    elif f:
        print("faults FAILED:", f.get("error"))
    s = r.get("spread")
    if s and "calls" in s:
        print(f"spread, {s['kernel']} ({s['tflops']:.0f} TFLOP/s), {s['calls']} calls of each, interleaved:")
        print(f"  {'timer':14} {'median us':>10} {'runs/call':>9} {'within-call MAD/med':>20} {'max':>7} "
              f"{'across calls':>12}")
        for name, v in s["variants"].items():
            print(f"  {name:14} {v['median_us']:10.1f} {v['runs_per_call']:9.0f} {v['within_median'] * 100:19.3f}% "
                  f"{v['within_max'] * 100:6.2f}% {v['across_calls_mad_over_median'] * 100:11.3f}%")
        print(f"  torch.matmul {statistics.median(s['torch_matmul_median_us']):.1f} us; add 1M: plain "
              f"{statistics.median(s['add_1M_plain_us']):.2f}, graph {statistics.median(s['add_1M_graph_us']):.2f}, "
              f"do_bench_cudagraph {statistics.median(s['add_1M_do_bench_cudagraph_us']):.2f} us")
    elif s:
        print("spread FAILED:", s.get("error"))
    c = r.get("compile")
    if c and "configs" in c:
        print(f"compile {c['configs']} matmul configs: parallel ({c['jobs']} procs) {c['parallel_seconds']} s, "
              f"serial {c['serial_seconds']} s, ratio {c['ratio_parallel_over_serial']:.3f}; ok "
              f"{c['parallel_ok']}, distinct binaries {c['distinct_binaries']}, cache hits in a fresh "
              f"process {c['cache_hits_in_fresh_process']} (median {c['reload_median_ms']:.1f} ms)")
    elif c:
        print("compile FAILED:", c.get("error"))


if __name__ == "__main__":
    main()
