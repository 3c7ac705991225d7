"""@tensortune.autotune against triton.autotune and cuBLAS on an fp16 matmul (H100).

One run, side by side, every phase in its own process so each starts from the state it
claims (a cold Triton cache where it says so):

1. triton.autotune over the 216-configuration grid (BLOCK_M {32,64,128,256} x BLOCK_N
   {64,128,256} x BLOCK_K {32,64,128} x num_stages {3,4,5} x num_warps {4,8}), cold
   Triton cache: seconds from the first launch to its result (compiling one by one
   inside the first timing of each configuration, as Triton does).
2. @tensortune.autotune, the same list and kernel, exhaustive, cold Triton cache, empty
   records: seconds from the first launch to its result (parallel compile streaming into
   an isolated GPU worker, every candidate checked against torch.matmul).
3. @tensortune.autotune with budget=32 and the default strategy, empty records.
4. One process re-times the winners of 1-3 and torch.matmul (cuBLAS) interleaved with
   the same CUDA-event timer (cold L2) and reports TFLOP/s; and the dispatch overhead of
   a tuned launch over a direct launch of the same configuration (host time per launch).
5. A second process with the records of 2 and the compiled kernels on disk: what it
   measures (nothing) and how long its first launch of each shape takes.

Usage (CUDA machine):  PYTHONPATH=src python benchmarks/triton_matmul.py --out OUT
                       [--triton-shapes 4096x4096x4096] (triton.autotune is ~3 min a shape)
                       [--budget-cache cold] (budget runs compile from an empty Triton cache)
                       [--sources DIR] (then the tutorial and third-party kernels of
                       benchmarks/triton_kernels.py, side by side; --shapes none runs only those)
Dry run on a CPU:      PYTHONPATH=src python benchmarks/triton_matmul.py --cpu
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import triton
import triton.language as tl

SHAPES = ["4096x4096x4096", "8192x8192x8192", "256x14336x4096", "8192x1024x1024"]
GRID = dict(BLOCK_M=(32, 64, 128, 256), BLOCK_N=(64, 128, 256), BLOCK_K=(32, 64, 128),
            num_stages=(3, 4, 5), num_warps=(4, 8))
CPU_SHAPES = ["64x64x64", "32x96x64"]
CPU_GRID = dict(BLOCK_M=(16, 32), BLOCK_N=(16, 32), BLOCK_K=(16,), num_stages=(3,), num_warps=(4,))


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr = 8):
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    group = GROUP_M * num_n
    first_m = (pid // group) * GROUP_M
    size_m = min(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % size_m
    pid_n = (pid % group) // size_m
    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


def reference(a, b, c, *rest):
    """What every candidate must compute (module level: it travels to the GPU worker)."""
    c.copy_(a @ b)


def configs(grid):
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k}, num_stages=s, num_warps=w)
            for m, n, k, s, w in itertools.product(*grid.values())]


def parse(shape):
    return tuple(int(x) for x in shape.split("x"))


def make_args(M, N, K, device, dtype_name):
    import torch

    dtype = getattr(torch, dtype_name)
    gen = torch.Generator(device=device).manual_seed(M * 7 + N * 3 + K)
    a = torch.randn(M, K, device=device, dtype=torch.float32, generator=gen).to(dtype)
    b = torch.randn(K, N, device=device, dtype=torch.float32, generator=gen).to(dtype)
    c = torch.empty(M, N, device=device, dtype=dtype)
    return (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))


def grid_of(M, N):
    return lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)


def synchronize(cpu):
    if not cpu:
        import torch

        torch.cuda.synchronize()


def host_bench(fn, quantiles):
    """Triton-style do_bench for the CPU dry run (triton.testing needs a GPU)."""
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return [statistics.median(times)] * len(quantiles)


# ---- phases, each run in its own process -----------------------------------------------------------
def phase_triton(opts):
    M, N, K = parse(opts.shape)
    args = make_args(M, N, K, opts.device, opts.dtype)
    kernel = triton.autotune(configs(opts.grid), key=["M", "N", "K"],
                             do_bench=host_bench if opts.cpu else None)(matmul_kernel)
    start = time.perf_counter()
    kernel[grid_of(M, N)](*args)
    synchronize(opts.cpu)
    seconds = time.perf_counter() - start
    best = kernel.best_config
    timings = getattr(kernel, "configs_timings", {}) or {}
    failed = sum(1 for t in timings.values() if not (t[0] < float("inf")))
    return {"seconds": seconds, "best": {**best.kwargs, "num_warps": best.num_warps, "num_stages": best.num_stages},
            "configs": len(timings), "failed": failed}


def phase_tensortune(opts):
    import tensortune as tt

    M, N, K = parse(opts.shape)
    args = make_args(M, N, K, opts.device, opts.dtype)
    budget = opts.budget or len(configs(opts.grid))
    kernel = tt.autotune(configs(opts.grid), key=["M", "N", "K"], budget=budget, reference=reference,
                         settings=tt.Settings(db_path=Path(opts.db), progress=False),
                         timer=_cpu_timer() if opts.cpu else None)(matmul_kernel)
    start = time.perf_counter()
    kernel[grid_of(M, N)](*args)
    synchronize(opts.cpu)
    seconds = time.perf_counter() - start
    (tuning,) = kernel.tunings.values()
    history = tuning.result.history
    return {"seconds": seconds, "best": kernel.decision.config.as_dict(), "trials": tuning.result.trials,
            "check": tuning.check, "confirmed": tuning.final.extra.get("confirmed"),
            "failed": sum(1 for r in history if not r.ok),
            "errors": sorted({str(r.error) for r in history if not r.ok}),
            "strategy": tuning.final.extra.get("strategy"), "confidence": tuning.final.extra.get("confidence"),
            "compile_seconds_total": round(sum(r.compile_seconds for r in history), 2),
            "measure_seconds_total": round(sum(r.run_seconds for r in history), 2),
            "first_result_seconds": tuning.final.extra.get("first_result_seconds"),
            "worker_ready_seconds": tuning.final.extra.get("worker_ready_seconds"),
            "rejected_uncompiled": sum(1 for r in history if "not compiled" in (r.message or "")),
            "search_seconds": tuning.final.extra.get("search_seconds"),
            "tuning_seconds": tuning.final.extra.get("tuning_seconds"),
            "isolated": any("device" in r.extra for r in history)}


def _cpu_timer():
    from tensortune.measure.cuda_timer import CudaTimer

    return CudaTimer(clock="host", budget_seconds=0.0, warmup_seconds=0.0, min_repeats=1, estimate_repeats=1)


def phase_compare(opts):
    """Re-time the winners and cuBLAS interleaved; measure the dispatch overhead."""
    import torch

    from tensortune.measure.confirm import confirm_winners
    from tensortune.measure.cuda_timer import CudaTimer

    timer = _cpu_timer() if opts.cpu else CudaTimer(budget_seconds=0.1, warmup_seconds=0.025)
    picks = json.loads(opts.picks)
    out = {}
    for shape, by_name in picks.items():
        M, N, K = parse(shape)
        args = make_args(M, N, K, opts.device, opts.dtype)
        a, b = args[0], args[1]
        runs = {}
        for name, cfg in by_name.items():
            if cfg is not None:
                kw = {k: v for k, v in cfg.items() if v is not None}
                runs[name] = (lambda kw=kw: matmul_kernel[grid_of(M, N)](*args, **kw))
        runs["cublas"] = lambda: torch.matmul(a, b, out=args[2])
        for fn in runs.values():
            fn()  # compile (a cache hit) and warm up outside the timing
        synchronize(opts.cpu)
        conf = confirm_winners(runs, timer, within=None, rounds=5)
        flops = 2.0 * M * N * K
        out[shape] = {name: {"seconds": conf.medians[name], "tflops": flops / max(conf.medians[name], 1e-12) / 1e12}
                      for name in runs}
    out["dispatch"] = dispatch_overhead(opts)
    return out


def dispatch_overhead(opts):
    """Host time per launch, tuned kernel vs a direct launch of the same configuration."""
    import tensortune as tt

    M = N = K = 256 if not opts.cpu else 32
    args = make_args(M, N, K, opts.device, opts.dtype)
    two = configs(opts.grid)[:2]
    kernel = tt.autotune(two, key=["M", "N", "K"], db=":memory:", isolate=False, progress=False,
                         timer=_cpu_timer() if opts.cpu else None)(matmul_kernel)
    grid = grid_of(M, N)
    kernel[grid](*args)
    cfg = kernel.best_config.all_kwargs()
    n = 500 if not opts.cpu else 5

    def per_launch(fn):
        synchronize(opts.cpu)
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        synchronize(opts.cpu)
        return (time.perf_counter() - t0) / n

    direct = lambda: matmul_kernel[grid](*args, **cfg)  # noqa: E731
    tuned = lambda: kernel[grid](*args)  # noqa: E731
    rounds = []
    for i in range(30):  # alternate which goes first; the host's speed drifts between rounds
        a, b = (direct, tuned) if i % 2 == 0 else (tuned, direct)
        ta, tb = per_launch(a), per_launch(b)
        rounds.append((ta, tb) if i % 2 == 0 else (tb, ta))
    diffs = sorted(t - d for d, t in rounds)
    q = lambda xs, f: xs[min(len(xs) - 1, int(f * len(xs)))]  # noqa: E731
    return {"direct_us": statistics.median(d for d, _ in rounds) * 1e6,
            "tuned_us": statistics.median(t for _, t in rounds) * 1e6,
            "overhead_us": statistics.median(diffs) * 1e6, "overhead_p25_us": q(diffs, 0.25) * 1e6,
            "overhead_p75_us": q(diffs, 0.75) * 1e6, "launches": n, "rounds": len(rounds), "shape": f"{M}x{N}x{K}"}


def dispatch_stub(opts):
    """The dispatch path alone: a tuned launch vs a direct launch of a launcher that does
    nothing (no Triton runtime, no GPU), so only tensortune's own cost is left."""
    import timeit

    import torch
    from triton.runtime.jit import KernelInterface

    import tensortune as tt

    class Stub(KernelInterface):
        arg_names = matmul_kernel.arg_names

        def run(self, *args, grid, warmup, **kwargs):
            return None

    stub = Stub()
    a = torch.empty(4, 4, dtype=torch.float16)
    args = (a, a, a, 4096, 4096, 4096, 4096, 1, 4096, 1, 4096, 1)
    kernel = tt.autotune(configs(GRID)[:2], key=["M", "N", "K"], db=":memory:", timer=_StubTimer(),
                         isolate=False, progress=False)(stub)
    kernel.interpreted = True  # no GPU here: record it under the interpreter's (CPU) target
    grid = (32, 32)
    kernel[grid](*args)  # tunes the key (the stub "runs" in no time)
    cfg = kernel.best_config.all_kwargs()
    n = 100_000
    rounds = [(min(timeit.repeat(lambda: stub[grid](*args, **cfg), number=n, repeat=3)) / n,
               min(timeit.repeat(lambda: kernel[grid](*args), number=n, repeat=3)) / n) for _ in range(5)]
    diffs = sorted(t - d for d, t in rounds)
    out = {"direct_us": statistics.median(d for d, _ in rounds) * 1e6,
           "tuned_us": statistics.median(t for _, t in rounds) * 1e6,
           "overhead_us": statistics.median(diffs) * 1e6, "rounds": len(rounds), "calls_per_round": n}
    print(json.dumps(out))
    return out


