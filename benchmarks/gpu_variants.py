"""Hand-picked configurations of the generated GPU kernels, each checked and timed, beside the library.

`gpu_kernels.py` measures what the search finds within its budget; this script measures
chosen points of the same spaces, to see which parts of a space win on a workload before
the sketch's seeds and constraints are changed. For each workload (the cases of
`gpu_kernels.py`, by name) it takes the configurations listed in `VARIANTS` (overrides of
the sketch's first seed), keeps those inside the space (the others are reported with the
constraint they break), generates, compiles (in parallel), checks against the float32
reference on fresh random inputs and times every one in the GPU worker (CUDA events, L2
flushed), then times the fastest beside its peers in interleaved rounds exactly as
`gpu_kernels.py` does. Every configuration's time or error goes to `<out>/gpu_variants.json`.

Usage (on a CUDA machine, from the repository root):
  PYTHONPATH=src python benchmarks/gpu_variants.py --cases attn-fp16,square-1024 --out $OUT
Smoke test on the CPU (the quick cases, their first seeds, Triton's interpreter):
  PYTHONPATH=src python benchmarks/gpu_variants.py --quick --out /tmp/gv

`--stream-k` measures, for each matmul of `STREAM_K_CASES` (the sweep's shapes under 0.95x
cuBLAS and two shapes no setting was chosen on), the sketch's first seeds without stream-K
and the `STREAM_K_VARIANTS` with it, checks each, then times the fastest of each kind beside
cuBLAS in interleaved rounds (fresh inputs, both checked again against the float32
reference); a table and `<out>/gpu_streamk.json`. `--smoke` runs it on tiny shapes in
Triton's interpreter (times mean nothing):
  PYTHONPATH=src python benchmarks/gpu_variants.py --stream-k --out $OUT --deadline 200
  PYTHONPATH=src python benchmarks/gpu_variants.py --stream-k --smoke --out /tmp/gsk
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_common as gc  # noqa: E402
import gpu_kernels as gk  # noqa: E402

START = time.perf_counter()


def _attention(bm: int, bn: int, warps: int, stages: int, tma: bool = True, ahead: bool = False,
               reverse: bool = False) -> dict[str, Any]:
    return {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": warps, "num_stages": stages, "TMA": tma,
            "SCORES_AHEAD": ahead, "REVERSE_M": reverse, "SPLIT_KV": 1, "MASK_SPLIT": True}


def _mm(bm: int, bn: int, bk: int, warps: int, stages: int, *, persistent: bool = False, tma: bool = False,
        store: bool = False, split_k: int = 1, tail: int = 1) -> dict[str, Any]:
    cfg = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "num_warps": warps, "num_stages": stages,
           "PERSISTENT": persistent, "TMA": tma, "TMA_STORE": store, "EPILOGUE_SPLIT": 2 if store else 1,
           "SPLIT_K": split_k}
    if tail > 1:
        cfg["TAIL_SPLIT"] = tail
    return cfg


ATTENTION = [_attention(128, 64, 4, 2), _attention(128, 32, 4, 2, ahead=True),
             _attention(128, 32, 4, 3, ahead=True), _attention(128, 64, 8, 2, ahead=True),
             _attention(128, 64, 8, 3, ahead=True), _attention(128, 128, 8, 2, ahead=True),
             _attention(64, 64, 4, 3, ahead=True), _attention(64, 64, 4, 3),
             _attention(128, 64, 8, 3, tma=False, ahead=True)]
CAUSAL = ATTENTION + [_attention(128, 64, 8, 3, ahead=True, reverse=True)]

VARIANTS: dict[str, list[dict[str, Any]]] = {
    "attn-fp16": ATTENTION,
    "attn-causal-fp16": CAUSAL,
    "square-1024": [
        _mm(128, 128, 64, 4, 4, split_k=2), _mm(64, 128, 64, 4, 4), _mm(64, 128, 64, 4, 5),
        _mm(64, 128, 64, 4, 4, tma=True), _mm(64, 128, 128, 4, 3), _mm(128, 64, 64, 4, 4),
        _mm(128, 64, 64, 4, 4, tma=True), _mm(64, 64, 64, 4, 4)],
    "square-2304": [
        _mm(128, 128, 64, 4, 4), _mm(128, 128, 64, 4, 4, tma=True), _mm(128, 128, 64, 4, 3), _mm(128, 128, 64, 8, 3),
        _mm(128, 256, 64, 8, 3, persistent=True, tma=True, tail=4), _mm(128, 256, 64, 8, 3, persistent=True, tma=True,
                                                                        tail=2),
        _mm(128, 256, 64, 8, 3, tail=4), _mm(128, 256, 64, 8, 3, persistent=True, tma=True, store=True),
        _mm(128, 128, 64, 4, 4, persistent=True, tma=True), _mm(128, 128, 64, 8, 3, persistent=True, tma=True,
                                                                store=True),
        _mm(256, 128, 64, 8, 3, persistent=True, tma=True, tail=4), _mm(128, 128, 64, 4, 3, tma=True)],
    "square-3072": [
        _mm(128, 256, 64, 8, 3, tail=4), _mm(128, 256, 64, 8, 3, persistent=True, tma=True, tail=4),
        _mm(128, 256, 64, 8, 3, persistent=True, tma=True, tail=2), _mm(128, 256, 64, 8, 3, persistent=True, tma=True,
                                                                        tail=3),
        _mm(128, 256, 64, 8, 3, persistent=True, tma=True, store=True), _mm(128, 256, 64, 8, 3, persistent=True,
                                                                            tma=True),
        _mm(128, 256, 64, 8, 4, persistent=True, tma=True, tail=4), _mm(128, 128, 64, 4, 3),
        _mm(128, 128, 64, 8, 3, persistent=True, tma=True, store=True), _mm(256, 128, 64, 8, 3, persistent=True,
                                                                            tma=True, tail=4),
        _mm(128, 256, 64, 8, 3, tma=True, tail=4), _mm(128, 128, 64, 4, 3, tma=True)],
    "short-k": [
        _mm(128, 256, 64, 8, 3, persistent=True, tma=True, store=True), _mm(128, 256, 64, 8, 2, persistent=True,
                                                                            tma=True, store=True),
        _mm(128, 256, 64, 8, 4, persistent=True, tma=True, store=True), _mm(128, 256, 64, 8, 2),
        _mm(128, 256, 64, 8, 2, tma=True), _mm(128, 128, 64, 4, 2), _mm(128, 128, 64, 4, 3, tma=True),
        _mm(128, 128, 64, 8, 3, persistent=True, tma=True, store=True), _mm(128, 128, 64, 4, 2, persistent=True,
                                                                            tma=True, store=True),
        _mm(128, 256, 128, 8, 2, persistent=True, tma=True, store=True), _mm(256, 128, 64, 8, 3, persistent=True,
                                                                             tma=True, store=True),
        _mm(128, 256, 64, 8, 3, persistent=True, tma=True)],
    "prefill-512": [
        _mm(128, 128, 64, 4, 4), _mm(128, 128, 64, 4, 4, tma=True), _mm(128, 128, 64, 8, 3), _mm(128, 128, 64, 4, 5),
        _mm(128, 128, 128, 8, 3), _mm(128, 256, 64, 8, 3, tail=2), _mm(128, 256, 64, 8, 3, tma=True, tail=2),
        _mm(64, 256, 64, 8, 3), _mm(64, 256, 64, 4, 4), _mm(128, 128, 64, 4, 4, persistent=True, tma=True, store=True),
        _mm(128, 128, 64, 4, 4, tail=2), _mm(128, 128, 64, 4, 4, tma=True, tail=2)],
}


# (name, M, N, K): 3072^3 and the sweep's shapes under 0.95x cuBLAS, then two shapes nobody tuned on
STREAM_K_CASES = [("square-3072", 3072, 3072, 3072), ("square-2304", 2304, 2304, 2304),
                  ("square-1024", 1024, 1024, 1024), ("skinny-128", 128, 8192, 8192),
                  ("short-k", 8192, 8192, 256), ("untuned-2560", 2560, 2560, 2560),
                  ("untuned-2048x5120x5120", 2048, 5120, 5120)]
STREAM_K_SMOKE = [("smoke-48x32x256", 48, 32, 256), ("smoke-80x48x256", 80, 48, 256)]


def _sk(bm: int, bn: int, bk: int, warps: int, stages: int, waves: int, *, per_sm: int = 1, tma: bool = True,
        store: bool = False, halves: int = 2) -> dict[str, Any]:
    return {**_mm(bm, bn, bk, warps, stages, persistent=True, tma=tma, store=store), "EPILOGUE_SPLIT": halves,
            "STREAM_K": waves, "SK_PER_SM": per_sm}


STREAM_K_VARIANTS = [_sk(128, 256, 64, 8, 3, 2), _sk(128, 256, 64, 8, 3, 1), _sk(128, 256, 64, 8, 4, 2, store=True),
                     _sk(128, 128, 64, 4, 4, 2), _sk(128, 128, 64, 4, 3, 2, per_sm=2), _sk(256, 128, 64, 8, 3, 2),
                     _sk(128, 256, 64, 8, 3, 2, tma=False)]
STREAM_K_SMOKE_VARIANTS = [_sk(16, 16, 16, 2, 2, 1, tma=False, halves=1), _sk(16, 16, 16, 2, 2, 2, tma=False, halves=1),
                           _sk(16, 32, 16, 2, 2, 2, per_sm=2)]


class VariantTuning(gk.SharedTuning):
    """Measures the listed configurations of a workload instead of searching."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        self.measured: list[dict[str, Any]] = []
        self.skipped: list[dict[str, Any]] = []
        self.variants: list[dict[str, Any]] = []

    def kernel(self, output: Any, trials: int, half: str) -> tuple[Any, float]:
        from tensortune.backends.triton.sketches import Sketch
        from tensortune.backends.triton.tune import CudaSearch

        start = time.perf_counter()
        search = CudaSearch(output, db=self.args.db, half=half, progress=False, budget_hint=max(1, trials),
                            cache_dir=self.args.cache, jobs=self.args.jobs, runner=self.runner,
                            compiler=self.compiler)
        space, first = search.sketch.space, dict(search.sketch.seeds[0])
        configs, self.skipped = [], []
        for overrides in self.variants or [dict(s) for s in search.sketch.seeds[:3]]:
            try:
                cfg = space.config({**first, **overrides})
            except Exception as exc:  # noqa: BLE001 - a point outside the space is reported, not measured
                self.skipped.append({"config": overrides, "why": str(exc)})
                continue
            if cfg not in configs:
                configs.append(cfg)
        search.sketch = Sketch(search.plan, space, tuple(configs))
        try:
            if self.runner is None:
                self._start(search)
            results = search.tune(len(configs))
            self.measured = [{"config": dict(r.config), "us": r.time * 1e6 if r.ok else None,
                              "error": None if r.ok else f"{r.error}: {r.message[:300]}"} for r in results]
            return search.finish(confirm=True), time.perf_counter() - start
        finally:
            search.close()


