"""Tuning on 1, 2 and 4 GPUs of one host: the Ray executor's throughput, and ranks that agree.

Two parts, one table printed last, one JSON:

1. **Ray, one measuring actor per GPU.** The same tuning job at each size: the Triton
   matmul of benchmarks/triton_matmul.py over its 216-configuration grid (BLOCK_M x
   BLOCK_N x BLOCK_K x num_stages x num_warps) on its four shapes, each shape tuned by
   `tensortune.tune(fn, space, executor=RayExecutor(...), isolate=True)` from an empty
   records store and a cold Triton cache, the four at once (a thread each, sharing the
   actors; `--one-shape-at-a-time` for one after another). At each size G a fresh cluster
   on this host (`LocalCluster`: one node with G GPUs, G measurement slots and
   `--cpus-per-gpu` cores a GPU for builds) holds G measuring
   actors, each with one GPU (Ray gives each its own `CUDA_VISIBLE_DEVICES`) and its
   isolated worker, where each candidate is JIT-compiled, checked against torch.matmul
   and timed with CUDA events (`CudaTimer`). Reported: wall time, measurements per
   minute, scaling (throughput over G times the one-GPU throughput), and each shape's
   winner against the one-GPU run's (the same candidates are measured at every size:
   the whole grid, or the same seeded random sample with `--trials`).
2. **Rank agreement** (`distributed="auto"`, `@tensortune.autotune`'s default): N real
   ranks under torch.distributed (NCCL on GPUs, with NCCL_NVLS_ENABLE=0; gloo on the
   CPU) launch the same kernel on the same shapes; rank 0 tunes and broadcasts, the
   others measure nothing. Reported: whether every rank ends with the same
   configuration for every shape, and the time to the last rank's first launches
   against one rank tuning alone (a single process, no process group).

3. **A whole model's tasks** (`--model`, on the GPU GPT-2 124M at 1 x 1024 tokens in
   fp16): `tensortune.compile(..., executor=RayExecutor(...))` from an empty records store
   at each size, the task scheduler running the rounds of several tasks at once so every
   GPU's actor is busy. Reported: tuning wall time, trials per minute, scaling, and the
   compiled model's latency (CUDA events) against the one-GPU run's. `--trace DIR` keeps
   each run's Ray timeline and records store (read by benchmarks/ray_timeline.py).

`--dry-run` runs every part on the CPU (Triton's interpreter, tiny shapes and grid, a
local Ray cluster whose "devices" are CPU measurement slots, gloo): the code paths of the
GPU run, not its speed.

Usage (from the repository root):
    GPU host:  python benchmarks/multi_gpu.py --gpus 1,2 --json $OUT/multi_gpu.json
               python benchmarks/multi_gpu.py --gpus 1 --no-ranks --frontend autotune --json one.json
               python benchmarks/multi_gpu.py --gpus 2,4 --no-ranks --frontend autotune --baseline one.json
               python benchmarks/multi_gpu.py --gpus 1,2,4 --no-ray --no-ranks --model --json $OUT/m.json
    CPU:       TRITON_INTERPRET=1 python benchmarks/multi_gpu.py --dry-run --json multi_gpu_dry.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

DRY_SHAPES = ["16x16x16", "32x16x16", "16x32x16", "32x32x16"]
DRY_GRID = dict(BLOCK_M=(16, 32), BLOCK_N=(16, 32), BLOCK_K=(16,), num_stages=(3,), num_warps=(1, 2))
# the warm-up's configurations: two stages, which no measured grid has, so that nothing the
# warm-up compiles is found again in a worker's Triton cache by the measured runs
WARM_GRID = dict(BLOCK_M=(32, 64), BLOCK_N=(64,), BLOCK_K=(32,), num_stages=(2,), num_warps=(4,))
_STATE: dict = {}


# ---- what runs in the measuring workers (imported there as the module `multi_gpu`) ---------------
class OnHost:
    """A device tensor that reaches the host only when the check reads it, never inside a
    timed run (`np.asarray` calls `__array__`)."""

    def __init__(self, tensor) -> None:
        self.tensor = tensor

    def __array__(self, dtype=None, copy=None):
        out = self.tensor.cpu().numpy()
        return out if dtype is None else out.astype(dtype)


def _cold_triton_cache() -> None:
    """A Triton cache of this worker's own, empty, before Triton is first imported here."""
    if "cache" not in _STATE:
        os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="tt-multigpu-triton-")
        _STATE["cache"] = os.environ["TRITON_CACHE_DIR"]