class _StubTimer:
    def time(self, fn):
        fn()
        return (1e-3,)


def phase_second(opts):
    """A fresh process with the records of the exhaustive runs: nothing is measured."""
    t_import = time.perf_counter()
    import tensortune as tt

    calls = {"n": 0}

    class Counting:  # a timer that counts: any measurement would call it
        def time(self, fn):
            calls["n"] += 1
            return (1.0,)

    kernel = tt.autotune(configs(opts.grid), key=["M", "N", "K"], reference=reference, timer=Counting(),
                         isolate=False, settings=tt.Settings(db_path=Path(opts.db), progress=False))(matmul_kernel)
    ready = time.perf_counter() - t_import
    out = {"import_and_decorate_seconds": ready, "shapes": {}}
    for shape in opts.shapes:
        M, N, K = parse(shape)
        args = make_args(M, N, K, opts.device, opts.dtype)
        synchronize(opts.cpu)
        start = time.perf_counter()
        kernel[grid_of(M, N)](*args)
        synchronize(opts.cpu)
        first = time.perf_counter() - start
        d = [d for d in kernel.decisions().values() if d.key.values == (M, N, K)][0]
        out["shapes"][shape] = {"first_launch_seconds": first, "source": d.source, "config": d.config.as_dict()}
    out["measurements"] = calls["n"]
    return out


