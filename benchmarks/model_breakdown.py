"""Where a compiled model's time goes: each kernel in the model against the same kernel alone, beside Inductor's ops.

For each model (the small CPU configurations of benchmarks/models.py, or the full ones on
CUDA are not covered: this is the CPU's breakdown) it compiles with tensortune (from the
records when they exist) and with torch.compile, then measures:
- whole calls, interleaved in rounds: Inductor; tensortune's plan as it runs (consecutive
  C kernels from one C call); the same plan step by step from Python; and the sum of its
  kernels' isolated times;
- per kernel step: its time inside the model (timed in C inside the native sequence, the
  median over calls) and alone (called again and again on the same inputs, hot caches);
  with --clock process, CPU time (use --threads 1), which other work on the machine does
  not inflate;
- Inductor's library matmuls (oneDNN/MKL) alone on the shapes its profile shows;
- Inductor's ops by torch's profiler, per call, grouped by op and input shapes (its
  matmuls are oneDNN/MKL calls, its fused elementwise and norm work one
  `CompiledFxGraph` entry).
Prints the tables and writes JSON.

Usage:
  PYTHONPATH=src python benchmarks/model_breakdown.py --models bert,llama --db bench-out/models_cpu.db \
      --json docs/benchmarks/models_cpu_breakdown.json
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
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import first, hf_models  # noqa: E402


def clock(fn: Callable[[], Any], n: int, now: Callable[[], float] = time.perf_counter) -> float:
    start = now()
    for _ in range(n):
        fn()
    return (now() - start) / n


def rounds(contenders: dict[str, Callable[[], Any]], count: int, per_round: int,
           now: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    """Median over rounds of each contender's mean seconds per call; the order alternates every round."""
    times: dict[str, list[float]] = {k: [] for k in contenders}
    for fn in contenders.values():
        for _ in range(3):
            fn()
    names = list(contenders)
    for r in range(count):
        for name in names if r % 2 == 0 else reversed(names):
            times[name].append(clock(contenders[name], per_round, now))
    return {k: statistics.median(v) for k, v in times.items()}


def plan_arguments(graph: Any, call: Callable[[], Any]) -> list[Any]:
    """The arguments a compiled graph's plan receives when the model is called."""
    plan, seen = graph.plan, {}
    real = plan.run

    def spy(args: Any, *rest: Any, **kw: Any) -> Any:
        seen["args"] = list(args)
        return real(args, *rest, **kw)
    plan.run = spy
    try:
        call()
    finally:
        plan.run = real
    return seen["args"]


def kernel_inputs(plan: Any, args: list[Any]) -> dict[int, tuple[list[Any], Any]]:
    """Each kernel step's inputs (in storage form) and output buffer, from one step-by-step call."""
    from tensortune.graph.runtime import KernelStep
    got: dict[int, tuple[list[Any], Any]] = {}
    steps = [s for s in plan.steps if isinstance(s, KernelStep)]
    runs = [s.run for s in steps]
    for s, run in zip(steps, runs):
        s.run = (lambda s, run: lambda i, o: (got.__setitem__(s.root, (list(i), o)), run(i, o)))(s, run)
    try:
        plan.run(args, around=lambda pos: _null())  # `around` forces the step-by-step path
    finally:
        for s, run in zip(steps, runs):
            s.run = run
    return got


def _null() -> Any:
    import contextlib
    return contextlib.nullcontext()


def per_step(plan: Any, args: list[Any], calls: int, repeats: int, process_clock: bool) -> list[dict[str, Any]]:
    """Each step's time in the model (the plan as it runs, C kernels timed in C; the median
    over `calls`) and, for kernels, alone (the mean over `repeats` calls on the same inputs).
    `process_clock`: CPU time (the calling thread's in the model, the process's alone)."""
    from tensortune.graph.runtime import KernelStep
    inputs = kernel_inputs(plan, args)
    plan.run(args)
    in_model: dict[int, list[float]] = {}
    for _ in range(calls):
        seconds: dict[int, float] = {}
        plan.run(args, seconds=seconds, thread_time=process_clock)
        for pos, t in seconds.items():
            in_model.setdefault(pos, []).append(t)
    now = time.process_time if process_clock else time.perf_counter
    rows = []
    for pos, s in enumerate(plan.steps):
        t = statistics.median(in_model.get(pos, [0.0]))
        if not isinstance(s, KernelStep):
            rows.append({"step": pos, "name": f"{s[0]} @{s[1]}", "in_model_s": t})
            continue
        i, o = inputs[s.root]
        s.run(i, o)
        alone = [clock(lambda: s.run(i, o), repeats, now) for _ in range(3)]
        rows.append({"step": pos, "name": s.name, "task": s.task, "in_model_s": t, "isolated_s": min(alone)})
    return rows


def library_alone(ops: list[dict[str, Any]], repeats: int, process_clock: bool) -> list[dict[str, Any]]:
    """Inductor's library matmuls (aten mm/addmm/bmm, oneDNN/MKL) timed alone on their shapes."""
    import ast
    now = time.process_time if process_clock else time.perf_counter
    out = []
    for r in ops:
        op = r["op"].replace("aten::", "")
        if op not in ("mm", "addmm", "bmm"):
            continue
        shapes = [tuple(x) for x in ast.literal_eval(r["shapes"]) if x]
        tensors = [torch.randn(sh) for sh in shapes]
        fn = {"mm": lambda: torch.mm(tensors[0], tensors[1], out=tensors[2]),
              "bmm": lambda: torch.bmm(tensors[0], tensors[1], out=tensors[2]),
              "addmm": lambda: torch.addmm(tensors[0], tensors[1], tensors[2], out=tensors[3])}[op]
        fn()
        alone = min(clock(fn, repeats, now) for _ in range(3))
        out.append({"op": r["op"], "shapes": r["shapes"], "count_per_call": r["count_per_call"], "alone_s": alone})
    return out


