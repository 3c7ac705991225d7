"""Schedule templates on this CPU: against the auto-scheduler and numpy/torch, and the
learned model against random search on a template's knobs.

Three phases, each adding its section to the JSON (default docs/benchmarks/templates.json):

  space       measure every configuration of the matmul template's knobs (shuffled order,
              the real pipeline: compiled in parallel, checked against the interpreter,
              timed in an isolated worker) and write them as a Kernel Tuner cache;
  strategies  replay that cache: the template's default strategy (evolutionary search,
              cost model on loop-nest features) and random search, driven by the real
              Tuner, over several seeds; the fraction of the space's best found after 32,
              64 and 128 measurements, and how many measurements each needed to come within
              5% of it;
  compare     tune the matmul and conv2d templates and auto-schedule the same computations
              with the same number of measurements, then time the winners, numpy and
              torch interleaved in shuffled rounds in one process.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/templates.py space
    .venv/bin/python benchmarks/templates.py strategies --seeds 20
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/templates.py compare --trials 64
    .venv/bin/python benchmarks/templates.py all --quick        # tiny shapes, a smoke test

Timings on a shared machine: one thread (a descheduled OpenMP thread makes parallel
timings swing tenfold when other jobs run), contenders interleaved in rounds.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import math
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cpu_autoschedule import check_agree  # noqa: E402
from tensortune.db import Database, Target, Workload  # noqa: E402
from tensortune.measure import MeasureResult  # noqa: E402
from tensortune.search import SearchStrategy  # noqa: E402
from tensortune.space import Config, Space  # noqa: E402
from tensortune.template.examples import conv2d, matmul  # noqa: E402
from tensortune.template.template import TemplateTask  # noqa: E402
from tensortune.template.tune import make_strategy, tune  # noqa: E402
from tensortune.tuner import Budget, Tuner  # noqa: E402

CHECKPOINTS = (32, 64, 128)
EARLY = (8, 16)  # also reported: the space may be easy near its optimum
WITHIN = 0.05


class ShuffledOrder(SearchStrategy):
    """Every configuration of a space, in a shuffled order (drift over the pass favours no region)."""

    name = "shuffled-exhaustive"

    def __init__(self, space: Space, seed: int) -> None:
        configs = list(space)
        random.Random(seed).shuffle(configs)
        super().__init__(space, seed, len(configs))
        self.todo = configs

    def ask(self, n: int) -> list[Config]:
        out = []
        while self.todo and len(out) < n:
            c = self.todo.pop()
            if self.propose(c):
                out.append(c)
        return out


# ---- the knob space as a Kernel Tuner cache ----------------------------------------------------

def encode(value: Any) -> Any:
    """Kernel Tuner keys are comma-joined values: a tuple of loop names becomes 'a+b' ('none' if empty)."""
    if isinstance(value, tuple):
        return "+".join(value) if value else "none"
    return value


def cache_doc(task: TemplateTask, results: Sequence[MeasureResult], wall: float) -> dict[str, Any]:
    names = list(task.space.names)
    values = {p.names[0]: [encode(v) for v in p.values] for p in task.space.params}  # type: ignore[attr-defined]
    cache = {}
    for r in results:
        entry: dict[str, Any] = {n: encode(r.config[n]) for n in names}
        entry.update(compile_time=round(r.compile_seconds * 1000, 3), benchmark_time=round(r.run_seconds * 1000, 3))
        if r.ok:
            entry.update(time=r.time * 1000, times=[t * 1000 for t in r.times[:16]])
        else:
            failed = "CompilationFailedConfig" if r.error and r.error.value in ("invalid", "compile_error") \
                else "RuntimeFailedConfig"
            entry.update(time=failed, message=f"{r.error}: {r.message[:160]}")
        cache[",".join(str(encode(r.config[n])) for n in names)] = entry
    return {"device_name": platform.processor() or platform.machine(), "kernel_name": f"tensortune template {task.name}",
            "shapes": list(task.shapes), "objective": "time", "time_is": "median of the runs, ms",
            "threads": os.environ.get("OMP_NUM_THREADS", "all"),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "wall_seconds": round(wall, 1),
            "tune_params_keys": names, "tune_params": values, "cache": cache}


def measure_space(task: TemplateTask, db_path: Path, seed: int) -> tuple[list[MeasureResult], float]:
    start = time.perf_counter()
    db_path.unlink(missing_ok=True)
    tune(task, budget=task.space.size, db=str(db_path), strategy=ShuffledOrder(task.space, seed), retune=True,
         progress=True, jobs=2)
    wall = time.perf_counter() - start
    with Database(db_path) as db:
        results = [r.to_result() for r in db.records(task.workload, Target.cpu())]
    return results, wall


def load_cache(task: TemplateTask, path: Path) -> dict[Config, MeasureResult]:
    """The cache's results keyed by the task's own configurations (values decoded)."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        doc = json.load(f)
    by_key = {",".join(str(encode(c[n])) for n in task.space.names): c for c in task.space}
    out = {}
    for key, e in doc["cache"].items():
        config = by_key.get(key)
        if config is None:
            raise SystemExit(f"{path}: {key!r} is not a configuration of the template's space")
        t = e["time"]
        if isinstance(t, str):  # a schedule te refused was the builder's rejection, as in the real tuning
            out[config] = MeasureResult.failed(config, _kind(t), e.get("message", t),
                                               extra={"stage": "build"} if t == "CompilationFailedConfig" else {})
        else:
            out[config] = MeasureResult(config, (t / 1000.0,))
    return out


