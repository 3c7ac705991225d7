"""The auto-scheduler on this CPU, side by side with numpy (OpenBLAS) and torch.

For each workload (float32 matmul 512^3 and 1024^3, matmul + bias + ReLU, conv2d NCHW
1x64x56x56 with 64 3x3 filters and padding 1, a batched matmul) it auto-schedules the
tensor expressions with `--trials` measurements into a records database, then times in
one process, interleaved in shuffled rounds: the tuned kernel (and the best kernels
found within the first 32, 64 and 128 trials, to compare with MetaSchedule's figures),
numpy and torch. Each round takes the median of repeated calls; the table shows the
median over rounds (and the fastest single run, which a neighbour's load cannot make
faster), and the JSON keeps every round. Before timing each workload it waits (up to
--wait-quiet seconds) until other processes leave the cores idle, and records how busy
they were.

    .venv/bin/python benchmarks/cpu_autoschedule.py                       # everything
    .venv/bin/python benchmarks/cpu_autoschedule.py --phase tune --trials 300
    .venv/bin/python benchmarks/cpu_autoschedule.py --phase time          # from the records
    .venv/bin/python benchmarks/cpu_autoschedule.py --quick               # tiny shapes, a smoke test

numpy has no convolution: its row is im2col (a strided view, copied) and one matmul.
The "numpy" row of matmul + bias + ReLU is numpy's three calls (matmul, add, maximum)
writing in place; torch's is `relu(addmm(bias, a, b))`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from tensortune.autoschedule import autoschedule  # noqa: E402
from tensortune.autoschedule.api import Problem, finish_kernel  # noqa: E402
from tensortune.backends.c_compiler import load_function  # noqa: E402
from tensortune.db import Database, Target  # noqa: E402
from tensortune.measure import Timer  # noqa: E402
from tensortune.te import workloads as W  # noqa: E402

CHECKPOINTS = (32, 64, 128)


@dataclass(frozen=True)
class Bench:
    name: str
    make: Callable[[], W.Computation]
    numpy: Callable[[dict[str, np.ndarray], np.ndarray], Callable[[], object]]
    torch: Callable[[dict[str, np.ndarray], np.ndarray], Callable[[], object]]


def _np_matmul(x, out):
    return lambda: np.matmul(x["A"], x["B"], out=out)


def _np_mbr(x, out):
    def run():
        np.matmul(x["A"], x["B"], out=out)
        np.add(out, x["bias"], out=out)
        np.maximum(out, 0.0, out=out)
    return run


def _np_conv(x, out, pad=1):
    data, weight = x["data"], x["weight"]
    k, c, r, s = weight.shape
    w2 = weight.reshape(k, c * r * s)
    padded = np.zeros((c, data.shape[2] + 2 * pad, data.shape[3] + 2 * pad), np.float32)
    flat = out.reshape(k, -1)

    def run():
        padded[:, pad:-pad, pad:-pad] = data[0]
        cols = np.lib.stride_tricks.sliding_window_view(padded, (r, s), axis=(1, 2))  # c, oh, ow, r, s
        cols = np.ascontiguousarray(cols.transpose(0, 3, 4, 1, 2)).reshape(c * r * s, -1)
        np.matmul(w2, cols, out=flat)
    return run


def _torch(fn):
    def make(x, out):
        import torch
        t = {k: torch.from_numpy(v) for k, v in x.items()}
        o = torch.from_numpy(out)
        return lambda: fn(torch, t, o)
    return make


BENCHES = {
    "matmul512": Bench("matmul 512^3", lambda: W.matmul(512, 512, 512), _np_matmul,
                       _torch(lambda th, t, o: th.matmul(t["A"], t["B"], out=o))),
    "matmul1024": Bench("matmul 1024^3", lambda: W.matmul(1024, 1024, 1024), _np_matmul,
                        _torch(lambda th, t, o: th.matmul(t["A"], t["B"], out=o))),
    "matmul_bias_relu": Bench("matmul+bias+ReLU 1024^3", lambda: W.matmul_bias_relu(1024, 1024, 1024), _np_mbr,
                              _torch(lambda th, t, o: th.relu_(th.addmm(t["bias"], t["A"], t["B"], out=o)))),
    "conv2d": Bench("conv2d 1x64x56x56, 64x3x3, pad 1",
                    lambda: W.conv2d_nchw(1, 64, 56, 56, 64, 3, 3, padding=1), _np_conv,
                    _torch(lambda th, t, o: o.copy_(th.nn.functional.conv2d(t["data"], t["weight"], padding=1)))),
    "batch_matmul": Bench("batched matmul 16x256^3", lambda: W.batch_matmul(16, 256, 256, 256), _np_matmul,
                          _torch(lambda th, t, o: th.bmm(t["A"], t["B"], out=o))),
}
QUICK = {
    "matmul512": lambda: W.matmul(64, 64, 64), "matmul1024": lambda: W.matmul(96, 96, 96),
    "matmul_bias_relu": lambda: W.matmul_bias_relu(64, 64, 64),
    "conv2d": lambda: W.conv2d_nchw(1, 8, 14, 14, 8, 3, 3, padding=1),
    "batch_matmul": lambda: W.batch_matmul(2, 32, 32, 32),
}


def raw_call(kernel, arrays: dict[str, np.ndarray], out: np.ndarray) -> Callable[[], object]:
    """The compiled function called with pointers (no argument checks in the timed call)."""
    fn = load_function(kernel.library, kernel.func.name, [f"{b.dtype}*" for b in kernel.func.args], restype="int")
    ptrs = [(out if not t.is_placeholder else arrays[t.name]).ctypes.data for t in kernel.args]
    return lambda: fn(*ptrs)


def check_agree(contenders: list[tuple[str, Callable[[], object]]], out: np.ndarray, name: str) -> None:
    """Every contender writes into `out` (poisoned with NaN before each) what the first
    does; one that does not ends the benchmark, named."""
    want = None
    for label, fn in contenders:
        out[...] = np.nan
        fn()
        got = out.copy()
        if want is None:
            want = got
        elif not np.allclose(got, want, rtol=2e-3, atol=2e-3 * max(1.0, float(np.abs(want).max()))):
            raise SystemExit(f"{name}: {label} disagrees with {contenders[0][0]} "
                             f"(max error {np.nanmax(np.abs(got - want)):.3g})")


def rates(rounds: dict[str, list[float]], fastest: dict[str, list[float]], flops: float) -> dict[str, dict]:
    """The report's timing fields from `interleaved`'s rounds: medians over rounds, the
    fastest call, and both as GFLOP/s."""
    medians = {k: statistics.median(v) for k, v in rounds.items()}
    best = {k: min(v) for k, v in fastest.items()}
    return {"median_seconds": medians, "fastest_seconds": best, "rounds_seconds": rounds,
            "rounds_fastest_seconds": fastest,
            "gflops": {k: flops / v / 1e9 for k, v in medians.items()},
            "gflops_fastest": {k: flops / v / 1e9 for k, v in best.items()}}


def interleaved(contenders: dict[str, Callable[[], object]], timer, rounds: int,
                rng: np.random.Generator) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Each contender's median and fastest call per round, the contenders in a fresh
    shuffled order every round."""
    medians: dict[str, list[float]] = {k: [] for k in contenders}
    fastest: dict[str, list[float]] = {k: [] for k in contenders}
    order = list(contenders)
    for _ in range(rounds):
        rng.shuffle(order)
        for label in order:
            times = timer.time(contenders[label])
            medians[label].append(statistics.median(times))
            fastest[label].append(min(times))
    return medians, fastest