def stream_k_row(case: Any, tuning: VariantTuning, timer: Any, args: argparse.Namespace) -> dict[str, Any]:
    """One shape: the seeds without stream-K and the variants with it measured, then the fastest
    of each kind and cuBLAS checked on fresh inputs and timed in interleaved rounds."""
    import torch

    from tensortune.backends.triton import GenOptions, analyze, sketch
    from tensortune.backends.triton.kernel import CudaKernel
    from tensortune.space import Config

    output, flops = case.make()
    sms = 132 if args.smoke else torch.cuda.get_device_properties(0).multi_processor_count
    seeds = sketch(analyze(output), GenOptions(interpret=args.smoke), sms).seeds
    plain = [dict(c) for c in seeds if not c.get("STREAM_K")][:args.plain_seeds]
    tuning.variants = plain + (STREAM_K_SMOKE_VARIANTS if args.smoke else STREAM_K_VARIANTS)
    best, _ = tuning.kernel(output, len(tuning.variants), case.half)
    plan, generator = best.plan, best.generator
    row: dict[str, Any] = {"workload": case.name, "shape": case.shape, "flops": flops, "variants": tuning.measured,
                           "outside_space": tuning.skipped}
    kernels: dict[str, Any] = {}
    for label, stream in (("without", False), ("stream-k", True)):
        ok = [v for v in tuning.measured if v["us"] is not None and bool(v["config"].get("STREAM_K")) == stream]
        if ok:
            best = min(ok, key=lambda v: v["us"])
            row[f"{label}_config"] = best["config"]
            kernels[label] = CudaKernel(plan, Config(best["config"]), generator)
    device = "cpu" if args.smoke else "cuda"
    given = gk.inputs(output, device, seed=args.seed + 1)
    want = gk.reference(case, given)
    impls = {label: (lambda k=k: k(*(given[n] for n in k.input_names))) for label, k in kernels.items()}
    impls["cublas"] = lambda: case.reference(given)
    row["errors"] = {label: gc.rel_error(fn(), want) for label, fn in impls.items()}
    row["correct"] = all(e <= 1e-2 for e in row["errors"].values())
    times = gc.interleaved_us(impls, timer, args.rounds)
    row["us"] = {label: statistics.median(ts) for label, ts in times.items()}
    row["rounds_us"] = times
    row["vs_cublas"] = {label: row["us"]["cublas"] / us for label, us in row["us"].items() if label != "cublas"}
    return row