def phase_direct(opts):
    """Triton's own first launch of a compiled configuration in a fresh process (the part of
    a warm start that is not tensortune's): the exhaustive run's winner, launched directly."""
    out = {"shapes": {}}
    for shape in opts.shapes:
        M, N, K = parse(shape)
        cfg = {k: v for k, v in json.loads(opts.picks)[shape].items() if v is not None}
        args = make_args(M, N, K, opts.device, opts.dtype)
        synchronize(opts.cpu)
        start = time.perf_counter()
        matmul_kernel[grid_of(M, N)](*args, **cfg)
        synchronize(opts.cpu)
        out["shapes"][shape] = {"first_launch_seconds": time.perf_counter() - start, "config": cfg}
    return out


def replay(opts):
    """Replay the exhaustive measurements of a run (--replay DB) to score strategies at a
    budget over many seeds, on the CPU: best found / grid best (1.0 = the best found).

    Cold: every shape alone. Transfer: the shapes tuned one after another into one
    database, each search starting from a cost model pre-trained on the earlier shapes'
    records. Sequential: as transfer, and each search first measures the nearest tuned
    shapes' best (what the decorator does).

    As in the decorator, a configuration that needs more shared memory than the device has
    is rejected by the compiler (it is replayed as a build failure) and the budget's
    `free_rejections` is its trials; `--count-rejections` replays the older rule where
    such a failure uses up a measurement.
    """
    from tensortune.db import Database, Target
    from tensortune.frontends.triton.configs import space_of_triton_configs
    from tensortune.frontends.triton.keys import TuningKey
    from tensortune.frontends.triton.seeding import Seeded, seed_configs
    from tensortune.measure import MeasureResult
    from tensortune.frontends.triton.tuning import with_free_rejections
    from tensortune.search import create_strategy
    from tensortune.tuner import Budget, Tuner

    space, _ = space_of_triton_configs(configs(opts.grid))
    budget = Budget(trials=opts.budget_run, free_rejections=0 if opts.count_rejections else None)
    budget = with_free_rejections(budget)
    target = Target.make("replay", "x")
    shapes = []
    if str(opts.replay).endswith(".json"):  # the summary kept in docs/benchmarks (median per configuration)
        from tensortune.db import Workload
        from tensortune.measure import ErrorKind
        from tensortune.space import Config

        for shape, rows in json.loads(Path(opts.replay).read_text())["shapes"].items():
            M, N, K = parse(shape)
            w = Workload.make("matmul", "grid", {"M": M, "N": N, "K": K})
            table = {Config(r["config"]): MeasureResult(Config(r["config"]), (r["median"],)) if r["median"]
                     else MeasureResult.failed(Config(r["config"]), ErrorKind(r["error"]), r["error"]) for r in rows}
            shapes.append((w, table, min(r.time for r in table.values())))
    else:
        source = Database(opts.replay)
        for w, n, _ in source.workloads():
            recs = [r for r in source.records(w) if not r.extra.get("final")]
            if recs:
                table = {r.config: r.to_result() for r in recs}
                shapes.append((w, table, min(r.time for r in table.values())))

    class Replay:
        def __init__(self, table):
            self.table = table

        def run(self, builds):
            for b in builds:
                r = self.table[b.config]
                rejected = r.error is not None and r.error.value == "out_of_resources"
                yield MeasureResult(b.config, r.times, r.error, r.message,
                                    extra={"stage": "build"} if rejected else {})

    rows = {}
    for mode in opts.modes:
        for strategy in opts.strategies:
            scores = {}
            for seed in range(opts.repeats):
                db = Database(":memory:")
                for w, table, best in shapes:
                    strat = create_strategy(strategy, space, seed=seed, budget=opts.budget_run)
                    if mode == "sequential":  # warm-start seeds as well as the transferred model
                        key = TuningKey.from_dict(("M", "N", "K"), w.key)
                        seeds = seed_configs(db, w, target, key, space, limit=max(1, opts.budget_run // 4))
                        strat = Seeded(strat, seeds) if seeds else strat
                    result = Tuner(space, Replay(table), workload=w, target=target, db=db, strategy=strat,
                                   budget=budget, seed=seed, batch_size=opts.batch, progress=False,
                                   transfer=mode != "cold").run()
                    shape = "x".join(str(w.key[k]) for k in ("M", "N", "K"))
                    scores.setdefault(shape, []).append(best / result.best_time)
            for shape, ss in scores.items():
                rows.setdefault(mode, {}).setdefault(shape, {})[strategy] = {
                    "mean": round(statistics.mean(ss), 4), "min": round(min(ss), 4),
                    "within_2pct": sum(x >= 1 / 1.02 for x in ss) / len(ss)}
            print(mode, strategy, {s: rows[mode][s][strategy] for s in scores}, file=sys.stderr, flush=True)
    print(json.dumps(rows, indent=1))
    return rows


def phase_grid(opts):
    """Every configuration of the grid on every shape, measured in a quiet process: all
    compiled first (in parallel, into Triton's cache, nothing else running), then timed in
    `--rounds` rounds, each over every configuration in a fresh random order (CUDA events,
    cold L2); a configuration's time is the median of its round medians. Each is checked
    against torch.matmul on the shape's random inputs first."""
    import random

    import torch

    from tensortune.frontends.triton.isolated import compile_args
    from tensortune.measure.cuda_timer import CudaTimer
    from tensortune.measure.triton_compile import device_max_shared, precompile
    from tensortune.space import Config

    grid_configs = [Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "num_stages": st, "num_warps": w})
                    for m, n, k, st, w in itertools.product(*opts.grid.values())]
    timer = _cpu_timer() if opts.cpu else CudaTimer(budget_seconds=0.04, warmup_seconds=0.01)
    rng = random.Random(0)
    out = {}
    for shape in opts.shapes or SHAPES:
        M, N, K = parse(shape)
        args = make_args(M, N, K, opts.device, opts.dtype)
        start = time.perf_counter()
        builds = precompile(matmul_kernel, grid_configs, compile_args(args), target="auto" if not opts.cpu else None,
                            max_shared=None if opts.cpu else device_max_shared())
        compile_seconds = time.perf_counter() - start
        expected = (args[0].float() @ args[1].float()).to(args[2].dtype)
        rows, runs = {}, {}
        for b in builds:
            c = b.config
            if not b.ok:
                rows[c] = {"error": str(b.error), "message": b.message[:200]}
                continue
            fn = (lambda c=c: matmul_kernel[grid_of(M, N)](*args, **dict(c)))
            try:
                args[2].zero_()
                fn()
                synchronize(opts.cpu)
                if not torch.allclose(args[2].float(), expected.float(), rtol=2e-2, atol=1e-1):
                    rows[c] = {"error": "wrong_result"}
                    continue
            except Exception as exc:  # noqa: BLE001 - this configuration's failure
                rows[c] = {"error": type(exc).__name__, "message": str(exc)[:200]}
                continue
            runs[c] = fn
        medians: dict = {c: [] for c in runs}
        every: dict = {c: [] for c in runs}
        for _ in range(opts.rounds):
            order = list(runs)
            rng.shuffle(order)
            for c in order:
                times = timer.time(runs[c])
                medians[c].append(statistics.median(times))
                every[c].extend(times)
        for c in runs:
            rows[c] = {"median": statistics.median(medians[c]), "min": min(every[c]), "runs": len(every[c]),
                       "round_medians": medians[c], "error": None}
        out[shape] = {"compile_seconds": round(compile_seconds, 1),
                      "rows": [{"config": dict(c), **{"median": None, "min": None, "runs": 0}, **rows[c]}
                               for c in grid_configs]}
        ok = [r for r in out[shape]["rows"] if r["error"] is None]
        best = min(ok, key=lambda r: r["median"])
        print(shape, "compiled in", round(compile_seconds, 1), "s;", len(ok), "ran; best", best["config"],
              best["median"], file=sys.stderr, flush=True)
    return out