def _args(shape: str) -> tuple:
    _cold_triton_cache()
    if shape not in _STATE:
        import torch
        import triton_matmul as tm

        cuda = torch.cuda.is_available()
        _STATE[shape] = tm.make_args(*tm.parse(shape), "cuda" if cuda else "cpu", "float16" if cuda else "float32")
    return _STATE[shape]


def run_matmul(shape: str = "", BLOCK_M: int = 0, BLOCK_N: int = 0, BLOCK_K: int = 0, num_stages: int = 3,
               num_warps: int = 4) -> OnHost:
    """One launch of the matmul with one configuration (the timer synchronises)."""
    _cold_triton_cache()
    import triton_matmul as tm

    args = _args(shape)
    M, N, _ = tm.parse(shape)
    tm.matmul_kernel[tm.grid_of(M, N)](*args, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                                       num_stages=num_stages, num_warps=num_warps)
    return OnHost(args[2])


def reference_of(shape: str = ""):
    a, b = _args(shape)[:2]
    return (a @ b).cpu().numpy()


# ---- part 1: Ray, one actor per GPU ---------------------------------------------------------------
def _timer(cuda: bool):
    from tensortune.measure.cuda_timer import CudaTimer

    if cuda:  # a quick first pass over many candidates (see cuda_timer's notes)
        return CudaTimer(budget_seconds=0.02, warmup_seconds=0.02)
    return CudaTimer(clock="host", flush_l2=False, budget_seconds=0.0, warmup_seconds=0.0, min_repeats=1,
                     estimate_repeats=1, cooldown=0.0)


def tune_shape(executor, shape: str, grid: dict, trials: int | None, seed: int, cuda: bool, db: str) -> dict:
    import functools

    import multi_gpu as job
    from tensortune import tune
    from tensortune.space import Space

    space = Space({k: list(v) for k, v in grid.items()})
    size = 1
    for v in grid.values():
        size *= len(v)
    whole = trials is None or trials >= size
    result = tune(functools.partial(job.run_matmul, shape=shape), space, budget=size if whole else trials,
                  strategy="exhaustive" if whole else "random", seed=seed, key={"shape": shape},
                  reference=functools.partial(job.reference_of, shape=shape), db=db, isolate=True,
                  timeout=300, progress=False, timer=_timer(cuda), executor=executor, name="bench.multi_gpu_matmul")
    best = result.best
    return {"shape": shape, "trials": result.trials, "seconds": result.seconds, "failures": result.failures,
            "environment_failures": result.environment_failures,
            "best_config": best.config.as_dict() if best else None, "best_time": best.time if best else None}


def tune_shape_autotune(executor, shape: str, grid: dict, trials: int | None, seed: int, cuda: bool,
                        db: str) -> dict:
    """The shape tuned as users of Triton tune it on a cluster: `@tensortune.autotune` over the
    grid's configurations (the same seeded sample of `trials` at every size), launched once;
    each candidate is compiled in a build task on the node's cores and only timed on a GPU."""
    import random
    from pathlib import Path

    import tensortune as tt
    import triton_matmul as tm

    every = tm.configs(grid)
    chosen = every if trials is None or trials >= len(every) else random.Random(f"{seed}:{shape}").sample(every, trials)
    kernel = tt.autotune(chosen, key=["M", "N", "K"], budget=len(chosen), reference=tm.reference, timer=_timer(cuda),
                         settings=tt.Settings(db_path=Path(db), progress=False), executor=executor,
                         name=f"bench.multi_gpu_autotune.{shape}")(tm.matmul_kernel)
    M, N, K = tm.parse(shape)
    args = tm.make_args(M, N, K, "cuda" if cuda else "cpu", "float16" if cuda else "float32")
    start = time.perf_counter()
    kernel[tm.grid_of(M, N)](*args)
    seconds = time.perf_counter() - start
    (tuning,) = kernel.tunings.values()
    result, decision = tuning.result, kernel.decision
    return {"shape": shape, "trials": result.trials, "seconds": seconds, "failures": result.failures,
            "environment_failures": result.environment_failures,
            "best_config": dict(decision.config.as_dict()) if decision else None,
            "best_time": result.best.time if result.best else None}