def busy_cores(seconds: float = 1.0) -> float:
    """How many cores other processes kept busy over the last `seconds` (from /proc/stat)."""
    def sample():
        with open("/proc/stat") as f:
            parts = [float(x) for x in f.readline().split()[1:]]
        return sum(parts), parts[3] + parts[4]  # total, idle + iowait
    try:
        t0, i0 = sample()
        time.sleep(seconds)
        t1, i1 = sample()
    except OSError:
        return float("nan")
    return (os.cpu_count() or 1) * (1 - (i1 - i0) / max(t1 - t0, 1e-9))


def wait_until_quiet(limit_seconds: float, threshold: float = 0.3) -> float:
    """Wait (at most `limit_seconds`) until other processes use under `threshold` cores;
    returns the busy cores measured last."""
    deadline = time.monotonic() + limit_seconds
    busy = busy_cores()
    while busy > threshold and time.monotonic() < deadline:
        busy = busy_cores(2.0)
    return busy


def best_within(db: Database, problem: Problem, target: Target, trials: int):
    records = [r for r in db.records(problem.workload, target) if r.strategy != "confirm"]
    records.sort(key=lambda r: r.created_at)
    ok = [r for r in records[:trials] if r.ok]
    return min(ok, key=lambda r: r.time) if ok else None