PHASES = {"grid": phase_grid, "triton": phase_triton, "tensortune": phase_tensortune, "compare": phase_compare,
          "second": phase_second, "direct": phase_direct}


# ---- the orchestrator ---------------------------------------------------------------------------------
def run_phase(name, env_extra, log, timeout, **kw):
    cmd = [sys.executable, __file__, "--phase", name]
    for k, v in kw.items():
        if v is None or v is False:
            continue
        flag = "--" + k.replace("_", "-")
        if v is True:
            cmd.append(flag)
        elif isinstance(v, list):
            cmd += [flag, *v]
        else:
            cmd += [flag, str(v)]
    env = {**os.environ, **env_extra, "PYTHONUNBUFFERED": "1"}
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=max(1.0, timeout))
    except subprocess.TimeoutExpired as exc:
        log.write(f"$ {' '.join(cmd)}\nTIMEOUT after {timeout:.0f} s\n{exc.stdout}\n{exc.stderr}\n")
        return {"error": f"timed out after {timeout:.0f} s", "process_seconds": time.perf_counter() - start}
    wall = time.perf_counter() - start
    log.write(f"$ {' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}\n")
    log.flush()
    if proc.returncode != 0:
        print(f"phase {name} failed ({proc.returncode}):\n{proc.stderr[-3000:]}", file=sys.stderr)
        return {"error": proc.stderr[-2000:], "process_seconds": wall}
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_seconds"] = wall
    return result


