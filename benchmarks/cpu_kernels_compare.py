"""Two checkouts' auto-scheduled winners side by side: before and after a change to the sketches.

`cpu_kernels.py` tunes and times one checkout's kernels. To see what a change moved, tune
the same workloads with both checkouts (each into its own records database), then:

    # with each checkout's own copy of this script (it imports that checkout's tensortune):
    python <old>/benchmarks/cpu_kernels_compare.py export --db before.db --workloads nn,llama_up --out before.json
    python <new>/benchmarks/cpu_kernels_compare.py export --db after.db --workloads nn,llama_up --out after.json
    # then, once, in one process:
    python benchmarks/cpu_kernels_compare.py compare before.json after.json --rounds 9 --out compare.json

`export` rebuilds each workload's recorded winner (verified on fresh inputs, as
`te.autoschedule` does) and writes where its compiled library is; `compare` loads both
libraries, checks that they, numpy and torch compute the same values, and times the four
interleaved in shuffled rounds (each round: the median of repeated calls). The table gives
GFLOP/s by the median over rounds and by the fastest run, and the ratios to numpy. The
JSON keeps every round, each winner's sketch and configuration, and how many cores other
processes kept busy just before timing each workload.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cpu_autoschedule import busy_cores, check_agree, interleaved, rates  # noqa: E402
from cpu_kernels import BENCHES  # noqa: E402


def export(args) -> None:
    from tensortune.autoschedule import autoschedule
    out = {}
    for name in _names(args.workloads):
        k = autoschedule(BENCHES[name].make(args.quick), db=args.db, progress=False)
        if not k.from_db:
            raise SystemExit(f"{name}: no record in {args.db}; tune it first (cpu_kernels.py --phase tune)")
        out[name] = {"library": str(k.kernel.library), "function": k.kernel.func.name,
                     "args": [[t.name, t.is_placeholder, b.dtype] for t, b in zip(k.kernel.args, k.kernel.func.args)],
                     "sketch": k.sketch, "config": {p: list(v) if isinstance(v, tuple) else v for p, v in k.config.items()},
                     "checkout": str(ROOT)}
        print(f"{name}: {k.sketch} {dict(k.config)}", flush=True)
    Path(args.out).write_text(json.dumps(out, indent=1))


def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        raise SystemExit(f"unknown workload(s) {unknown}; known: {', '.join(BENCHES)}")
    return names


def _loaded(spec: dict, arrays: dict, out: np.ndarray):
    from tensortune.backends.c_compiler import load_function
    fn = load_function(spec["library"], spec["function"], [f"{d}*" for _, _, d in spec["args"]], restype="int")
    ptrs = [(arrays[name].ctypes.data if placeholder else out.ctypes.data) for name, placeholder, _ in spec["args"]]
    return lambda: fn(*ptrs)


def compare(args) -> None:
    import torch
    from tensortune.measure import Timer
    torch.set_num_threads(os.cpu_count() or 1)
    before, after = json.loads(Path(args.before).read_text()), json.loads(Path(args.after).read_text())
    timer = Timer(warmup_seconds=0.05, min_repeats=5, max_repeats=200, budget_seconds=args.seconds)
    rng = np.random.default_rng(args.seed)
    report = {}
    print("| workload | others busy | after | before | numpy | torch | after / numpy | before / numpy | "
          "fastest run: after / before / numpy / torch | after / numpy, fastest | before / numpy, fastest |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in [n for n in after if n in before]:
        bench = BENCHES[name]
        comp = bench.make(args.quick)
        arrays = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in comp.inputs}
        out = np.empty(comp.output.shape, np.float32)
        contenders = {"after": _loaded(after[name], arrays, out), "before": _loaded(before[name], arrays, out),
                      "numpy": bench.numpy(arrays, out), "torch": bench.torch(arrays, out)}
        check_agree(list(contenders.items()), out, name)
        busy = busy_cores()
        rounds, fastest = interleaved(contenders, timer, args.rounds, rng)
        report[name] = {"title": bench.title, "flops": comp.flops, "busy_cores_before": round(busy, 2),
                        **rates(rounds, fastest, comp.flops), "before": before[name], "after": after[name]}
        g, gf = report[name]["gflops"], report[name]["gflops_fastest"]
        print(f"| {bench.title} | {busy:.1f} | " + " | ".join(f"{g[k]:.1f}" for k in contenders)
              + f" | {g['after'] / g['numpy']:.2f}x | {g['before'] / g['numpy']:.2f}x | "
              + " / ".join(f"{gf[k]:.1f}" for k in contenders)
              + f" | {gf['after'] / gf['numpy']:.2f}x | {gf['before'] / gf['numpy']:.2f}x |", flush=True)
    result = {"command": " ".join([Path(sys.executable).name, *sys.argv]),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rounds": args.rounds,
              "numpy": np.__version__, "torch": torch.__version__, "cores": os.cpu_count(),
              "environment": {k: os.environ[k] for k in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS") if k in os.environ},
              "time": report}
    Path(args.out).write_text(json.dumps(result, indent=1, default=str))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    e = sub.add_parser("export", help="rebuild the recorded winners of a database with this checkout")
    e.add_argument("--db", required=True)
    e.add_argument("--workloads", default=",".join(BENCHES))
    e.add_argument("--out", required=True)
    e.add_argument("--quick", action="store_true", help="the tiny shapes of cpu_kernels.py --quick")
    c = sub.add_parser("compare", help="time two exports, numpy and torch in one process")
    c.add_argument("before")
    c.add_argument("after")
    c.add_argument("--rounds", type=int, default=9)
    c.add_argument("--seconds", type=float, default=0.3, help="timing budget per contender per round")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--out", default="cpu_kernels_compare.json")
    c.add_argument("--quick", action="store_true", help="the tiny shapes of cpu_kernels.py --quick")
    args = p.parse_args()
    export(args) if args.command == "export" else compare(args)


if __name__ == "__main__":
    main()
