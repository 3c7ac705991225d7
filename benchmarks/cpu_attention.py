"""Fused CPU attention: tensortune's kernel against torch's scaled_dot_product_attention and torch.compile.

For each shape, the attention is written in te (`te.workloads.attention`), auto-scheduled
for the CPU (`te.autoschedule(target="cpu")`: one fused C kernel, its block sizes searched
under --budget trials, or rebuilt from --db), then timed in one process against
`torch.nn.functional.scaled_dot_product_attention` (torch's CPU flash-attention kernel)
and `torch.compile` of the same call, interleaved in shuffled rounds on the same inputs.
All three are first checked to compute the same values. Prints a table, writes JSON.

Shapes (float32):
- bert: batch 4, 4 heads, 128 tokens, head 64, an additive padding mask [4, 1, 1, 128];
- llama: the Llama prefill of the CPU model configuration (1 x 128 tokens, 4 heads, 2
  key/value heads, head 64), causal;
- held_out: batch 2, 6 heads, 200 queries over 333 keys, head 48, a boolean mask
  [2, 1, 200, 333]: a shape no setting was chosen on, with lengths no block size divides.

Usage:
  PYTHONPATH=src python benchmarks/cpu_attention.py --budget 24 --db bench-out/cpu_attention.db \
      --json docs/benchmarks/cpu_attention.json
On a machine shared with other work, the fastest run of each contender is the steadier
comparison (other work only ever adds time); both are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cpu_autoschedule import busy_cores, interleaved, rates  # noqa: E402

SHAPES = {
    # name: (b, h, sq, skv, d, causal, kv_heads, mask, mask_shape)
    "bert": (4, 4, 128, 128, 64, False, None, "float", (4, 1, 1, 128)),
    "llama": (1, 4, 128, 128, 64, True, 2, None, None),
    "held_out": (2, 6, 200, 333, 48, False, None, "bool", (2, 1, 200, 333)),
}


def torch_inputs(w, rng: np.random.Generator) -> dict:
    import torch
    out = {}
    for t in w.inputs:
        if t.dtype == "bool":
            keep = rng.random(t.shape) < 0.8
            keep[..., 0] = True  # every query keeps a key (torch's math and flash paths differ on empty rows)
            out[t.name] = torch.from_numpy(keep)
        elif t.name == "mask":  # a padding mask as Hugging Face builds it: 0 or the lowest float
            pad = np.zeros(t.shape, np.float32)
            pad[..., -(t.shape[-1] // 4):][rng.random(t.shape[0]) < 0.5] = np.finfo(np.float32).min
            out[t.name] = torch.from_numpy(pad)
        else:
            out[t.name] = torch.from_numpy(rng.standard_normal(t.shape).astype(np.float32))
    return out


def bench(name: str, args, rng: np.random.Generator) -> dict:
    import torch
    import torch.nn.functional as F

    from tensortune import te
    from tensortune.measure import Timer
    from tensortune.te import workloads as W

    b, h, sq, skv, d, causal, kvh, mask, mask_shape = SHAPES[name]
    w = W.attention(b, h, sq, skv, d, "float32", causal=causal, kv_heads=kvh, mask=mask, mask_shape=mask_shape)
    start = time.perf_counter()
    kernel = te.autoschedule(w, target="cpu", budget=args.budget, db=args.db, progress=False)
    tuning = time.perf_counter() - start
    x = torch_inputs(w, rng)
    out = torch.empty(w.output.shape)
    ptrs = [(out if t is w.output else x[t.name]).data_ptr() for t in kernel.problem.args]
    fn = kernel._fn

    def ours() -> None:
        fn(*ptrs)

    gqa = {"enable_gqa": True} if kvh not in (None, h) else {}

    def sdpa(q, k, v, m=None):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=causal, **gqa)

    compiled = torch.compile(sdpa)
    call_args = (x["q"], x["k"], x["v"]) + ((x["mask"],) if "mask" in x else ())
    with torch.no_grad():
        want = sdpa(*call_args)
        got_compiled = compiled(*call_args)
        ours()
    errors = {"tensortune": float((out - want).abs().max()), "torch.compile": float((got_compiled - want).abs().max())}
    for k, e in errors.items():
        if not e < 2e-4 * max(1.0, float(want.abs().max())):
            raise SystemExit(f"{name}: {k} differs from torch's scaled_dot_product_attention by {e:.3g}")
    contenders = {"tensortune": ours, "torch sdpa": lambda: sdpa(*call_args),
                  "torch.compile": lambda: compiled(*call_args)}
    timer = Timer(warmup_seconds=0.05, min_repeats=5, max_repeats=100, budget_seconds=args.seconds)
    busy = busy_cores()
    with torch.no_grad():
        medians, fastest = interleaved(contenders, timer, args.rounds, rng)
    flops = float(w.flops)
    return {"shape": dict(zip(("b", "h", "sq", "skv", "d", "causal", "kv_heads", "mask", "mask_shape"),
                              SHAPES[name])),
            "config": dict(kernel.config), "trials": kernel.trials, "from_db": kernel.from_db,
            "tuning_seconds": tuning, "max_error": errors, "busy_cores_before": busy, "flops": flops,
            **rates(medians, fastest, flops)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--budget", type=int, default=24, help="trials per shape where --db has no record")
    p.add_argument("--db", default="bench-out/cpu_attention.db")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--seconds", type=float, default=0.2, help="timing budget per contender per round")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None,
                   help="threads for every contender (torch's and the kernel's OpenMP; default: all cores)")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # read when the kernel's OpenMP runtime starts
    import torch
    if args.threads:
        torch.set_num_threads(args.threads)
    names = [n.strip() for n in args.shapes.split(",") if n.strip()]
    unknown = [n for n in names if n not in SHAPES]
    if unknown:
        raise SystemExit(f"unknown shape(s) {unknown}; known: {', '.join(SHAPES)}")
    Path(args.db).parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    results = {}
    print("| shape | tensortune | torch sdpa | torch.compile | vs sdpa | vs torch.compile | "
          "fastest run: tensortune / sdpa / compile | config |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in names:
        r = results[name] = bench(name, args, rng)
        m, f = r["median_seconds"], r["fastest_seconds"]
        us = lambda s: f"{s * 1e6:.0f} us"  # noqa: E731
        print(f"| {name} | {us(m['tensortune'])} | {us(m['torch sdpa'])} | {us(m['torch.compile'])} | "
              f"{m['torch sdpa'] / m['tensortune']:.2f}x | {m['torch.compile'] / m['tensortune']:.2f}x | "
              f"{us(f['tensortune'])} / {us(f['torch sdpa'])} / {us(f['torch.compile'])} | {r['config']} |",
              flush=True)
    report = {"command": " ".join(sys.argv), "machine": platform.processor() or platform.machine(),
              "cpus": os.cpu_count(), "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "results": results}
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