def tune(names, args, db_path) -> dict:
    out = {}
    for name in names:
        comp = (QUICK[name] if args.quick else BENCHES[name].make)()
        start = time.perf_counter()
        k = autoschedule(comp, budget=args.trials, db=db_path, seed=args.seed, progress=not args.quiet,
                         retune=args.retune)
        seconds = time.perf_counter() - start
        out[name] = {"trials": k.trials, "tuning_seconds": round(seconds, 1), "from_db": k.from_db,
                     "best_measured_gflops": round(k.gflops, 2), "sketch": k.sketch, "config": dict(k.config)}
        print(f"tuned {name}: {k.trials} trials in {seconds:.0f} s, {k.gflops:.1f} GFLOP/s ({k.sketch})",
              flush=True)
    return out


def time_all(names, args, db_path) -> dict:
    import torch
    torch.set_num_threads(os.cpu_count() or 1)
    db = Database(db_path)
    target = Target.cpu()
    timer = Timer(warmup_seconds=0.05, min_repeats=5, max_repeats=200, budget_seconds=args.seconds)
    rng = np.random.default_rng(args.seed)
    report = {}
    for name in names:
        b = BENCHES[name]
        comp = (QUICK[name] if args.quick else b.make)()
        problem = Problem.of(comp)
        arrays = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in comp.inputs}
        out = np.empty(comp.output.shape, np.float32)
        contenders: dict[str, Callable[[], object]] = {}
        trials_of: dict[str, int] = {}
        final = autoschedule(comp, db=db_path, progress=False)  # the recorded winner, no search
        contenders["tensortune"] = raw_call(final.kernel, arrays, out)
        total = len([r for r in db.records(problem.workload, target) if r.strategy != "confirm"])
        trials_of["tensortune"] = total
        for n in CHECKPOINTS:
            rec = best_within(db, problem, target, n)
            if rec is not None and n < total:
                k = finish_kernel(problem, rec.config, rec.time, n, 0.0, True)
                contenders[f"tensortune@{n}"] = raw_call(k.kernel, arrays, out)
                trials_of[f"tensortune@{n}"] = n
        peers = [("numpy", b.numpy(arrays, out)), ("torch", b.torch(arrays, out))]
        check_agree(peers + list(contenders.items()), out, name)  # every contender computes the same thing
        contenders.update(peers)
        busy_before = wait_until_quiet(args.wait_quiet)
        load_before = os.getloadavg()[0]
        rounds, fastest = interleaved(contenders, timer, args.rounds, rng)
        report[name] = {
            "title": b.name if not args.quick else f"{name} (quick: {dict(comp.key)})", "flops": comp.flops,
            "busy_cores_before": round(busy_before, 2), "busy_cores_after": round(busy_cores(), 2),
            "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2), "trials": trials_of,
            **rates(rounds, fastest, comp.flops),
        }
        g = report[name]["gflops"]
        print(f"{b.name} (other processes busy on {busy_before:.1f} cores): "
              + ", ".join(f"{k} {g[k]:.1f}" for k in contenders) + " GFLOP/s", flush=True)
    return report


