"""Whole models compiled by tensortune, side by side with eager and torch.compile, in one run.

For each model: eager latency; torch.compile (Inductor, default mode) compile time and
latency; optionally torch.compile(mode="max-autotune") (CUDA only; minutes per model);
tensortune.compile with its budget (tuning time, latency, the share of the model's time
in tensortune's kernels, the check against eager) and a second tensortune.compile of the
same model from the records (the recompile time). Latency is the median of timed calls
after warm-up (CUDA events on the GPU, the host clock on the CPU, or with --clock process
the process's CPU time), every contender timed in interleaved rounds on the same inputs.
Prints a table last and writes JSON.

Models (random weights from their configurations; nothing is downloaded):
  gpt2          GPT-2 124M (Hugging Face config), 1 x 1024 tokens, float16
  llama         a Llama-style decoder (hidden 2048, 16 layers, 32 heads, 8 KV heads,
                MLP 8192), bfloat16, prefill of 1 x 2048 tokens
  llama-decode  the same model, one new token after a 2047-token key/value cache
  bert          BERT-base, 32 x 128 tokens, float16
  resnet50      torchvision ResNet-50, batch 32, 224x224, float16
With --size small (the CPU run) each becomes a small configuration in float32.

Usage:
  PYTHONPATH=src python benchmarks/models.py --device cuda --models gpt2,bert --json $OUT/models.json
  PYTHONPATH=src python benchmarks/models.py --device cpu --size small --json docs/benchmarks/models_cpu.json
  # on a busy machine: one thread each, timed by CPU time
  PYTHONPATH=src python benchmarks/models.py --device cpu --threads 1 --clock process --json models_cpu_1t.json
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


def hf_models(size: str, device: str) -> dict[str, Callable[[], tuple[Any, list[Any], dict[str, Any]]]]:
    """name -> () -> (model, args, kwargs) on `device` in the benchmark's dtype."""
    from transformers import BertConfig, BertModel, GPT2Config, GPT2Model, LlamaConfig, LlamaModel

    small = size == "small"
    half = torch.float32 if small else torch.float16
    bf16 = torch.float32 if small else torch.bfloat16

    def ids(b: int, s: int, vocab: int) -> Any:
        return torch.randint(0, vocab, (b, s), device=device)

    def gpt2() -> tuple[Any, list[Any], dict[str, Any]]:
        cfg = GPT2Config(use_cache=False) if not small else GPT2Config(n_layer=2, n_embd=256, n_head=4,
                                                                         vocab_size=1024, use_cache=False)
        seq = 1024 if not small else 128
        return GPT2Model(cfg).to(device, half).eval(), [ids(1, seq, cfg.vocab_size)], {}

    def llama_config() -> Any:
        if small:
            return LlamaConfig(hidden_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                               intermediate_size=688, vocab_size=1024, use_cache=False)
        return LlamaConfig(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                           intermediate_size=8192, vocab_size=32000, max_position_embeddings=4096, use_cache=False)

    def llama() -> tuple[Any, list[Any], dict[str, Any]]:
        cfg = llama_config()
        seq = 2048 if not small else 128
        return LlamaModel(cfg).to(device, bf16).eval(), [ids(1, seq, cfg.vocab_size)], {}

    def llama_decode() -> tuple[Any, list[Any], dict[str, Any]]:
        from transformers import DynamicCache
        cfg = llama_config()
        cfg.use_cache = True
        model = LlamaModel(cfg).to(device, bf16).eval()
        past = 2047 if not small else 127
        with torch.no_grad():
            cache = model(ids(1, past, cfg.vocab_size), past_key_values=DynamicCache(config=cfg),
                          use_cache=True).past_key_values
        layers = [(layer.keys, layer.values) for layer in cache.layers]

        class Step(torch.nn.Module):
            """One decode step from a fresh copy of the prefilled cache (so every call is the same step)."""

            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, token: Any, *kv: Any) -> Any:
                c = DynamicCache(config=cfg)
                for i in range(len(kv) // 2):
                    c.update(kv[2 * i], kv[2 * i + 1], i)
                return self.model(token, past_key_values=c, use_cache=True).last_hidden_state

        flat = [t for pair in layers for t in pair]
        return Step().eval(), [ids(1, 1, cfg.vocab_size), *flat], {}

    def bert() -> tuple[Any, list[Any], dict[str, Any]]:
        cfg = BertConfig() if not small else BertConfig(num_hidden_layers=2, hidden_size=256, num_attention_heads=4,
                                                        intermediate_size=1024, vocab_size=1024)
        b, s = (32, 128) if not small else (4, 64)
        mask = torch.ones(b, s, dtype=torch.long, device=device)
        mask[1::2, s * 3 // 4:] = 0  # padded sequences
        return BertModel(cfg).to(device, half).eval(), [ids(b, s, cfg.vocab_size), mask], {}

    def resnet50() -> tuple[Any, list[Any], dict[str, Any]]:
        if small:
            from transformers import ResNetConfig, ResNetModel
            cfg = ResNetConfig(embedding_size=32, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1],
                               layer_type="bottleneck")
            return ResNetModel(cfg).to(device).eval(), [torch.randn(2, 3, 64, 64, device=device)], {}
        import torchvision
        model = torchvision.models.resnet50().to(device, half).eval()
        return model, [torch.randn(32, 3, 224, 224, device=device, dtype=half)], {}

    return {"gpt2": gpt2, "llama": llama, "llama-decode": llama_decode, "bert": bert, "resnet50": resnet50}


def timer(device: str, clock: str = "wall") -> Callable[[Callable[[], Any], int], float]:
    def time_cuda(fn: Callable[[], Any], n: int) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(n):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 1e3 / n

    now = time.process_time if clock == "process" else time.perf_counter

    def time_cpu(fn: Callable[[], Any], n: int) -> float:
        t = now()
        for _ in range(n):
            fn()
        return (now() - t) / n
    return time_cuda if device == "cuda" else time_cpu


def interleaved(contenders: dict[str, Callable[[], Any]], device: str, rounds: int, per_round: int,
                clock_kind: str = "wall") -> dict[str, float]:
    """Median over rounds of each contender's mean time per call; contenders alternate every round."""
    clock = timer(device, clock_kind)
    times: dict[str, list[float]] = {k: [] for k in contenders}
    with torch.no_grad():
        for fn in contenders.values():  # warm-up (CUDA graphs captured, caches loaded)
            for _ in range(3):
                fn()
        for r in range(rounds):
            names = list(contenders)
            for name in names if r % 2 == 0 else reversed(names):
                times[name].append(clock(contenders[name], per_round))
    return {k: statistics.median(v) for k, v in times.items()}


def first(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x
    if hasattr(x, "last_hidden_state"):
        return x.last_hidden_state
    if hasattr(x, "to_tuple"):
        x = x.to_tuple()
    return first(x[0])


def run_model(name: str, make: Callable[[], Any], args: argparse.Namespace) -> dict[str, Any]:
    import tensortune
    from tensortune.graph.check import relative_error

    torch.manual_seed(0)
    model, inputs, kwargs = make()
    out: dict[str, Any] = {"model": name}
    with torch.no_grad():
        reference = first(model(*inputs, **kwargs))
    contenders: dict[str, Callable[[], Any]] = {"eager": lambda: model(*inputs, **kwargs)}
    modes = [("torch.compile", None)] + ([("max-autotune", "max-autotune")] if args.max_autotune else [])
    for label, mode in modes:
        torch._dynamo.reset()
        start = time.perf_counter()
        compiled = torch.compile(model, mode=mode)
        with torch.no_grad():
            got = first(compiled(*inputs, **kwargs))
            if args.device == "cuda":
                torch.cuda.synchronize()
        out[f"{label} compile_s"] = time.perf_counter() - start
        out[f"{label} error"] = relative_error(got.float(), reference.float())
        contenders[label] = (lambda c: lambda: c(*inputs, **kwargs))(compiled)
        print(f"[{name}] {label}: compiled in {out[f'{label} compile_s']:.1f} s", file=sys.stderr, flush=True)
    torch._dynamo.reset()
    start = time.perf_counter()
    fast = tensortune.compile(model, inputs, example_kwargs=kwargs, target=args.device, budget=args.budget,
                              db=args.db, progress=not args.quiet, retune=args.retune, prologues=args.prologues)
    out["tensortune compile_s"] = time.perf_counter() - start
    report = fast.report
    out["tensortune tuning_s"] = fast.tuning_seconds
    out["tensortune kernel_share"] = report.kernel_share
    out["tensortune check"] = report.check
    out["tensortune tasks"] = len(report.tasks)
    out["tensortune kernels"] = report.kernels
    out["tensortune fallbacks"] = [f.op for f in report.fallbacks]
    out["report"] = report.as_dict()
    print(report.table(), file=sys.stderr, flush=True)
    with torch.no_grad():
        out["tensortune error"] = relative_error(first(fast(*inputs, **kwargs)).float(), reference.float())
    torch._dynamo.reset()
    start = time.perf_counter()
    again = tensortune.compile(model, inputs, example_kwargs=kwargs, target=args.device, db=args.db, progress=False,
                               prologues=args.prologues)
    out["tensortune recompile_s"] = time.perf_counter() - start
    out["tensortune recompile_trials"] = sum(t.trials for t in again.report.tasks)
    contenders["tensortune"] = lambda: fast(*inputs, **kwargs)
    latency = interleaved(contenders, args.device, args.rounds, args.per_round, args.clock)
    for k, v in latency.items():
        out[f"{k} ms"] = v * 1e3
    return out


def table(rows: list[dict[str, Any]], max_autotune: bool) -> str:
    cols = ["eager", "torch.compile"] + (["max-autotune"] if max_autotune else []) + ["tensortune"]
    head = "| model | " + " | ".join(f"{c} ms" for c in cols) + " | vs best torch.compile | tune s | " \
        "recompile s | in tensortune kernels | check |"
    lines = [head, "|" + " --- |" * (len(cols) + 6)]
    for r in rows:
        best = min(r[f"{c} ms"] for c in cols[1:-1])
        cells = " | ".join(f"{r[f'{c} ms']:.3f}" for c in cols)
        lines.append(f"| {r['model']} | {cells} | {best / r['tensortune ms']:.2f}x | {r['tensortune compile_s']:.0f} | "
                     f"{r['tensortune recompile_s']:.1f} | {r['tensortune kernel_share']:.1%} | "
                     f"{r['tensortune error']:.1e} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--size", choices=["full", "small"], default=None, help="default: full on cuda, small on cpu")
    parser.add_argument("--models", default="gpt2,llama,llama-decode,bert,resnet50")
    parser.add_argument("--budget", type=int, default=None, help="tensortune trials per model (default: its own)")
    parser.add_argument("--max-autotune", action="store_true", help="also torch.compile(mode='max-autotune')")
    parser.add_argument("--retune", action="store_true", help="tune again where the database has records (the search "
                        "resumes from them: the budget is spent on top)")
    parser.add_argument("--prologues", choices=["fuse", "materialize", "measure"], default="measure",
                        help="tensortune's cut around work that several matmuls read (see docs/models.md)")
    parser.add_argument("--db", default=os.path.join("bench-out", "models.db"))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--per-round", type=int, default=10)
    parser.add_argument("--threads", type=int, default=None, help="CPU threads for every contender (default: torch's)")
    parser.add_argument("--clock", choices=["wall", "process"], default="wall",
                        help="CPU latency by the wall clock, or by the process's CPU time (on a machine shared with "
                        "other work, with --threads 1: the time the model ran, not the time it waited for a core)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)  # also the OpenMP threads of tensortune's kernels (one runtime)
    args.size = args.size or ("full" if args.device == "cuda" else "small")
    os.makedirs(os.path.dirname(args.db) or ".", exist_ok=True)
    makers = hf_models(args.size, args.device)
    rows = []
    for name in args.models.split(","):
        rows.append(run_model(name, makers[name], args))
        if args.json:  # written after every model: a run cut short keeps what it measured
            meta = {"device": torch.cuda.get_device_name() if args.device == "cuda" else platform.processor(),
                    "torch": torch.__version__, "cpus": os.cpu_count(), "argv": sys.argv,
                    "date": time.strftime("%Y-%m-%d %H:%M:%S"), "load": os.getloadavg(),
                    "threads": torch.get_num_threads(), "clock": args.clock}
            with open(args.json, "w") as f:
                json.dump({"meta": meta, "rows": rows}, f, indent=1, default=str)
    print(table(rows, args.max_autotune))


if __name__ == "__main__":
    main()