def _kind(marker: str):
    from tensortune.measure import ErrorKind
    return ErrorKind.INVALID if marker == "CompilationFailedConfig" else ErrorKind.RUNTIME_ERROR


class CacheRunner:
    """Answers each configuration with its measured result (the replay's measurement)."""

    def __init__(self, results: dict[Config, MeasureResult]) -> None:
        self.results = results

    def run(self, builds):
        for b in builds:
            r = self.results[b.config]
            yield dataclasses.replace(r, config=b.config)


PRIOR_RECORDS = 128  # records of the other shape the prior is fitted on (what a tuning run of it leaves)


def prior_from_cache(shape: Sequence[int], cache: Path, seed: int):
    """A cost model fitted on PRIOR_RECORDS random measured records of the matmul template
    at another shape (its programs' loop-nest features and times)."""
    from tensortune.autoschedule.features import FEATURE_NAMES
    from tensortune.model.xgb_rank import XGBRankModel
    from tensortune.template.search import TemplateFeatures
    other = matmul(*shape)
    ok = [r for r in load_cache(other, cache).values() if r.ok]
    picked = [ok[i] for i in np.random.default_rng(seed).permutation(len(ok))[:PRIOR_RECORDS]]
    model = XGBRankModel(seed=seed, feature_names=list(FEATURE_NAMES))
    model.fit(TemplateFeatures(other).configs([r.config for r in picked]), np.asarray([r.time for r in picked]))
    return model


def replay(task: TemplateTask, results: dict[Config, MeasureResult], strategy: str, budget: int,
           seed: int, prior: Any = None) -> list[float]:
    """The best time after each measurement of one replayed search ("model/start=N": the model
    strategy measuring N random configurations before the model leads)."""
    base = "model" if strategy == "model+prior" or strategy.startswith("model/start=") else strategy
    chooser = make_strategy(task, base, seed, budget)
    if strategy == "model+prior":
        chooser.use_program_prior(prior)
    elif strategy.startswith("model/start="):
        chooser.random_start = int(strategy.split("=")[1])
    tuner = Tuner(task.space, CacheRunner(results), workload=Workload.make("replay"), target=Target.make("replay", ""),
                  db=None, strategy=chooser,
                  budget=Budget(trials=budget, free_rejections=budget), seed=seed,
                  batch_size=4, progress=False)
    history = tuner.run().history
    best, curve = math.inf, []
    for r in history:
        if r.rejected_by_build:
            continue  # cost no measurement
        if r.ok:
            best = min(best, r.time)
        curve.append(best)
    return curve