def _model(cuda: bool):
    """(model, inputs): GPT-2 124M (1 x 1024 tokens, fp16) on the GPU, a small MLP in the dry run."""
    import torch

    if cuda:
        from models import hf_models
        model, inputs, _ = hf_models("full", "cuda")["gpt2"]()
        return model, inputs
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32)).eval()
    return model, [torch.randn(16, 32)]


def _latency_ms(fn, inputs, cuda: bool, calls: int = 50) -> float:
    import statistics

    import torch

    times = []
    with torch.no_grad():
        for _ in range(5):
            if cuda:
                begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                begin.record()
                for _ in range(calls):
                    fn(*inputs)
                end.record()
                torch.cuda.synchronize()
                times.append(begin.elapsed_time(end) / calls)
            else:
                start = time.perf_counter()
                fn(*inputs)
                times.append(1e3 * (time.perf_counter() - start))
    return statistics.median(times)


def model_part(args: argparse.Namespace, cuda: bool, out: dict) -> None:
    import torch

    import tensortune
    from tensortune.distributed import RayExecutor
    from tensortune.distributed.local_cluster import LocalCluster
    from tensortune.frontends.triton.target import current_target

    model, inputs = _model(cuda)
    with torch.no_grad():
        want = model(*inputs).last_hidden_state.float() if cuda else model(*inputs).float()
    for g in [int(x) for x in args.gpus.split(",")]:
        scratch = tempfile.mkdtemp(prefix="tt-multigpu-model-")
        cluster = LocalCluster(workers=1, cpus_per_worker=node_cpus(args, g, cuda), slots=g,
                               gpus_per_worker=g if cuda else 0, extra_targets=(current_target(not cuda),),
                               python_path=(HERE,)).start()
        try:
            with RayExecutor(cluster.address, measure_gpus=1 if cuda else 0) as executor:
                torch._dynamo.reset()
                began, start = time.time(), time.perf_counter()
                fast = tensortune.compile(model, inputs, target="cuda", budget=args.model_budget,
                                          db=os.path.join(scratch, "m.db"), progress=False, executor=executor,
                                          seed=args.seed)
                wall = time.perf_counter() - start
                if args.trace:  # what ran where and when: Ray's timeline of tasks and actor calls, the records
                    import sqlite3

                    import ray
                    os.makedirs(args.trace, exist_ok=True)
                    ray.timeline(filename=os.path.join(args.trace, f"model_{g}_timeline.json"))
                    with sqlite3.connect(os.path.join(scratch, "m.db")) as src, \
                            sqlite3.connect(os.path.join(args.trace, f"model_{g}.db")) as dst:
                        src.backup(dst)
        finally:
            cluster.stop()
        with torch.no_grad():
            got = fast(*inputs)
        got = (got.last_hidden_state if cuda else got).float()
        error = float((got - want).norm() / want.norm())
        trials = sum(t.trials for t in fast.report.tasks)
        row = {"wall_seconds": wall, "tuning_seconds": fast.tuning_seconds, "trials": trials,
               "per_minute": 60 * trials / fast.tuning_seconds, "tasks": len(fast.report.tasks),
               "latency_ms": _latency_ms(fast, inputs, cuda), "relative_error": error,
               **phases(os.path.join(scratch, "m.db"), began)}
        out["model"][str(g)] = row
        print(f"  {g} device(s): {len(fast.report.tasks)} tasks, {trials} trials in {fast.tuning_seconds:.1f} s of "
              f"tuning ({row['per_minute']:.0f}/min; first result at {row.get('first_result_seconds', 0):.1f} s, "
              f"last search result at {row.get('search_end_seconds', 0):.1f} s); model {row['latency_ms']:.3f} ms, "
              f"error {error:.1e}", flush=True)
        _write(args.json, out)