def stream_k_table(report: dict[str, Any]) -> str:
    head = (f"{'workload':<24} {'shape':<16} {'cuBLAS':>9} {'without':>9} {'stream-K':>9} {'x without':>9} "
            f"{'x stream-K':>10}  check  stream-K config")
    lines = [head, "-" * len(head)]
    for name, r in report["cases"].items():
        us, x = r["us"], r["vs_cublas"]
        cfg = r.get("stream-k_config") or {}
        picked = "-"
        if cfg:
            picked = (f"{cfg['BLOCK_M']}x{cfg['BLOCK_N']}x{cfg['BLOCK_K']} w{cfg['num_warps']} s{cfg['num_stages']} "
                      f"SK={cfg['STREAM_K']}x{cfg['SK_PER_SM']} TMA={int(cfg['TMA'])}/{int(cfg['TMA_STORE'])}")
        lines.append(f"{name:<24} {r['shape']:<16} {us['cublas']:7.1f}us "
                     + "".join(f"{us[k]:7.1f}us " if k in us else f"{'-':>9} " for k in ("without", "stream-k"))
                     + "".join(f"{x[k]:9.2f} " if k in x else f"{'-':>9} " for k in ("without", "stream-k"))
                     + f"  {'ok' if r['correct'] else 'WRONG'}  {picked}")
    lines.append(f"{report.get('seconds', 0)} s; skipped {report.get('skipped', 'none')}; "
                 f"failed {sorted(report.get('failed', {})) or 'none'}; x > 1: faster than cuBLAS")
    return "\n".join(lines)