def strategies_phase(task: TemplateTask, cache: Path, seeds: int, budget: int,
                     prior: tuple[Sequence[int], Path] | None = None, starts: Sequence[int] = ()) -> dict[str, Any]:
    results = load_cache(task, cache)
    optimum = min(r.time for r in results.values() if r.ok)
    within = sum(1 for r in results.values() if r.ok and r.time <= optimum * (1 + WITHIN))
    out: dict[str, Any] = {"cache": str(cache.relative_to(ROOT)) if cache.is_relative_to(ROOT) else str(cache),
                           "space": len(results), "within_5pct_configs": within, "optimum_ms": optimum * 1000,
                           "seeds": seeds, "budget": budget, "strategies": {}}
    if prior is not None:
        out["prior"] = {"shape": list(prior[0]), "cache": prior[1].name, "records": PRIOR_RECORDS}
    variants = tuple(f"model/start={n}" for n in starts)
    for strategy in ("model", "random") + (("model+prior",) if prior is not None else ()) + variants:
        curves = []
        for seed in range(seeds):
            start = time.perf_counter()
            model = prior_from_cache(prior[0], prior[1], seed) if strategy == "model+prior" and prior else None
            curves.append(replay(task, results, strategy, budget, seed, model))
            print(f"{strategy} seed {seed}: best {optimum / curves[-1][-1]:.3f} of the optimum "
                  f"({time.perf_counter() - start:.0f} s)", flush=True)
        fractions = {n: [optimum / c[min(n, len(c)) - 1] for c in curves] for n in EARLY + CHECKPOINTS if n <= budget}
        steps = reach(curves, optimum, WITHIN)
        reached = [r for r in steps if r is not None]
        out["strategies"][strategy] = {
            "mean_fraction": {n: round(statistics.mean(v), 4) for n, v in fractions.items()},
            "min_fraction": {n: round(min(v), 4) for n, v in fractions.items()},
            "within_5pct_share": {n: round(sum(1 for x in v if x >= 1 / (1 + WITHIN)) / len(v), 3)
                                  for n, v in fractions.items()},
            "measurements_to_5pct": steps,
            "median_measurements_to_5pct": statistics.median(reached) if len(reached) > len(steps) / 2 else None,
            "curves_ms": [[round(t * 1000, 5) for t in c] for c in curves],
        }
    out["to_reach"] = summary(out)
    return out


def reach(curves: Sequence[Sequence[float]], optimum: float, within: float) -> list[int | None]:
    """Per run, the measurements it took to come within `within` of the optimum (None: never)."""
    return [next((k + 1 for k, t in enumerate(c) if t <= optimum * (1 + within)), None) for c in curves]


def summary(section: dict[str, Any]) -> dict[str, Any]:
    """From the saved curves: measurements to come within 1%, 2% and 5% of the optimum, per
    strategy (the median over seeds; a run that never did counts as more than the budget)."""
    optimum = section["optimum_ms"]
    out: dict[str, Any] = {}
    for within in (0.01, 0.02, 0.05):
        row = {}
        for name, st in section["strategies"].items():
            steps = reach(st["curves_ms"], optimum, within)
            ranked = sorted(math.inf if x is None else x for x in steps)
            median = statistics.median(ranked)
            row[name] = {"median": median if math.isfinite(median) else None,
                         "reached": sum(1 for x in steps if x is not None), "runs": len(steps)}
        out[f"{round(within * 100)}%"] = row
    return out


# ---- templates against the auto-scheduler, numpy and torch -----------------------------------

def time_calls(fn: Any, seconds: float = 0.2) -> tuple[float, float]:
    """Medians over repeated calls of the wall time and of this thread's CPU time. On a
    machine whose cores other jobs share, a one-thread kernel's CPU time leaves out the
    time it waited descheduled, which the wall time of every contender is full of."""
    fn()
    walls, cpus = [], []
    deadline = time.perf_counter() + seconds
    while len(walls) < 5 or (time.perf_counter() < deadline and len(walls) < 200):
        w0, c0 = time.perf_counter(), time.thread_time()
        fn()
        cpus.append(time.thread_time() - c0)
        walls.append(time.perf_counter() - w0)
    return statistics.median(walls), statistics.median(cpus)