def phases(db: str, began: float) -> dict:
    """When a model's tuning (begun at `began`, time.time()) had its first result, its last
    search result, and its last confirmation, from the records store; the search phase's
    measurements per minute (between the first and the last search result)."""
    import sqlite3

    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT created_at, strategy FROM records ORDER BY created_at").fetchall()
    search = [t for t, strategy in rows if strategy != "confirm"]
    if len(search) < 2:
        return {}
    first, last = search[0] - began, search[-1] - began
    return {"first_result_seconds": first, "search_end_seconds": last, "last_record_seconds": rows[-1][0] - began,
            "search_per_minute": 60 * (len(search) - 1) / max(last - first, 1e-9)}


def tune_shapes(executor, shapes: list[str], grid: dict, trials: int | None, seed: int, cuda: bool, db: str,
                at_once: bool, frontend: str = "callable") -> list[dict]:
    """Each shape's tuning run, all at once (a thread each, sharing the executor's actors, as
    the task scheduler runs several tasks' rounds) or one after another; `frontend`:
    "callable" (`tensortune.tune`, compiled in the measuring worker) or "autotune"
    (`@tensortune.autotune`, compiled in build tasks)."""
    tune = tune_shape if frontend == "callable" else tune_shape_autotune
    if not at_once:
        return [tune(executor, s, grid, trials, seed, cuda, db) for s in shapes]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(shapes), thread_name_prefix="shape") as pool:
        return list(pool.map(lambda s: tune(executor, s, grid, trials, seed, cuda, db), shapes))


def node_cpus(args: argparse.Namespace, devices: int, cuda: bool) -> int:
    """CPUs of the Ray node holding `devices` GPUs: `--cpus-per-node`, else the host's share
    of each GPU (`--cpus-per-gpu`, at most the host's cores less two), or devices + 2 on the CPU."""
    if args.cpus_per_node:
        return args.cpus_per_node
    if not cuda:
        return devices + 2
    return max(devices + 2, min((os.cpu_count() or 4) - 2, args.cpus_per_gpu * devices))


def ray_part(args: argparse.Namespace, cuda: bool, shapes: list[str], grid: dict, out: dict) -> None:
    from tensortune.distributed import RayExecutor
    from tensortune.distributed.local_cluster import LocalCluster
    from tensortune.frontends.triton.target import current_target

    # @tensortune.autotune measures for the GPU's target (Triton's interpreter in the dry run)
    targets = (current_target(not cuda),) if args.frontend == "autotune" else ()

    at_once = not args.one_shape_at_a_time
    for g in [int(x) for x in args.gpus.split(",")]:
        scratch = tempfile.mkdtemp(prefix="tt-multigpu-")
        if args.frontend == "autotune":  # builds compile into an empty Triton cache at every size
            os.environ["TRITON_CACHE_DIR"] = os.path.join(scratch, "triton-cache")
        cluster = LocalCluster(workers=1, cpus_per_worker=node_cpus(args, g, cuda), slots=g,
                               gpus_per_worker=g if cuda else 0, extra_targets=targets, python_path=(HERE,)).start()
        try:
            with RayExecutor(cluster.address, measure_gpus=1 if cuda else 0) as executor:
                # warm-up: the actors start their workers (import torch, a CUDA context) before
                # the clock starts, as many workers as the measured runs will use at once
                tune_shapes(executor, shapes if at_once else shapes[:1], WARM_GRID, None, 999, cuda,
                            os.path.join(scratch, "warm.db"), at_once, args.frontend)
                start = time.perf_counter()
                rows = tune_shapes(executor, shapes, grid, args.trials, args.seed, cuda,
                                   os.path.join(scratch, "t.db"), at_once, args.frontend)
                wall = time.perf_counter() - start
                if args.trace:  # what ran where and when (the warm-up's calls too, before the clock)
                    import ray
                    os.makedirs(args.trace, exist_ok=True)
                    ray.timeline(filename=os.path.join(args.trace, f"ray_{g}_timeline.json"))
        finally:
            cluster.stop()
        trials = sum(r["trials"] for r in rows)
        out["ray"][str(g)] = {"wall_seconds": wall, "trials": trials, "per_minute": 60 * trials / wall,
                              "shapes_at_once": at_once, "frontend": args.frontend, "shapes": rows}
        print(f"  {g} device(s): {trials} measured in {wall:.1f} s ({60 * trials / wall:.0f}/min)", flush=True)
        _write(args.json, out)