def stream_k_main(args: argparse.Namespace) -> int:
    import torch
    import triton

    timer = gc.make_timer(args.smoke, budget_seconds=0.2, warmup_seconds=0.03, min_repeats=10, max_repeats=1000)
    report: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join(sys.argv),
                              "machine": "interpreter" if args.smoke else torch.cuda.get_device_name(),
                              "versions": {"torch": torch.__version__, "triton": triton.__version__}, "cases": {}}
    path = Path(args.out) / "gpu_streamk.json"
    shapes = STREAM_K_SMOKE if args.smoke else STREAM_K_CASES
    wanted = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = set(wanted) - {s[0] for s in shapes}
    if unknown:
        print(f"unknown cases {sorted(unknown)}; known: {[s[0] for s in shapes]}", file=sys.stderr)
        return 2
    by_name = {s[0]: s for s in shapes if not wanted or s[0] in wanted}
    tuning = VariantTuning(args)

    def measure(name: str) -> dict[str, Any]:
        row = stream_k_row(gk.matmul_case(*by_name[name]), tuning, timer, args)
        print(f"[{name}] " + ", ".join(f"{k} {v:.1f}us" for k, v in row["us"].items())
              + f" ({'ok' if row['correct'] else 'WRONG'})", flush=True)
        return row

    try:
        gc.measure_rows(by_name, measure, report, "cases", path, START,
                        skip=functools.partial(past_deadline, args, report))
    finally:
        tuning.close()
    print(summary(report))
    print(stream_k_table(report))
    return gc.exit_status(report, "cases")