def orchestrate(opts):
    begin = time.perf_counter()
    left = lambda: opts.deadline - (time.perf_counter() - begin)  # noqa: E731
    out = Path(opts.out or os.environ.get("OUT") or "out")
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="tt-bench-"))
    shapes = opts.shapes or (CPU_SHAPES if opts.cpu else SHAPES)
    triton_shapes = opts.triton_shapes if opts.triton_shapes is not None else shapes[:1]
    common = {"cpu": opts.cpu}
    env = {"TRITON_INTERPRET": "1"} if opts.cpu else {}
    results = {"date": time.strftime("%Y-%m-%d %H:%M"), "shapes": shapes, "grid_size": len(configs(opts.grid)),
               "machine": machine(opts.cpu), "command": " ".join(sys.argv), "tensortune": {}, "triton": {},
               "budget32": {}, "budget": opts.budget_run}
    save = lambda: (out / "triton_matmul.json").write_text(json.dumps(results, indent=2))  # noqa: E731
    log = open(out / "triton_matmul.log", "w")
    merged = work / "cache-merged"

    def keep(cache):
        if cache.exists():
            shutil.copytree(cache, merged, dirs_exist_ok=True)

    def exhaustive(shape):  # tensortune, cold Triton cache, empty records
        cache = work / f"cache-tt-{shape}"
        results["tensortune"][shape] = run_phase("tensortune", {**env, "TRITON_CACHE_DIR": str(cache)}, log,
                                                 min(240, left()), shape=shape, db=work / "exhaustive.db", **common)
        keep(cache)
        save()
        print("tensortune", shape, results["tensortune"][shape], flush=True)

    def with_triton(shape):  # triton.autotune, cold Triton cache
        if left() < opts.triton_seconds:
            results["triton"][shape] = {"error": "not run: not enough time left in this run"}
            return
        cache = work / f"cache-triton-{shape}"
        results["triton"][shape] = run_phase("triton", {**env, "TRITON_CACHE_DIR": str(cache)}, log,
                                             min(400, left()), shape=shape, **common)
        keep(cache)
        save()
        print("triton.autotune", shape, results["triton"][shape], flush=True)

    exhaustive_shapes = opts.exhaustive_shapes if opts.exhaustive_shapes is not None else shapes
    earlier = grid_bests(json.loads(Path(opts.grid_best_from).read_text())) if opts.grid_best_from else {}
    results["sequential_budget"] = opts.sequential
    if opts.quiet_grid:  # every configuration timed in a quiet process: the grid best to compare with
        cache = work / "cache-grid"
        grid = run_phase("grid", {**env, "TRITON_CACHE_DIR": str(cache)}, log, min(420, left()),
                         shapes=shapes, rounds=opts.rounds, **common)
        keep(cache)
        if "error" not in grid:
            about = (f"fp16 matmul (benchmarks/triton_matmul.py kernel), {len(configs(opts.grid))}-configuration "
                     f"grid, every configuration compiled first, then timed in {opts.rounds} rounds in random "
                     f"order in one quiet process (CUDA events, cold L2) on {results['machine']}, "
                     f"{results['date']}; median: of the round medians, seconds; error: why it failed")
            (out / "triton_matmul_grid.json").write_text(json.dumps(
                {"about": about, "shapes": {sh: g["rows"] for sh, g in grid.items() if sh != "process_seconds"}},
                indent=1))
            earlier.update(grid_bests({"shapes": {sh: g["rows"] for sh, g in grid.items()
                                                  if sh != "process_seconds"}}))
            results["grid_compile_seconds"] = {sh: g["compile_seconds"] for sh, g in grid.items()
                                               if sh != "process_seconds"}
        else:
            results["grid_error"] = grid["error"]
        save()
    for shape in exhaustive_shapes:  # (triton.autotune, minutes a shape, runs last: what is left of the deadline)
        exhaustive(shape)
    modes = ["cold", "sequential"] if opts.cold_and_sequential else ["sequential" if opts.sequential else "cold"]
    for mode in modes:  # budget-limited, default strategy (compiled kernels on disk)
        slot = "budget32" if mode == modes[-1] else f"budget32_{mode}"
        results.setdefault(slot, {})
        for shape in shapes:
            db = work / ("budget.db" if mode == "sequential" else f"budget-{shape}.db")  # sequential: one database
            cache = merged if opts.budget_cache == "warm" else work / f"cache-budget-{mode}-{shape}"
            results[slot][shape] = run_phase("tensortune", {**env, "TRITON_CACHE_DIR": str(cache)}, log,
                                             min(120, left()), shape=shape, db=db, budget=opts.budget_run,
                                             **common)
            results[slot][shape]["triton_cache"] = opts.budget_cache
            if cache != merged:
                keep(cache)
            save()
            print("budget", mode, shape, results[slot][shape], flush=True)
    if exhaustive_shapes:
        results["second_process"] = run_phase("second", {**env, "TRITON_CACHE_DIR": str(merged)}, log,
                                              min(120, left()), shapes=exhaustive_shapes, db=work / "exhaustive.db",
                                              **common)
        winners = {s: results["tensortune"].get(s, {}).get("best") for s in exhaustive_shapes}
        results["direct_first_launch"] = run_phase("direct", {**env, "TRITON_CACHE_DIR": str(merged)}, log,
                                                   min(60, left()), shapes=exhaustive_shapes,
                                                   picks=json.dumps(winners), **common)
    save()
    grid_best = {s: results["tensortune"].get(s, {}).get("best") or earlier.get(s) for s in shapes}
    results["grid_best_from"] = {s: "this run" if s in results["tensortune"] or opts.quiet_grid else opts.grid_best_from
                                 for s in shapes}
    picks = {s: {"tensortune": grid_best[s], "budget32": results["budget32"][s].get("best"),
                 "budget32_cold": results.get("budget32_cold", {}).get(s, {}).get("best"),
                 "triton.autotune": results["triton"].get(s, {}).get("best")} for s in shapes}
    results["compare"] = run_phase("compare", {**env, "TRITON_CACHE_DIR": str(merged)}, log, min(180, left()),
                                   picks=json.dumps(picks), **common)
    save()
    for shape in triton_shapes:
        if shape not in results["triton"]:
            with_triton(shape)
    log.close()
    if (work / "exhaustive.db").exists():  # every measurement, for replaying strategies offline (--replay)
        shutil.copy(work / "exhaustive.db", out / "exhaustive.db")
    shutil.rmtree(work, ignore_errors=True)
    results["targets"] = targets(results)
    save()
    print_table(results)