def inductor_ops(compiled: Callable[[], Any], calls: int) -> list[dict[str, Any]]:
    from torch.profiler import ProfilerActivity, profile
    for _ in range(3):
        compiled()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(calls):
            compiled()
    rows = []
    for e in prof.key_averages(group_by_input_shape=True):
        if e.self_cpu_time_total <= 0:
            continue
        rows.append({"op": e.key, "shapes": str(e.input_shapes), "count_per_call": e.count / calls,
                     "self_s_per_call": e.self_cpu_time_total * 1e-6 / calls})
    return sorted(rows, key=lambda r: -r["self_s_per_call"])


def breakdown(name: str, make: Callable[[], Any], args: argparse.Namespace) -> dict[str, Any]:
    import tensortune
    torch.manual_seed(0)
    model, inputs, kwargs = make()
    torch._dynamo.reset()
    inductor = torch.compile(model)
    call_inductor = lambda: inductor(*inputs, **kwargs)  # noqa: E731
    with torch.no_grad():
        call_inductor()
    torch._dynamo.reset()
    fast = tensortune.compile(model, inputs, example_kwargs=kwargs, target="cpu", budget=args.budget, db=args.db,
                              progress=False)
    call_fast = lambda: fast(*inputs, **kwargs)  # noqa: E731
    out: dict[str, Any] = {"model": name, "report": fast.report.as_dict(), "graphs": []}
    with torch.no_grad():
        steps_off = []
        for g in fast.graphs:
            plan_args = plan_arguments(g, call_fast)
            rows = per_step(g.plan, plan_args, args.calls, args.repeats, args.clock == "process")
            out["graphs"].append(rows)
            steps_off.append(g.plan)

        def step_by_step() -> Any:
            for plan in steps_off:
                plan.native = False
            try:
                return call_fast()
            finally:
                for plan in steps_off:
                    plan.native = True
        latency = rounds({"inductor": call_inductor, "tensortune": call_fast, "tensortune step by step": step_by_step},
                         args.rounds, args.per_round,
                         time.process_time if args.clock == "process" else time.perf_counter)
        out.update({f"{k} ms": v * 1e3 for k, v in latency.items()})
        out["tensortune kernels isolated ms"] = sum(r.get("isolated_s", 0.0) for g in out["graphs"] for r in g) * 1e3
        out["inductor ops"] = inductor_ops(call_inductor, args.calls)
        out["library alone"] = library_alone(out["inductor ops"], args.repeats, args.clock == "process")
        out["agree"] = float((first(call_fast()) - first(call_inductor())).abs().max())
    return out


def show(result: dict[str, Any]) -> str:
    lines = [f"== {result['model']}: inductor {result['inductor ms']:.3f} ms, "
             f"tensortune {result['tensortune ms']:.3f} ms "
             f"(step by step {result['tensortune step by step ms']:.3f} ms; kernels alone add up to "
             f"{result['tensortune kernels isolated ms']:.3f} ms)",
             "| step | tensortune | in model us | alone us | in model / alone |", "| --- | --- | --- | --- | --- |"]
    for rows in result["graphs"]:
        for r in rows:
            alone = r.get("isolated_s")
            ratio = f"{r['in_model_s'] / alone:.2f}" if alone else ""
            lines.append(f"| {r['step']} | {r['name'][:60]} | {r['in_model_s'] * 1e6:.1f} | "
                         f"{alone * 1e6:.1f} | {ratio} |" if alone else
                         f"| {r['step']} | {r['name'][:60]} | {r['in_model_s'] * 1e6:.1f} | | |")
    lines += ["", "| Inductor's library matmul | input shapes | per call | alone us |", "| --- | --- | --- | --- |"]
    for r in result["library alone"]:
        lines.append(f"| {r['op']} | {r['shapes'][:70]} | {r['count_per_call']:.0f} | {r['alone_s'] * 1e6:.1f} |")
    lines += ["", "| Inductor op (profiler, wall) | input shapes | per call | us per call |",
              "| --- | --- | --- | --- |"]
    for r in result["inductor ops"][:16]:
        lines.append(f"| {r['op'][:50]} | {r['shapes'][:70]} | {r['count_per_call']:.0f} | "
                     f"{r['self_s_per_call'] * 1e6:.1f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="bert,llama")
    parser.add_argument("--budget", type=int, default=96, help="tensortune trials per model where it has no records")
    parser.add_argument("--db", default=os.path.join("bench-out", "models_cpu.db"))
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--per-round", type=int, default=10)
    parser.add_argument("--calls", type=int, default=10, help="profiled calls per measurement")
    parser.add_argument("--repeats", type=int, default=20,
                        help="calls of each kernel alone per measurement (best of 3)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads for both (default: torch's)")
    parser.add_argument("--clock", choices=["wall", "process"], default="wall",
                        help="whole calls by the wall clock or by the process's CPU time "
                        "(a shared machine, --threads 1)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    makers = hf_models("small", "cpu")
    results = []
    for name in args.models.split(","):
        results.append(breakdown(name, makers[name], args))
        print(show(results[-1]), flush=True)
        if args.json:
            meta = {"device": platform.processor(), "torch": torch.__version__, "cpus": os.cpu_count(),
                    "argv": sys.argv, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                    "load": os.getloadavg(), "threads": torch.get_num_threads(), "clock": args.clock}
            with open(args.json, "w") as f:
                json.dump({"meta": meta, "models": results}, f, indent=1, default=str)


if __name__ == "__main__":
    main()