def compare_phase(trials: int, quick: bool, rounds: int, db_path: Path, seed: int, retune: bool) -> dict[str, Any]:
    import torch

    from tensortune.autoschedule import autoschedule
    from tensortune.backends.c_compiler import load_function
    from tensortune.te import workloads as W
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", os.cpu_count() or 1)))
    cases = {
        "matmul": (matmul(*((64, 64, 64) if quick else (512, 512, 512))),
                   lambda t: W.matmul(*t.shapes[:3])),
        "conv2d": (conv2d(*((1, 16, 14, 14, 16, 3, 3, 1) if quick else (1, 64, 56, 56, 64, 3, 3, 1))),
                   lambda t: W.conv2d_nchw(*t.shapes[:7], padding=t.shapes[7])),
    }
    rng = np.random.default_rng(seed)
    report = {}
    for name, (task, comp_of) in cases.items():
        comp = comp_of(task)
        start = time.perf_counter()
        tuned = task.tune(budget=trials, db=str(db_path), seed=seed, retune=retune, progress=False)
        t_seconds = time.perf_counter() - start
        start = time.perf_counter()
        auto = autoschedule(comp, budget=trials, db=str(db_path), seed=seed, retune=retune, progress=False)
        a_seconds = time.perf_counter() - start
        arrays = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in comp.inputs}
        out = np.empty(comp.output.shape, np.float32)

        def raw(kernel, names):
            fn = load_function(kernel.library, kernel.func.name, [f"{b.dtype}*" for b in kernel.func.args],
                               restype="int")
            ptrs = [(out if t.name == names[-1] else arrays[t.name]).ctypes.data for t in kernel.args]
            return lambda: fn(*ptrs)

        tt = {k: torch.from_numpy(v) for k, v in arrays.items()}
        to = torch.from_numpy(out)
        if name == "matmul":
            peers = {"numpy": lambda: np.matmul(arrays["A"], arrays["B"], out=out),
                     "torch": lambda: torch.matmul(tt["A"], tt["B"], out=to)}
            tmpl_names = ["A", "B", "C"]
        else:
            pad = task.shapes[7]
            peers = {"torch": lambda: to.copy_(torch.nn.functional.conv2d(tt["data"], tt["weight"], padding=pad))}
            tmpl_names = ["data", "weight", "conv"]
        contenders = {"template": raw(tuned.kernel, tmpl_names),
                      "autoschedule": raw(auto.kernel, [a.name for a in comp.inputs] + [comp.output.name]),
                      **peers}
        check_agree(list(contenders.items()), out, name)
        medians: dict[str, list[float]] = {k: [] for k in contenders}
        cpu: dict[str, list[float]] = {k: [] for k in contenders}
        order = list(contenders)
        load = os.getloadavg()[0]
        for _ in range(rounds):
            rng.shuffle(order)
            for label in order:
                wall, spent = time_calls(contenders[label])
                medians[label].append(wall)
                cpu[label].append(spent)
        med = {k: statistics.median(v) for k, v in medians.items()}
        cpu_med = {k: statistics.median(v) for k, v in cpu.items()}
        measured = {"template": tuned.trials, "autoschedule": auto.trials}  # 0: rebuilt from the records
        report[name] = {"shapes": list(task.shapes), "flops": comp.flops, "trials": trials, "measured_now": measured,
                        "template_config": {k: encode(v) for k, v in tuned.config.items()},
                        "autoschedule_sketch": auto.sketch, "tuning_seconds": {"template": round(t_seconds, 1),
                                                                                "autoschedule": round(a_seconds, 1)},
                        "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2),
                        "median_seconds": med, "rounds_seconds": medians,
                        "cpu_median_seconds": cpu_med, "rounds_cpu_seconds": cpu,
                        "gflops": {k: round(comp.flops / v / 1e9, 2) for k, v in med.items()},
                        "gflops_cpu_time": {k: round(comp.flops / v / 1e9, 2) for k, v in cpu_med.items()}}
        print(f"{name}: " + ", ".join(f"{k} {v:.1f}" for k, v in report[name]["gflops"].items()) + " GFLOP/s wall, "
              + ", ".join(f"{k} {v:.1f}" for k, v in report[name]["gflops_cpu_time"].items())
              + f" by CPU time (load {load:.1f})", flush=True)
    return report


