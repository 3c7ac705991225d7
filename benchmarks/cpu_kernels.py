"""Common CPU operators auto-scheduled from tensor expressions, against torch and numpy.

Workloads (float32): a 512x3072x768 matmul in each operand layout (NN: A @ B, NT:
A @ B^T, TN: A^T @ B, the operands stored as BLAS would be given them), a depthwise 3x3
convolution (1x256x56x56, padding 1), a layer norm over 768 columns of 2048 rows, and
matmuls of awkward shapes that real models produce: the MLP of a small Llama (128 tokens,
hidden 256, width 688 = 16 x 43, `x @ W^T`: `llama_up` 128x688x256 and `llama_down`
128x256x688; its decode step's matrix-vector products `decode_up` 1x688x256,
`decode_down` 1x256x688 and `decode_qo` 1x256x256) and shapes no setting was chosen on
(`odd_nn` 96x1000x300, `odd_nt` 200x1376x512, `odd_tn` 77x3072x768, `odd_gemv`
1x1000x300 and the skinny `skinny_nt` 4x2048x512). By default every workload is run;
`--workloads` picks some.
Each is auto-scheduled with `te.autoschedule(target="cpu", budget=--trials)` into a
records database; then tensortune's kernel (the recorded winner, rebuilt), torch and
numpy are timed in this process, interleaved in shuffled rounds (each round: the median
of repeated calls). The table shows the median over rounds and the fastest single run;
the JSON keeps every round. All contenders are first checked to compute the same values.

    .venv/bin/python benchmarks/cpu_kernels.py                          # tune and time everything
    .venv/bin/python benchmarks/cpu_kernels.py --phase time             # from the records
    .venv/bin/python benchmarks/cpu_kernels.py --workloads nt,depthwise --trials 100
    .venv/bin/python benchmarks/cpu_kernels.py --quick                  # tiny shapes, a smoke test

On a machine other jobs keep busy, OpenMP's default waiting (threads spin, then sleep)
makes a parallel kernel wait for a descheduled thread at every barrier; the published
run sets OMP_WAIT_POLICY=PASSIVE for the whole process (torch's OpenMP reads it too),
which the JSON records under machine.environment.

numpy's depthwise convolution is nine shifted multiply-adds over the padded image
(numpy has no convolution); its transposed matmuls are `np.matmul` on the transposed
views (OpenBLAS takes the transposition as a flag, without a copy). torch's are
`torch.matmul` on the same views, `conv2d(..., groups=C)` and `layer_norm`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cpu_autoschedule import busy_cores, check_agree, interleaved, rates, raw_call  # noqa: E402
from tensortune.autoschedule import autoschedule  # noqa: E402
from tensortune.db import Target  # noqa: E402
from tensortune.measure import Timer  # noqa: E402
from tensortune.te import workloads as W  # noqa: E402

Arrays = dict[str, np.ndarray]


@dataclass(frozen=True)
class Bench:
    title: str
    make: Callable[[bool], W.Computation]  # quick -> the computation
    numpy: Callable[[Arrays, np.ndarray], Callable[[], object]]
    torch: Callable[[Arrays, np.ndarray], Callable[[], object]]


def _operands(x: Arrays, layout: str, lib):
    a, b = x["A"], x["B"]
    return (a.T if layout[0] == "T" else a), (b.T if layout[1] == "T" else b)


def _np_matmul(layout):
    def make(x, out):
        a, b = _operands(x, layout, np)
        return lambda: np.matmul(a, b, out=out)
    return make


def _torch_matmul(layout):
    def make(x, out):
        import torch
        a, b = _operands({k: torch.from_numpy(v) for k, v in x.items()}, layout, torch)
        o = torch.from_numpy(out)
        return lambda: torch.matmul(a, b, out=o)
    return make


def _np_depthwise(x, out):
    data, weight = x["data"], x["weight"]
    n, c, h, w = data.shape
    r, s = weight.shape[1:]
    padded = np.zeros((n, c, h + r - 1, w + s - 1), np.float32)
    tmp = np.empty_like(out)

    def run():
        padded[:, :, r // 2:r // 2 + h, s // 2:s // 2 + w] = data
        out.fill(0.0)
        for dy in range(r):
            for dx in range(s):
                np.multiply(padded[:, :, dy:dy + h, dx:dx + w], weight[None, :, dy, dx, None, None], out=tmp)
                np.add(out, tmp, out=out)
    return run


def _torch_depthwise(x, out):
    import torch
    data, weight = torch.from_numpy(x["data"]), torch.from_numpy(x["weight"])
    w4 = weight.unsqueeze(1)
    o = torch.from_numpy(out)
    return lambda: o.copy_(torch.nn.functional.conv2d(data, w4, padding=1, groups=data.shape[1]))


def _np_layer_norm(x, out):
    X, g, b = x["X"], x["gamma"], x["beta"]

    def run():
        mean = X.mean(axis=1, keepdims=True)
        d = X - mean
        var = np.mean(d * d, axis=1, keepdims=True)
        np.multiply(d / np.sqrt(var + 1e-5), g, out=out)
        np.add(out, b, out=out)
    return run


def _torch_layer_norm(x, out):
    import torch
    X, g, b = (torch.from_numpy(x[k]) for k in ("X", "gamma", "beta"))
    o = torch.from_numpy(out)
    return lambda: o.copy_(torch.nn.functional.layer_norm(X, (X.shape[1],), g, b, 1e-5))


def _matmul(layout, m=512, n=3072, k=768, quick=(48, 96, 40)):
    return Bench(f"matmul {layout} {m}x{n}x{k}",
                 lambda q: W.matmul(*quick, layout=layout) if q else W.matmul(m, n, k, layout=layout),
                 _np_matmul(layout), _torch_matmul(layout))


AWKWARD_QUICK = (19, 43, 29)  # prime extents: every axis leaves a tail

BENCHES = {
    "nn": _matmul("NN"), "nt": _matmul("NT"), "tn": _matmul("TN"),
    # the linear layers of a small Llama's MLP (hidden 256, width 688 = 16 x 43, 128 tokens, x @ W^T)
    "llama_up": _matmul("NT", 128, 688, 256, AWKWARD_QUICK),
    "llama_down": _matmul("NT", 128, 256, 688, AWKWARD_QUICK),
    # the same model's decode step: one token, a matrix-vector product
    "decode_up": _matmul("NT", 1, 688, 256, (1, 43, 29)),
    "decode_down": _matmul("NT", 1, 256, 688, (1, 29, 43)),
    "decode_qo": _matmul("NT", 1, 256, 256, (1, 32, 32)),
    # shapes no setting was chosen on: a classifier head, a wider MLP, CLIP's 77 tokens
    "odd_nn": _matmul("NN", 96, 1000, 300, AWKWARD_QUICK),
    "odd_nt": _matmul("NT", 200, 1376, 512, AWKWARD_QUICK),
    "odd_tn": _matmul("TN", 77, 3072, 768, AWKWARD_QUICK),
    "odd_gemv": _matmul("NT", 1, 1000, 300, (1, 43, 37)),  # a classifier head on one sample: tails in j and k
    "skinny_nt": _matmul("NT", 4, 2048, 512, (4, 43, 37)),
    "depthwise": Bench("depthwise conv 3x3 1x256x56x56, pad 1",
                       lambda quick: W.depthwise_conv2d_nchw(1, 16 if quick else 256, 14 if quick else 56,
                                                             14 if quick else 56, 3, 3, padding=1),
                       _np_depthwise, _torch_depthwise),
    "layer_norm": Bench("layer norm 2048x768",
                        lambda quick: W.layer_norm(64 if quick else 2048, 96 if quick else 768),
                        _np_layer_norm, _torch_layer_norm),
}


def tune(names, args) -> dict:
    out = {}
    for name in names:
        comp = BENCHES[name].make(args.quick)
        start = time.perf_counter()
        k = autoschedule(comp, budget=args.trials, db=args.db, seed=args.seed, progress=not args.quiet,
                         retune=args.retune)
        seconds = time.perf_counter() - start
        out[name] = {"trials": k.trials, "tuning_seconds": round(seconds, 1), "from_db": k.from_db,
                     "best_measured_gflops": round(k.gflops, 2), "sketch": k.sketch, "config": dict(k.config)}
        print(f"tuned {name}: {k.trials} trials in {seconds:.0f} s, {k.gflops:.1f} GFLOP/s ({k.sketch})", flush=True)
    return out


def time_all(names, args) -> dict:
    import torch
    torch.set_num_threads(os.cpu_count() or 1)
    timer = Timer(warmup_seconds=0.05, min_repeats=5, max_repeats=200, budget_seconds=args.seconds)
    rng = np.random.default_rng(args.seed)
    report = {}
    for name in names:
        b = BENCHES[name]
        comp = b.make(args.quick)
        arrays = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in comp.inputs}
        out = np.empty(comp.output.shape, np.float32)
        final = autoschedule(comp, db=args.db, progress=False)  # the recorded winner, rebuilt and verified
        contenders = {"tensortune": raw_call(final.kernel, arrays, out), "numpy": b.numpy(arrays, out),
                      "torch": b.torch(arrays, out)}
        check_agree(list(contenders.items()), out, name)  # every contender computes the same thing
        busy_before = busy_cores()
        rounds, fastest = interleaved(contenders, timer, args.rounds, rng)
        report[name] = {
            "title": b.title if not args.quick else f"{name} (quick: {dict(comp.key)})", "flops": comp.flops,
            "busy_cores_before": round(busy_before, 2), "busy_cores_after": round(busy_cores(), 2),
            "sketch": final.sketch, **rates(rounds, fastest, comp.flops),
        }
        g = report[name]["gflops"]
        print(f"{report[name]['title']} (others busy on {busy_before:.1f} cores): "
              + ", ".join(f"{k} {g[k]:.1f}" for k in contenders) + " GFLOP/s", flush=True)
    return report


def table(report: dict, tuned: dict) -> str:
    lines = ["| workload | tensortune | numpy | torch | vs numpy | vs torch | fastest run: tensortune / numpy / torch "
             "| trials | sketch |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, r in report.items():
        g, t, f = r["gflops"], r["median_seconds"], r["gflops_fastest"]
        fast = " / ".join(f"{f[k]:.1f}" for k in ("tensortune", "numpy", "torch"))
        lines.append(
            f"| {r['title']} | {g['tensortune']:.1f} GFLOP/s ({t['tensortune'] * 1e3:.3f} ms) | "
            f"{g['numpy']:.1f} ({t['numpy'] * 1e3:.3f} ms) | {g['torch']:.1f} ({t['torch'] * 1e3:.3f} ms) | "
            f"{t['numpy'] / t['tensortune']:.2f}x | {t['torch'] / t['tensortune']:.2f}x | {fast} | "
            f"{tuned.get(name, {}).get('trials', '-')} | `{r['sketch']}` |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--phase", choices=("all", "tune", "time"), default="all")
    p.add_argument("--workloads", default=",".join(BENCHES))
    p.add_argument("--trials", type=int, default=64, help="the auto-scheduler's budget per workload")
    p.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds")
    p.add_argument("--seconds", type=float, default=0.3, help="timing budget per contender per round")
    p.add_argument("--db", default=str(Path.home() / ".cache" / "tensortune" / "benchmarks" / "cpu_kernels.db"))
    p.add_argument("--out", default=str(ROOT / "docs" / "benchmarks" / "cpu_kernels.json"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--retune", action="store_true", help="search on even when the database has records")
    p.add_argument("--quick", action="store_true", help="tiny shapes and budgets: a smoke test of the script")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args()
    if args.quick:
        args.trials, args.rounds, args.seconds = min(args.trials, 6), 2, 0.02
        tmp = Path(os.environ.get("TMPDIR", "/tmp"))
        if args.db == p.get_default("db"):
            args.db = str(tmp / "cpu_kernels_quick.db")
        if args.out == p.get_default("out"):
            args.out = str(tmp / "cpu_kernels_quick.json")
    names = [n.strip() for n in args.workloads.split(",") if n.strip()]
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        raise SystemExit(f"unknown workload(s) {unknown}; known: {', '.join(BENCHES)}")
    Path(args.db).parent.mkdir(parents=True, exist_ok=True)
    out_path = Path(args.out)
    previous = json.loads(out_path.read_text()) if out_path.exists() else {}
    tuned = previous.get("tune", {})
    if args.phase in ("all", "tune"):
        tuned.update(tune(names, args))
    report = previous.get("time", {})
    if args.phase in ("all", "time"):
        report.update(time_all(names, args))
    import torch
    result = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]), "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                                         time.gmtime()),
        "machine": {"cpu": Target.cpu().device, "cores": os.cpu_count(), "python": platform.python_version(),
                    "numpy": np.__version__, "torch": torch.__version__,
                    "shared": "other engineers' jobs ran on the same cores throughout",
                    "environment": {k: os.environ[k] for k in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS") if k in os.environ}},
        "trials": args.trials, "tune": tuned, "time": report,
    }
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(result, indent=1, default=str))
    if report and args.phase in ("all", "time"):
        print(table({k: v for k, v in report.items() if k in names}, tuned))


if __name__ == "__main__":
    main()