def table(report: dict, tuned: dict) -> str:
    lines = ["| workload | tensortune | numpy | torch | vs numpy | vs torch | fastest run: tensortune / numpy / torch "
             "| trials | tuning | tensortune at 32 / 64 / 128 trials |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, r in report.items():
        g, t, f = r["gflops"], r["median_seconds"], r.get("gflops_fastest", {})
        cps = " / ".join(f"{g[k]:.1f}" for k in g if "@" in k)
        info = tuned.get(name, {})
        fast = " / ".join(f"{f[k]:.1f}" for k in ("tensortune", "numpy", "torch")) if f else "-"
        lines.append(
            f"| {r['title']} | {g['tensortune']:.1f} GFLOP/s ({t['tensortune'] * 1e3:.3f} ms) | "
            f"{g['numpy']:.1f} ({t['numpy'] * 1e3:.3f} ms) | {g['torch']:.1f} ({t['torch'] * 1e3:.3f} ms) | "
            f"{t['numpy'] / t['tensortune']:.2f}x | {t['torch'] / t['tensortune']:.2f}x | {fast} | "
            f"{r['trials']['tensortune']} | {info.get('tuning_seconds', '-')} s | {cps or '-'} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--phase", choices=("all", "tune", "time"), default="all")
    p.add_argument("--workloads", default=",".join(BENCHES))
    p.add_argument("--trials", type=int, default=300)
    p.add_argument("--rounds", type=int, default=9, help="interleaved timing rounds")
    p.add_argument("--seconds", type=float, default=0.3, help="timing budget per contender per round")
    p.add_argument("--wait-quiet", type=float, default=300.0,
                   help="before timing each workload, wait up to this many seconds for the other processes "
                        "to leave the cores idle")
    p.add_argument("--db", default=str(Path.home() / ".cache" / "tensortune" / "benchmarks" / "cpu_autoschedule.db"))
    p.add_argument("--out", default=str(ROOT / "docs" / "benchmarks" / "cpu.json"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--retune", action="store_true", help="search on even when the database has records")
    p.add_argument("--quick", action="store_true", help="tiny shapes and budgets: a smoke test of the script")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args()
    if args.quick:
        args.trials, args.rounds, args.seconds, args.wait_quiet = min(args.trials, 8), 3, 0.02, 0.0
        if args.db == p.get_default("db"):
            args.db = str(Path(os.environ.get("TMPDIR", "/tmp")) / "cpu_autoschedule_quick.db")
        if args.out == p.get_default("out"):
            args.out = str(Path(os.environ.get("TMPDIR", "/tmp")) / "cpu_autoschedule_quick.json")
    names = [n.strip() for n in args.workloads.split(",") if n.strip()]
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        raise SystemExit(f"unknown workload(s) {unknown}; known: {', '.join(BENCHES)}")
    Path(args.db).parent.mkdir(parents=True, exist_ok=True)
    out_path = Path(args.out)
    previous = json.loads(out_path.read_text()) if out_path.exists() else {}
    tuned = previous.get("tune", {})
    if args.phase in ("all", "tune"):
        tuned.update(tune(names, args, args.db))
    report = previous.get("time", {})
    if args.phase in ("all", "time"):
        report.update(time_all(names, args, args.db))
    import torch
    result = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]), "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": {"cpu": Target.cpu().device, "cores": os.cpu_count(), "python": platform.python_version(),
                    "numpy": np.__version__, "torch": torch.__version__,
                    "numpy_blas": _blas()},
        "tune": tuned, "time": report,
    }
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(result, indent=1, default=str))
    if report and args.phase in ("all", "time"):
        print(table({k: v for k, v in report.items() if k in names}, tuned))


def _blas() -> str:
    try:
        cfg = np.show_config(mode="dicts")
        b = cfg["Build Dependencies"]["blas"]
        return f"{b.get('name')} {b.get('version')}"
    except Exception:
        return "unknown"


if __name__ == "__main__":
    main()