def compact_json(report: dict[str, Any]) -> str:
    """Indented JSON with each list of numbers on one line (the curves are long)."""
    import re
    text = json.dumps(report, indent=1, default=str)
    return re.sub(r"\[\s+([-0-9.eE,\snul]+?)\s+\]",
                  lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("phase", choices=["space", "strategies", "compare", "all"])
    p.add_argument("--shape", type=int, nargs=3, default=[256, 256, 256], help="the matmul whose knob space is measured")
    p.add_argument("--cache", default=None, help="the Kernel Tuner cache of the knob space")
    p.add_argument("--json", default=str(ROOT / "docs" / "benchmarks" / "templates.json"))
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--prior-cache", default=None,
                   help="strategies: also replay the model strategy started from a model fitted on this measured "
                        "space of the matmul template at --prior-shape")
    p.add_argument("--prior-shape", type=int, nargs=3, default=[32, 32, 32])
    p.add_argument("--random-starts", type=int, nargs="*", default=[],
                   help="strategies: also replay the model strategy measuring this many random configurations "
                        "before the model leads (its default: a tenth of the budget, 8 to 24)")
    p.add_argument("--budget", type=int, default=max(CHECKPOINTS))
    p.add_argument("--trials", type=int, default=64, help="measurements for each tuner in compare")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--db", default="/tmp/tensortune_templates_bench.db")
    p.add_argument("--quick", action="store_true", help="tiny shapes and budgets: a smoke test")
    p.add_argument("--retune", action="store_true",
                   help="compare: tune again (default: rebuild the winners already in --db, only time them)")
    args = p.parse_args()
    shape = [32, 32, 32] if args.quick else args.shape
    task = matmul(*shape)
    cache = Path(args.cache or ROOT / "docs" / "benchmarks" / "spaces" /
                 f"template_matmul_{'x'.join(map(str, shape))}-cpu.json.gz")
    out_path = Path(args.json)
    report = json.loads(out_path.read_text()) if out_path.exists() else {}
    report.update(machine=f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores (shared)",
                  threads=os.environ.get("OMP_NUM_THREADS", "all"), python=platform.python_version())
    if args.phase in ("space", "all"):
        results, wall = measure_space(task, Path(args.db + ".space"), args.seed)
        cache.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(cache, "wt", encoding="utf-8") as f:
            json.dump(cache_doc(task, results, wall), f)
        ok = [r.time for r in results if r.ok]
        report["space"] = {"cache": cache.name, "configs": len(results), "ran": len(ok), "wall_seconds": round(wall),
                           "best_ms": min(ok) * 1000, "median_ms": statistics.median(ok) * 1000,
                           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        print(f"space: {len(results)} configurations, {len(ok)} ran, best {min(ok) * 1000:.4f} ms, {wall:.0f} s")
    if args.phase in ("strategies", "all"):
        seeds, budget = (3, 16) if args.quick else (args.seeds, args.budget)
        prior = (args.prior_shape, Path(args.prior_cache)) if args.prior_cache else None
        report["strategies"] = strategies_phase(task, cache, seeds, budget, prior, args.random_starts)
        report["strategies"]["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    if args.phase in ("compare", "all"):
        report["compare"] = compare_phase(4 if args.quick else args.trials, args.quick, 3 if args.quick else args.rounds,
                                          Path(args.db), args.seed, args.retune)
        report["compare_date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    out_path.write_text(compact_json(report))
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