def past_deadline(args: argparse.Namespace, report: dict[str, Any], name: str) -> bool:
    """Past `--deadline`: the workload is listed as skipped and not started."""
    if args.deadline and time.perf_counter() - START > args.deadline:
        report.setdefault("skipped", []).append(name)
        return True
    return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.environ.get("OUT", "bench-out/gpu_variants"))
    parser.add_argument("--cases", default="", help="comma-separated case names (default: every case in VARIANTS)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds of the best and its peers")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--deadline", type=float, default=0.0, help="seconds after which no workload starts (0: none)")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="the quick cases under TRITON_INTERPRET=1 on the CPU")
    parser.add_argument("--stream-k", action="store_true", help="matmuls with and without stream-K beside cuBLAS")
    parser.add_argument("--smoke", action="store_true", help="with --stream-k: tiny shapes in Triton's interpreter")
    parser.add_argument("--plain-seeds", type=int, default=3, help="with --stream-k: seeds measured without it")
    args = parser.parse_args()
    args.quick = args.quick or args.smoke
    if args.quick:
        os.environ["TRITON_INTERPRET"] = "1"
        args.rounds = 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    args.db = str(out / "records.db")
    args.cache = str(Path("/tmp") / ("tt-variants-quick" if args.quick else "tt-variants"))
    args.max_autotune, args.retune = False, True
    args.conv_budget = args.attention_budget = args.matmul_budget = 0
    gk.ARGS = args
    import torch

    if not args.quick and not torch.cuda.is_available():
        print("gpu_variants.py needs a CUDA GPU; --quick runs it in Triton's interpreter", file=sys.stderr)
        return 2
    if args.stream_k:
        return stream_k_main(args)
    cases = {c.name: c for c in gk.suite(args.quick)}
    names = [n.strip() for n in args.cases.split(",") if n.strip()] or (list(cases) if args.quick else list(VARIANTS))
    unknown = [n for n in names if n not in cases]
    if unknown:
        print(f"unknown cases {unknown}; known: {sorted(cases)}", file=sys.stderr)
        return 2
    timer = gc.make_timer(args.quick, budget_seconds=0.2, warmup_seconds=0.03, min_repeats=10, max_repeats=1000)
    import triton

    report: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join(sys.argv),
                              "machine": "interpreter" if args.quick else torch.cuda.get_device_name(),
                              "versions": {"torch": torch.__version__, "triton": triton.__version__},
                              "cases": {}}
    path = out / "gpu_variants.json"
    tuning = VariantTuning(args)

    def measure(name: str) -> dict[str, Any]:
        tuning.variants = [] if args.quick else VARIANTS.get(name, [])
        row = gk.run_case(cases[name], args, tuning, timer)
        row["variants"], row["outside_space"] = tuning.measured, tuning.skipped
        return row

    try:
        gc.measure_rows(names, measure, report, "cases", path, START,
                        skip=functools.partial(past_deadline, args, report))
    finally:
        tuning.close()
    print(summary(report))
    return gc.exit_status(report, "cases")


def summary(report: dict[str, Any]) -> str:
    lines = []
    for name, row in report["cases"].items():
        peers = ", ".join(f"{k} {v:.1f}us" for k, v in row["us"].items())
        lines.append(f"[{name}] {row['shape']}: {peers} ({'ok' if row['correct'] else 'WRONG'})")
        for v in sorted(row["variants"], key=lambda v: v["us"] if v["us"] is not None else float("inf")):
            cfg = " ".join(f"{k}={x}" for k, x in v["config"].items() if k not in ("GROUP_M", "SPLIT_KV", "MASK_SPLIT"))
            lines.append(f"   {v['us']:9.1f}us  {cfg}" if v["us"] is not None else f"   {'failed':>11}  {cfg}: "
                         f"{(v['error'] or '')[:160]}")
        for s in row["outside_space"]:
            lines.append(f"   outside the space: {s['config']}: {s['why'][:120]}")
    lines.append(f"{report.get('seconds', 0)} s; skipped {report.get('skipped', 'none')}; "
                 f"failed {sorted(report.get('failed', {})) or 'none'}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
