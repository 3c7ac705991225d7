"""Attention from tensor expressions as one fused, tuned GPU kernel, side by side with torch.

Workloads (`te.workloads.attention`, float16): GPT-2 (B=1, H=12, S=1024, D=64, causal),
a Llama-style prefill (B=1, H=16, S=2048, D=128, causal) and its decode step (Sq=1,
Skv=2048), the same prefill with grouped-query attention (8 key/value heads), and BERT
(B=32, H=12, S=128, D=64) with a boolean padding mask [B, 1, 1, S]. For each:

- tensortune fused: the whole graph auto-scheduled by `autoschedule_cuda` as one
  flash-attention kernel (the attention pattern), `--budget` trials;
- tensortune unfused: the same stages cut into the three kernels the other patterns make
  (scores + scale + mask: a contraction writing float32 logits; max, exp, sum, normalise:
  a rows kernel writing float16 probabilities; probabilities times values: a contraction),
  each auto-scheduled with `--unfused-budget` trials, timed as one pipeline;
- torch: `scaled_dot_product_attention` restricted to its flash backend (FlashAttention-2;
  not for masks), and with its default backend choice.

All are checked against torch's math backend in float32 on the same inputs, and timed by
the same CudaTimer (CUDA events, L2 flushed before every run, median of the repeats).
Records go to `--db`: a second run rebuilds the tuned kernels without measuring, so a
long suite can be run in parts (`--only`) within a time limit, each part adding its rows
to the `--json` file (tuning takes about a minute or two per workload on 16 CPUs).

Usage (on a CUDA machine, from the repository root):
  PYTHONPATH=src python benchmarks/gpu_attention.py --json $OUT/gpu_attention.json
  PYTHONPATH=src python benchmarks/gpu_attention.py --only gpt2,bert-mask --json ...   # a part
Smoke test on the CPU (tiny shapes, Triton's interpreter; the times mean nothing):
  PYTHONPATH=src python benchmarks/gpu_attention.py --quick --json /tmp/attention.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_common as gc  # noqa: E402


@dataclass(frozen=True)
class Case:
    name: str
    b: int
    h: int
    sq: int
    skv: int
    d: int
    causal: bool = False
    kv_heads: int | None = None
    padding_mask: bool = False  # a bool [B, 1, 1, Skv] mask keeping each sequence's first keys

    def computation(self) -> Any:
        from tensortune.te import workloads

        return workloads.attention(self.b, self.h, self.sq, self.skv, self.d, "float16", self.causal,
                                   kv_heads=self.kv_heads, mask="bool" if self.padding_mask else None,
                                   mask_shape=(self.b, 1, 1, self.skv) if self.padding_mask else None)

    @property
    def shape(self) -> str:
        hkv = f"/{self.kv_heads}" if self.kv_heads else ""
        return (f"B={self.b} H={self.h}{hkv} Sq={self.sq} Skv={self.skv} D={self.d}"
                + (" causal" if self.causal else "") + (" mask" if self.padding_mask else ""))


def suite(quick: bool) -> list[Case]:
    if quick:  # tiny shapes for the interpreter
        return [Case("gpt2", 1, 2, 32, 32, 16, causal=True),
                Case("llama-prefill", 1, 2, 48, 48, 32, causal=True),
                Case("llama-decode", 1, 2, 1, 64, 32, causal=True),
                Case("llama-gqa-prefill", 1, 4, 32, 32, 16, causal=True, kv_heads=2),
                Case("bert-mask", 2, 2, 16, 16, 16, padding_mask=True)]
    return [Case("gpt2", 1, 12, 1024, 1024, 64, causal=True),
            Case("llama-prefill", 1, 16, 2048, 2048, 128, causal=True),
            Case("llama-decode", 1, 16, 1, 2048, 128, causal=True),
            Case("llama-gqa-prefill", 1, 32, 2048, 2048, 64, causal=True, kv_heads=8),
            Case("bert-mask", 32, 12, 128, 128, 64, padding_mask=True)]


# -- inputs and the float32 reference ------------------------------------------------------------

def inputs(case: Case, device: str, dtype: Any, seed: int) -> dict[str, Any]:
    import torch

    g = torch.Generator(device="cpu").manual_seed(seed)
    hkv = case.kv_heads or case.h
    given = {"q": torch.randn(case.b, case.h, case.sq, case.d, generator=g),
             "k": torch.randn(case.b, hkv, case.skv, case.d, generator=g),
             "v": torch.randn(case.b, hkv, case.skv, case.d, generator=g)}
    given = {n: x.to(device=device, dtype=dtype) for n, x in given.items()}
    if case.padding_mask:  # each sequence keeps a random prefix of at least a quarter of its keys
        lengths = torch.randint(max(1, case.skv // 4), case.skv + 1, (case.b,), generator=g)
        keep = torch.arange(case.skv)[None, :] < lengths[:, None]
        given["mask"] = keep[:, None, None, :].to(device)
    return given


def torch_mask(case: Case, given: dict[str, Any]) -> Any:
    """The boolean mask torch needs for this case (None: none, or is_causal does it)."""
    import torch

    mask = given.get("mask")
    if case.causal and case.sq != case.skv and case.sq > 1:  # one query (decoding) sees every key
        keep = torch.ones(case.sq, case.skv, dtype=torch.bool, device=given["q"].device).tril(case.skv - case.sq)
        mask = keep if mask is None else mask & keep
    return mask


def sdpa(case: Case, given: dict[str, Any], backend: Any = None) -> Any:
    import torch.nn.functional as F

    mask = torch_mask(case, given)
    causal = case.causal and case.sq == case.skv and case.sq > 1
    k, v = given["k"], given["v"]
    extra: dict[str, Any] = {}
    if case.kv_heads:
        extra["enable_gqa"] = True
    call = lambda: F.scaled_dot_product_attention(given["q"], k, v, attn_mask=mask, is_causal=causal,  # noqa: E731
                                                  **extra)
    if backend is None:
        return call()
    from torch.nn.attention import sdpa_kernel

    with sdpa_kernel([backend]):
        return call()


def reference(case: Case, given: dict[str, Any]) -> Any:
    import torch
    from torch.nn.attention import SDPBackend

    as32 = {n: (x.float() if x.dtype.is_floating_point else x) for n, x in given.items()}
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return sdpa(case, as32, SDPBackend.MATH)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev


# -- the unfused path: the same stages cut into three kernels ------------------------------------

def cut(output: Any, at: Sequence[Any]) -> Any:
    """`output` recomputed from placeholders standing for the tensors `at` (same names,
    shapes and dtypes): the graph a compiler makes when it does not fuse across them."""
    from tensortune.te.expr import TensorRead
    from tensortune.te.tensor import ComputeOp, Tensor, placeholder
    from tensortune.te.visit import map_expr

    memo: dict[int, Any] = {id(t): placeholder(t.shape, t.dtype, t.name) for t in at}

    def rebuild(t: Any) -> Any:
        if id(t) not in memo:
            if t.op is None:
                memo[id(t)] = t
            else:
                body = map_expr(t.op.body, lambda x: TensorRead(rebuild(x.tensor), x.indices)
                                if isinstance(x, TensorRead) and rebuild(x.tensor) is not x.tensor else None)
                memo[id(t)] = Tensor(t.name, t.shape, t.dtype, ComputeOp(t.op.axes, t.op.reduce_axes, body, t.op.tag))
        return memo[id(t)]

    return rebuild(output)


def unfused_graphs(comp: Any) -> list[Any]:
    """[logits from q, k (mask); probabilities from logits; output from probabilities, v]."""
    from tensortune.te.tensor import graph

    stages = {t.name: t for t in graph(comp.output)}
    logits, probs = stages["attention_logits"], stages["attention_probs"]
    return [logits, cut(probs, [logits]), cut(comp.output, [probs])]


# -- tuning and timing ---------------------------------------------------------------------------

def tune(target: Any, budget: int, args: argparse.Namespace, half: str) -> tuple[Any, float]:
    from tensortune.backends.triton import autoschedule_cuda

    start = time.perf_counter()
    kernel = autoschedule_cuda(target, budget=budget, db=args.db, retune=args.retune, progress=False,
                               cache_dir=args.cache, jobs=args.jobs, half=half)
    return kernel, time.perf_counter() - start


def call(kernel: Any, given: dict[str, Any]) -> Any:
    return kernel(*(given[n] for n in kernel.input_names))


def run_case(case: Case, args: argparse.Namespace, timer: Any) -> dict[str, Any]:
    import torch
    from torch.nn.attention import SDPBackend

    device = "cpu" if args.quick else "cuda"
    half = "bfloat16" if args.bf16 else "float16"
    dtype = torch.bfloat16 if args.bf16 else torch.float16
    comp = case.computation()
    row: dict[str, Any] = {"workload": case.name, "shape": case.shape, "dtype": half, "flops": comp.flops}
    given = inputs(case, device, dtype, seed=args.seed)
    want = reference(case, given)
    impls: dict[str, Callable[[], Any]] = {}

    fused, seconds = tune(comp, args.budget, args, half)
    row["fused"] = {"pattern": fused.plan.kind, "from": fused.tuning.source, "trials": fused.tuning.trials,
                    "tuning_seconds": round(seconds, 2), "failures": fused.tuning.failures,
                    "config": dict(fused.config), "error": gc.rel_error(call(fused, given), want)}
    impls["tensortune_fused"] = lambda: call(fused, given)
    print(f"[{case.name}] fused: {fused.tuning.source}, {fused.tuning.trials} trials in {seconds:.1f} s, "
          f"config {dict(fused.config)}", flush=True)

    kernels = []
    row["unfused"] = {"kernels": [], "tuning_seconds": 0.0}
    for part in unfused_graphs(comp):
        kernel, seconds = tune(part, args.unfused_budget, args, half)
        kernels.append(kernel)
        row["unfused"]["kernels"].append({"output": part.name, "pattern": kernel.plan.kind,
                                          "from": kernel.tuning.source, "trials": kernel.tuning.trials,
                                          "config": dict(kernel.config)})
        row["unfused"]["tuning_seconds"] = round(row["unfused"]["tuning_seconds"] + seconds, 2)
    k1, k2, k3 = kernels

    def unfused() -> Any:
        logits = call(k1, given)
        probs = call(k2, {"attention_logits": logits})
        return call(k3, {"attention_probs": probs, "v": given["v"]})

    row["unfused"]["error"] = gc.rel_error(unfused(), want)
    impls["tensortune_unfused"] = unfused
    print(f"[{case.name}] unfused: {[k.plan.kind for k in kernels]}", flush=True)

    for key, backend in (("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_default", None)):
        try:
            out = sdpa(case, given, backend)
        except RuntimeError as exc:  # flash takes no mask (and no CPU build may have it)
            row[key] = {"unavailable": str(exc).splitlines()[0][:200]}
            continue
        row[key] = {"error": gc.rel_error(out, want)}
        impls[key] = (lambda b=backend: sdpa(case, given, b))

    for name, times in gc.interleaved_us(impls, timer, args.rounds).items():
        row.setdefault(name, {})["times_us"] = times
    for name in impls:
        us = statistics.median(row[name]["times_us"])
        row[name]["us"] = us
        row[name]["tflops"] = comp.flops / (us * 1e-6) / 1e12
    fused_us = row["tensortune_fused"]["us"]
    for name in ("sdpa_flash", "sdpa_default", "tensortune_unfused"):
        if "us" in row.get(name, {}):
            row[f"speedup_vs_{name}"] = row[name]["us"] / fused_us
    return row


def table(rows: dict[str, dict[str, Any]]) -> str:
    head = (f"{'workload':<18} {'shape':<42} {'fused us':>9} {'unfused':>9} {'flash':>9} {'sdpa':>9} "
            f"{'flash/fused':>11} {'TFLOP/s':>8} {'trials':>6} {'tune s':>7}  errors (fused, flash)")
    lines = [head, "-" * len(head)]

    def us(r: dict[str, Any], key: str) -> str:
        v = r.get(key, {}).get("us")
        return f"{v:9.1f}" if v is not None else f"{'-':>9}"

    for name, r in rows.items():
        ratio = r.get("speedup_vs_sdpa_flash")
        flash_err = r.get("sdpa_flash", {}).get("error")
        lines.append(
            f"{name:<18} {r['shape']:<42} {us(r, 'tensortune_fused')} {us(r, 'tensortune_unfused')} "
            f"{us(r, 'sdpa_flash')} {us(r, 'sdpa_default')} {(f'{ratio:11.2f}' if ratio else f'{chr(45):>11}')} "
            f"{r['tensortune_fused']['tflops']:8.1f} {r['fused']['trials']:6d} {r['fused']['tuning_seconds']:7.1f}  "
            f"{r['fused']['error']:.1e}, {(f'{flash_err:.1e}' if flash_err is not None else '-')}")
    lines.append("flash: torch SDPA on its flash backend (no masks); sdpa: its default backend choice; "
                 "flash/fused > 1: the fused kernel is faster")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", default="gpu_attention.json", help="results (rows of other runs are kept)")
    parser.add_argument("--db", default=None, help="records database (default: bench-out/attention/records.db)")
    parser.add_argument("--cache", default=None, help="where generated kernels are written")
    parser.add_argument("--only", default="", help="comma-separated workload names")
    parser.add_argument("--budget", type=int, default=40, help="trials for each fused kernel")
    parser.add_argument("--unfused-budget", type=int, default=12, help="trials for each unfused kernel")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    parser.add_argument("--retune", action="store_true", help="search even where records exist")
    parser.add_argument("--bf16", action="store_true", help="bfloat16 storage (te graphs in float16, half=bfloat16)")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="tiny shapes under TRITON_INTERPRET=1 on the CPU")
    args = parser.parse_args()
    if args.quick:
        os.environ["TRITON_INTERPRET"] = "1"  # before Triton is imported
        args.budget, args.unfused_budget, args.rounds = min(args.budget, 3), min(args.unfused_budget, 2), 1
    base = Path("bench-out") / ("attention-quick" if args.quick else "attention")
    args.db = args.db or str(base / "records.db")
    args.cache = args.cache or str(base / "kernels")
    Path(args.db).parent.mkdir(parents=True, exist_ok=True)
    import torch

    if not args.quick and not torch.cuda.is_available():
        print("no CUDA GPU: run with --quick for the CPU smoke test", file=sys.stderr)
        return 2
    cases = gc.select_by_name(suite(args.quick), args.only, "workloads")
    if cases is None:
        return 2
    machine = gc.machine(args.quick, " (Triton interpreter)")
    out = Path(args.json)
    report: dict[str, Any] = {"rows": {}}
    if out.exists():
        old = json.loads(out.read_text())
        if old.get("machine") == machine and old.get("quick") == args.quick:
            report = old
    report.update({"date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine, "quick": args.quick,
                   "versions": gc.versions(), "command": " ".join(sys.argv)})
    timer = gc.make_timer(args.quick, budget_seconds=0.3, warmup_seconds=0.05, min_repeats=20, max_repeats=2000)
    for case in cases:
        report["rows"][case.name] = run_case(case, args, timer)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=1, default=str))
    print()
    print(table(report["rows"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