def grid_bests(doc):
    """shape -> best configuration, from a run's JSON or a grid's (docs/benchmarks/*grid*.json)."""
    if "shapes" in doc and isinstance(doc["shapes"], dict):
        out = {}
        for shape, rows in doc["shapes"].items():
            ok = [r for r in rows if r.get("error") is None and r.get("median")]
            if ok:
                out[shape] = min(ok, key=lambda r: r["median"])["config"]
        return out
    return {s: v.get("best") for s, v in doc.get("tensortune", {}).items() if v.get("best")}


def machine(cpu):
    if cpu:
        return "CPU dry run (TRITON_INTERPRET=1)"
    import torch

    p = torch.cuda.get_device_properties(0)
    return (f"{p.name}, {p.multi_processor_count} SMs, torch {torch.__version__}, triton {triton.__version__}, "
            f"CUDA {torch.version.cuda}, {os.cpu_count()} CPU cores")


def targets(r):
    """The issue's targets (H100), as measured in this run: (value, target, met)."""
    out = {}
    ex = [v["seconds"] for v in r.get("tensortune", {}).values() if "seconds" in v]
    if ex:
        out["exhaustive_cold_seconds"] = (max(ex), 12.0, max(ex) <= 12.0)
    b32 = [v["seconds"] for v in r.get("budget32", {}).values() if "seconds" in v]
    if b32:
        out["budget32_seconds"] = (max(b32), 5.0, max(b32) <= 5.0)
    sp = r.get("second_process", {}).get("shapes", {})
    if sp:
        worst = max(v["first_launch_seconds"] for v in sp.values())
        out["warm_start_first_launch_seconds"] = (worst, 0.5, worst <= 0.5)
        direct = r.get("direct_first_launch", {}).get("shapes", {})
        if direct:
            own = max(sp[s]["first_launch_seconds"] - direct[s]["first_launch_seconds"] for s in sp if s in direct)
            out["warm_start_over_a_direct_first_launch_seconds"] = (own, 0.5, own <= 0.5)
    d = r.get("compare", {}).get("dispatch")
    if d:
        out["dispatch_overhead_us"] = (d["overhead_us"], 2.0, d["overhead_us"] <= 2.0)
    ratios = []
    for shape, c in r.get("compare", {}).items():
        if isinstance(c, dict) and c.get("tensortune", {}).get("seconds") and c.get("budget32", {}).get("seconds"):
            ratios.append(c["tensortune"]["seconds"] / c["budget32"]["seconds"])
    if ratios:
        out["budget32_over_grid_best_worst"] = (min(ratios), 1 / 1.02, min(ratios) >= 1 / 1.02)
    return {k: {"value": round(v, 4), "target": round(t, 4), "met": m} for k, (v, t, m) in out.items()}