# ---- part 2: ranks that agree --------------------------------------------------------------------
def rank_main() -> None:
    """One rank (env RANK, WORLD_SIZE, MASTER_ADDR/PORT, TT_SHAPES, TT_GRID, TT_BUDGET, TT_DB)."""
    import torch

    import tensortune as tt
    import triton_matmul as tm

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(rank)
    if world > 1:
        import torch.distributed as dist

        dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    grid = json.loads(os.environ["TT_GRID"])
    budget = int(os.environ["TT_BUDGET"]) or None
    kernel = tt.autotune(tm.configs(grid), key=["M", "N", "K"], budget=budget, reference=tm.reference,
                         settings=tt.Settings(db_path=os.environ["TT_DB"], progress=False),
                         timer=None if cuda else _timer(False), seed=0)(tm.matmul_kernel)
    shapes = os.environ["TT_SHAPES"].split(",")
    launches = [tm.make_args(*tm.parse(s), "cuda" if cuda else "cpu", "float16" if cuda else "float32")
                for s in shapes]
    if world > 1:
        dist.barrier()
    start = time.perf_counter()
    for s, a in zip(shapes, launches):
        kernel[tm.grid_of(*tm.parse(s)[:2])](*a)
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    correct = all(torch.allclose(a[2].float(), (a[0] @ a[1]).float(), rtol=2e-2, atol=2e-2 * float(a[2].abs().max()))
                  for a in launches)
    decisions = {str(k): {"config": d.config.as_dict(), "source": d.source} for k, d in kernel.decisions().items()}
    measured = sum(t.result.trials for t in kernel.tunings.values())
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    print("RANK " + json.dumps({"rank": rank, "seconds": seconds, "decisions": decisions, "measured": measured,
                                "correct": bool(correct)}), flush=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(world: int, shapes: list[str], grid: dict, budget: int | None, scratch: str) -> dict:
    port = str(_free_port())
    procs = []
    for rank in range(world):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "NCCL_NVLS_ENABLE": "0",
               "TT_SHAPES": ",".join(shapes), "TT_GRID": json.dumps(grid), "TT_BUDGET": str(budget or 0),
               "TT_DB": os.path.join(scratch, f"w{world}-rank{rank}.db"),
               "TRITON_CACHE_DIR": os.path.join(scratch, f"w{world}-rank{rank}-triton")}
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--rank-worker"], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    ranks = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=3600)
        lines = [ln for ln in stdout.splitlines() if ln.startswith("RANK ")]
        if p.returncode != 0 or not lines:
            raise RuntimeError(f"a rank failed (exit {p.returncode}): {stderr[-3000:]}")
        ranks.append(json.loads(lines[-1][5:]))
    ranks.sort(key=lambda r: r["rank"])
    chosen = [{k: v["config"] for k, v in r["decisions"].items()} for r in ranks]
    return {"world": world, "ranks": ranks, "agree": all(c == chosen[0] for c in chosen),
            "seconds": max(r["seconds"] for r in ranks), "correct": all(r["correct"] for r in ranks)}


def ranks_part(args: argparse.Namespace, cuda: bool, shapes: list[str], grid: dict, out: dict) -> None:
    scratch = tempfile.mkdtemp(prefix="tt-multigpu-ranks-")
    for world in (1, args.ranks):
        row = run_ranks(world, shapes, grid, args.rank_budget, scratch)
        out["ranks"][str(world)] = row
        print(f"  {world} rank(s): {row['seconds']:.1f} s, agree {row['agree']}, correct {row['correct']}", flush=True)
        _write(args.json, out)