def print_table(r):
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"fp16 matmul, {r['grid_size']} configurations ({r['machine']})")
    for col in ("shape", "triton.autotune s", "tensortune s", "speedup", "budget-32 cold / grid best",
                "budget-32 / grid best", "tuned TFLOP/s", "cuBLAS TFLOP/s", "tuned / cuBLAS"):
        t.add_column(col)
    cmp = r.get("compare", {})
    for s in r["shapes"]:
        tri, tt_, c = r["triton"].get(s, {}), r["tensortune"].get(s, {}), cmp.get(s, {})
        speed = f"{tri['seconds'] / tt_['seconds']:.1f}x" if "seconds" in tri and "seconds" in tt_ else "-"
        grid_best, b32 = c.get("tensortune", {}).get("seconds"), c.get("budget32", {}).get("seconds")
        cold = c.get("budget32_cold", {}).get("seconds")
        tf, cu = c.get("tensortune", {}).get("tflops"), c.get("cublas", {}).get("tflops")
        t.add_row(s, f"{tri['seconds']:.1f}" if "seconds" in tri else "not run",
                  f"{tt_['seconds']:.1f}" if "seconds" in tt_ else "not run", speed,
                  f"{cold / grid_best:.3f}" if grid_best and cold else "-",
                  f"{b32 / grid_best:.3f}" if grid_best and b32 else "-",
                  f"{tf:.0f}" if tf else "-", f"{cu:.0f}" if cu else "-", f"{tf / cu:.2f}" if tf and cu else "-")
    Console(width=160).print(t)
    sp = r.get("second_process", {})
    if "shapes" in sp:
        firsts = ", ".join(f"{s} {v['first_launch_seconds']:.2f} s ({v['source']})" for s, v in sp["shapes"].items())
        print(f"second process: {sp['measurements']} measurements; import+decorate "
              f"{sp['import_and_decorate_seconds']:.2f} s; first launches: {firsts}; "
              f"whole process {sp['process_seconds']:.1f} s")
    for name, v in r.get("targets", {}).items():
        print(f"target {name}: {v['value']} (target {v['target']}): {'met' if v['met'] else 'NOT met'}")
    d = cmp.get("dispatch")
    if d:
        print(f"dispatch ({d['shape']}): direct {d['direct_us']:.2f} us/launch, tuned {d['tuned_us']:.2f} us/launch, "
              f"overhead {d['overhead_us']:.2f} us (median of {d.get('rounds', 7)} rounds"
              + (f", IQR {d['overhead_p25_us']:.2f}..{d['overhead_p75_us']:.2f} us)" if "overhead_p25_us" in d else ")"))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--phase", choices=sorted(PHASES))
    p.add_argument("--cpu", action="store_true", help="dry run under TRITON_INTERPRET=1 with tiny shapes")
    p.add_argument("--out", help="folder for JSON and the log (default: $OUT)")
    p.add_argument("--shapes", nargs="+", help="MxNxK shapes (default: the four of the issue)")
    p.add_argument("--triton-shapes", nargs="*", help="shapes to run triton.autotune on (default: the first)")
    p.add_argument("--budget-run", type=int, default=32, help="budget of the default-strategy run")
    p.add_argument("--budget", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--deadline", type=float, default=570.0, help="seconds for the whole run")
    p.add_argument("--triton-seconds", type=float, default=200.0,
                   help="start a triton.autotune phase only with this much time left")
    p.add_argument("--exhaustive-shapes", nargs="*", help="shapes to tune exhaustively (default: all)")
    p.add_argument("--grid-best-from", help="JSON of an earlier run: grid best of shapes not tuned exhaustively")
    p.add_argument("--quiet-grid", action="store_true",
                   help="first time every configuration on every shape in a quiet process (the grid best)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of the quiet grid")
    p.add_argument("--cold-and-sequential", action="store_true",
                   help="budget runs twice: every shape cold, then the shapes in order into one database")
    p.add_argument("--sequential", action="store_true",
                   help="budget runs tune the shapes one after another into one database (warm start)")
    p.add_argument("--budget-cache", choices=("warm", "cold"), default="warm",
                   help="budget runs start from the kernels compiled by the earlier runs (warm) or from none (cold)")
    p.add_argument("--sources", help="also run benchmarks/triton_kernels.py on the kernel sources in this folder")
    p.add_argument("--kernels-deadline", type=float, default=330.0, help="seconds for the kernels part")
    p.add_argument("--dispatch-stub", action="store_true",
                   help="measure the dispatch path alone, with a launcher that does nothing (any machine)")
    p.add_argument("--replay", help="score strategies on the measurements in this database (CPU)")
    p.add_argument("--count-rejections", action="store_true",
                   help="replay: a configuration the compiler rejects uses up a measurement")
    p.add_argument("--strategies", nargs="+", default=["auto", "random"])
    p.add_argument("--batch", type=int, default=8, help="replay: candidates asked for at once")
    p.add_argument("--modes", nargs="+", default=["cold", "transfer", "sequential"], help="replay: which modes")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--shape")
    p.add_argument("--db")
    p.add_argument("--picks")
    opts = p.parse_args()
    opts.grid = CPU_GRID if opts.cpu else GRID
    opts.device = "cpu" if opts.cpu else "cuda"
    opts.dtype = "float32" if opts.cpu else "float16"
    if opts.replay:
        replay(opts)
        return
    if opts.dispatch_stub:
        dispatch_stub(opts)
        return
    if opts.phase:
        print(json.dumps(PHASES[opts.phase](opts), default=str))
        return
    if opts.shapes != ["none"]:
        orchestrate(opts)
    if opts.sources:  # the tutorial and third-party kernels, side by side, in the same run
        sys.path.insert(0, str(Path(__file__).parent))
        import triton_kernels

        kernel_opts = argparse.Namespace(sources=opts.sources, out=opts.out or os.environ.get("OUT"), cpu=opts.cpu,
                                         cases=list(triton_kernels.CASES), deadline=opts.kernels_deadline,
                                         timeout=150.0)
        triton_kernels.print_table(triton_kernels.run_all(kernel_opts))


if __name__ == "__main__":
    main()