# ---- the table -----------------------------------------------------------------------------------
def table(out: dict) -> list[dict]:
    rows = []
    ray = out.get("ray", {})
    one = ray.get("1")
    for g, r in ray.items():
        quality = []
        if one:
            for mine, base in zip(r["shapes"], one["shapes"]):
                if mine["best_time"] and base["best_time"]:
                    quality.append(mine["best_time"] / base["best_time"])
        rows.append({"part": "Ray, one actor per device", "n": int(g), "seconds": r["wall_seconds"],
                     "per_minute": r["per_minute"],
                     "scaling": r["per_minute"] / (int(g) * one["per_minute"]) if one else None,
                     "quality": max(quality) if quality else None,
                     "same_winners": [m["best_config"] for m in r["shapes"]] == [b["best_config"] for b in one["shapes"]]
                     if one else None,
                     "lost": sum(s["environment_failures"] for s in r["shapes"])})
    first = out.get("model", {}).get("1")
    for g, r in out.get("model", {}).items():
        rows.append({"part": "a model's tasks on Ray", "n": int(g), "seconds": r["tuning_seconds"],
                     "per_minute": r["per_minute"],
                     "scaling": r["per_minute"] / (int(g) * first["per_minute"]) if first else None,
                     "quality": r["latency_ms"] / first["latency_ms"] if first else None})
    for g, r in out.get("model", {}).items():  # between its first and last search result
        if first and r.get("search_per_minute") and first.get("search_per_minute"):
            rows.append({"part": "  its search phase", "n": int(g),
                         "seconds": r["search_end_seconds"] - r["first_result_seconds"],
                         "per_minute": r["search_per_minute"],
                         "scaling": r["search_per_minute"] / (int(g) * first["search_per_minute"])})
    alone = out.get("ranks", {}).get("1")
    for w, r in out.get("ranks", {}).items():
        rows.append({"part": "ranks agree (autotune)", "n": int(w), "seconds": r["seconds"],
                     "vs_alone": r["seconds"] / alone["seconds"] if alone else None, "agree": r["agree"],
                     "correct": r["correct"]})
    return rows


def take_baseline(out: dict, path: str, args: argparse.Namespace) -> None:
    """The one-GPU rows of an earlier run (the same job: shapes, grid, trials, frontend, model budget)."""
    try:
        with open(path) as f:
            base = json.load(f)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"--baseline {path}: cannot be read ({type(exc).__name__}: {exc})") from None
    missing = [k for k in ("args", "shapes", "grid") if not isinstance(base, dict) or k not in base]
    if missing:
        raise SystemExit(f"--baseline {path}: not a JSON this script wrote (no {', '.join(missing)})")
    mine = vars(args)
    for key in ("trials", "seed", "frontend", "one_shape_at_a_time", "model_budget", "cpus_per_gpu", "cpus_per_node"):
        if base["args"].get(key) != mine.get(key):
            raise SystemExit(f"--baseline {path}: it ran with --{key.replace('_', '-')} {base['args'].get(key)}, "
                             f"this run with {mine.get(key)}: not the same job")
    if base["shapes"] != out["shapes"] or base["grid"] != out["grid"]:
        raise SystemExit(f"--baseline {path}: other shapes or another grid than this run's")
    for part in ("ray", "model"):
        if "1" in base.get(part, {}):
            out[part]["1"] = {**base[part]["1"], "from": path}


def _write(path: str | None, out: dict) -> None:
    out["summary"] = table(out)
    if path:
        with open(path, "w") as f:
            json.dump(out, f, indent=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", default=None, help="device counts of the Ray part (default 1,2,4 up to those here)")
    parser.add_argument("--ranks", type=int, default=None, help="ranks of the agreement part (default: the GPUs)")
    parser.add_argument("--trials", type=int, default=None,
                        help="candidates per shape (default: the whole grid; fewer: the same seeded random sample)")
    parser.add_argument("--rank-budget", type=int, default=None, help="candidates per shape for rank 0's tuning")
    parser.add_argument("--shapes", default=None, help="MxNxK,... (default: triton_matmul.py's four)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cpus-per-node", type=int, default=None,
                        help="CPUs of the Ray node (default: --cpus-per-gpu for each GPU; devices + 2 on the CPU)")
    parser.add_argument("--cpus-per-gpu", type=int, default=15,
                        help="the host's cores each GPU brings to the node, for builds (default 15)")
    parser.add_argument("--frontend", choices=("callable", "autotune"), default="callable",
                        help="how the Ray part tunes a shape: tensortune.tune over a callable (each candidate "
                             "compiled in the measuring worker) or @tensortune.autotune (compiled in build tasks)")
    parser.add_argument("--one-shape-at-a-time", action="store_true",
                        help="tune the shapes one after another (default: all at once, sharing the actors)")
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--no-ranks", action="store_true")
    parser.add_argument("--model", action="store_true", help="also tune a whole model's tasks at each size")
    parser.add_argument("--model-budget", type=int, default=None,
                        help="trials for the model (default: tensortune.compile's, 32 per task)")
    parser.add_argument("--trace", default=None,
                        help="directory for each run's Ray timeline (chrome://tracing), and each model run's records store")
    parser.add_argument("--dry-run", action="store_true", help="on the CPU: interpreter, tiny shapes and grid, gloo")
    parser.add_argument("--rank-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--baseline", default=None,
                        help="a JSON of this script's one-GPU run on this machine: its rows are the scaling's base "
                             "where this run has no one-GPU row (a long job split over two calls)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.rank_worker:
        return rank_main()
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"  # before torch and triton load, here and in every node and rank
    import torch
    import triton_matmul as tm

    cuda = torch.cuda.is_available() and not args.dry_run
    if not cuda and not args.dry_run:
        parser.error("no CUDA GPU here: pass --dry-run to run the same code paths on the CPU")
    present = torch.cuda.device_count() if cuda else 2
    args.gpus = args.gpus or ",".join(str(g) for g in (1, 2, 4) if g <= present)
    if cuda and max(int(g) for g in args.gpus.split(",")) > present:
        parser.error(f"--gpus {args.gpus}: this host has {present} GPU(s)")
    args.ranks = args.ranks or max(int(g) for g in args.gpus.split(","))
    shapes = args.shapes.split(",") if args.shapes else (tm.SHAPES if cuda else DRY_SHAPES)
    grid = tm.GRID if cuda else DRY_GRID
    out: dict = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": sys.version.split()[0],
                             "gpus": [torch.cuda.get_device_name(k) for k in range(present)] if cuda else [],
                             "torch": torch.__version__},
                 "dry_run": not cuda, "args": vars(args), "shapes": shapes,
                 "grid": {k: list(v) for k, v in grid.items()},
                 "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "ray": {}, "ranks": {}, "model": {}}
    if args.baseline:
        take_baseline(out, args.baseline, args)
    if not args.no_ray:
        print(f"Ray part: devices {args.gpus}, shapes {shapes}, trials per shape {args.trials or 'all'}", flush=True)
        ray_part(args, cuda, shapes, grid, out)
    if args.model:
        print(f"a model's tasks on Ray: devices {args.gpus}", flush=True)
        model_part(args, cuda, out)
    if not args.no_ranks:
        print(f"rank agreement: 1 and {args.ranks} ranks ({'nccl' if cuda else 'gloo'})", flush=True)
        ranks_part(args, cuda, shapes, grid, out)
    _write(args.json, out)
    print()
    print(f"{'part':28s} {'n':>2s} {'seconds':>8s} {'meas/min':>9s} {'scaling':>8s} {'winner/1':>9s} "
          f"{'same win':>8s} {'agree':>6s} {'vs alone':>8s}")
    for r in out["summary"]:
        def f(key, fmt):
            return format(r[key], fmt) if r.get(key) is not None else "-"
        print(f"{r['part']:28s} {r['n']:2d} {r['seconds']:8.1f} {f('per_minute', '9.0f'):>9s} "
              f"{f('scaling', '8.2f'):>8s} {f('quality', '9.3f'):>9s} {str(r.get('same_winners', '-')):>8s} "
              f"{str(r.get('agree', '-')):>6s} {f('vs_alone', '8.2f'):>8s}")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # under `timeout`: stop the cluster, keep the JSON
    main()
