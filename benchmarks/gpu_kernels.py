"""Generated GPU kernels against the libraries: grouped convolutions, attention, a matmul sweep.

Every workload is written as tensor expressions, auto-scheduled by `autoschedule_cuda`
(sketch seeds first, then the evolutionary search; one GPU worker and one compile pool
shared by all workloads), checked against a float32 torch reference on fresh random
inputs, and timed side by side with its peers by the same CudaTimer (CUDA events, L2
flushed before every run, median) in interleaved rounds:

- conv (float16): depthwise 3x3 (the N=32 C=256 56x56 layer of issue 36; MobileNetV2's
  stride-2 layer with bias and ReLU6; channels-last with bias), ConvNeXt's depthwise 7x7
  with bias, and grouped 3x3 convolutions (ResNeXt's 8 channels per group, 32 per group)
  against cuDNN (`F.conv2d`, eager) and `torch.compile` of the same function;
- attention (batch 4, 32 heads, 4096 queries and keys, head 128; causal and not; float16
  and bfloat16) against `scaled_dot_product_attention` on its flash backend, on its cuDNN
  backend (where this build has it) and `torch.compile` of it;
- matmul (float16): 20 shapes (square, tall, skinny, deep-K, LLM projections) against
  cuBLAS (`torch.matmul`).

`--max-autotune` adds `torch.compile(mode="max-autotune-no-cudagraphs")` to every
workload (slow: tens of seconds per workload). `--deadline` stops starting workloads past
that many seconds; records go to `--db`, so a second run with the same database rebuilds
what was tuned and goes on. Each row is written to `<out>/gpu_kernels.json` as soon as it
is measured; the table comes last.

Usage (on a CUDA machine, from the repository root; about 6 minutes with 16 CPUs):
  PYTHONPATH=src python benchmarks/gpu_kernels.py --out $OUT
  PYTHONPATH=src python benchmarks/gpu_kernels.py --cases conv,attention --out $OUT   # families or names
Smoke test on the CPU (tiny shapes, Triton's interpreter, no torch.compile; times mean nothing):
  PYTHONPATH=src python benchmarks/gpu_kernels.py --quick --out /tmp/gk
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_common as gc  # noqa: E402

START = time.perf_counter()


@dataclass(frozen=True)
class Case:
    name: str
    family: str  # conv | attention | matmul
    shape: str
    make: Callable[[], Any]  # -> (te output tensor, flops)
    peers: Callable[[dict[str, Any]], dict[str, Callable[[], Any]]]  # inputs -> named torch callables
    reference: Callable[[dict[str, Any]], Any]  # float32 inputs -> float32 output
    half: str = "float16"


# -- convolutions ---------------------------------------------------------------------------------

def grouped_conv(n: int, c: int, h: int, w: int, f: int, groups: int, k: int = 3, stride: int = 1,
                 epilogue: str = "none", dtype: str = "float16") -> tuple[Any, float]:
    """`F.conv2d(x, w, bias, stride, k // 2, groups=groups)` then `epilogue` (none, bias, relu6),
    NCHW, written as the model importer lowers it (padding a stage of its own)."""
    from tensortune import te
    from tensortune.te import workloads

    cg, fg, pad = c // groups, f // groups, k // 2
    x = te.placeholder((n, c, h, w), dtype, "x")
    wt = te.placeholder((f, cg, k, k), dtype, "w")
    src = workloads.pad(x, pad, pad)
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    rr, rs = te.reduce_axis(k, "rr"), te.reduce_axis(k, "rs")
    if cg == 1:
        def body(b: Any, o: Any, y: Any, z: Any) -> Any:
            ch = o if groups == f else o // fg
            return te.sum(src[b, ch, y * stride + rr, z * stride + rs].astype("float32")
                          * wt[o, 0, rr, rs].astype("float32"), axis=[rr, rs])
    else:
        rc = te.reduce_axis(cg, "rc")

        def body(b: Any, o: Any, y: Any, z: Any) -> Any:
            return te.sum(src[b, o // fg * cg + rc, y * stride + rr, z * stride + rs].astype("float32")
                          * wt[o, rc, rr, rs].astype("float32"), axis=[rc, rr, rs])
    conv = te.compute((n, f, oh, ow), body, name="conv")
    flops = 2.0 * n * f * oh * ow * cg * k * k
    if epilogue == "none":
        out = te.compute((n, f, oh, ow), lambda b, o, y, z: conv[b, o, y, z].astype(dtype), name="out")
        return out, flops
    bias = te.placeholder((f,), dtype, "bias")

    def finish(b: Any, o: Any, y: Any, z: Any) -> Any:
        v = conv[b, o, y, z] + bias[o].astype("float32")
        if epilogue == "relu6":
            v = te.minimum(te.maximum(v, 0.0), 6.0)
        return v.astype(dtype)
    return te.compute((n, f, oh, ow), finish, name="out"), flops


def depthwise_nhwc(n: int, h: int, w: int, c: int, k: int = 3, dtype: str = "float16") -> tuple[Any, float]:
    """A channels-last depthwise convolution with bias: `x[n, h, w, c]`, `w[k, k, c]`."""
    from tensortune import te

    x = te.placeholder((n, h, w, c), dtype, "x")
    wt = te.placeholder((k, k, c), dtype, "w")
    bias = te.placeholder((c,), dtype, "bias")
    pad = k // 2
    rr, rs = te.reduce_axis(k, "rr"), te.reduce_axis(k, "rs")

    def body(b: Any, y: Any, z: Any, ch: Any) -> Any:
        yy, zz = y + rr - pad, z + rs - pad
        inside = te.all(yy >= 0, yy < h, zz >= 0, zz < w)
        return te.sum(te.select(inside, x[b, yy, zz, ch], 0.0).astype("float32") * wt[rr, rs, ch].astype("float32"),
                      axis=[rr, rs])
    conv = te.compute((n, h, w, c), body, name="dw")
    out = te.compute((n, h, w, c), lambda b, y, z, ch: (conv[b, y, z, ch] + bias[ch].astype("float32")).astype(dtype),
                     name="out")
    return out, 2.0 * n * h * w * c * k * k


def conv_case(name: str, n: int, c: int, h: int, w: int, f: int, groups: int, k: int = 3, stride: int = 1,
              epilogue: str = "none") -> Case:
    import torch.nn.functional as F

    def torch_fn(x: Any, wt: Any, bias: Any = None) -> Any:
        y = F.conv2d(x, wt, bias, stride, k // 2, 1, groups)
        return y.clamp(0.0, 6.0) if epilogue == "relu6" else y

    def peers(given: dict[str, Any]) -> dict[str, Callable[[], Any]]:
        args = [given["x"], given["w"]] + ([given["bias"]] if "bias" in given else [])
        return {"eager": lambda: torch_fn(*args), "compile": compiled(torch_fn, args)}

    def reference(given: dict[str, Any]) -> Any:
        args = [given["x"], given["w"]] + ([given["bias"]] if "bias" in given else [])
        return torch_fn(*args)

    shape = f"N={n} C={c} {h}x{w} F={f} g={groups} {k}x{k} s{stride}" + ("" if epilogue == "none" else f" +{epilogue}")
    return Case(name, "conv", shape, lambda: grouped_conv(n, c, h, w, f, groups, k, stride, epilogue), peers, reference)


def nhwc_case(name: str, n: int, h: int, w: int, c: int, k: int = 3) -> Case:
    import torch.nn.functional as F

    def torch_fn(x: Any, wt: Any, bias: Any) -> Any:  # NHWC data viewed as channels-last NCHW
        y = F.conv2d(x.permute(0, 3, 1, 2), wt.permute(2, 0, 1).unsqueeze(1), bias, 1, k // 2, 1, x.shape[-1])
        return y.permute(0, 2, 3, 1)

    def peers(given: dict[str, Any]) -> dict[str, Callable[[], Any]]:
        args = [given["x"], given["w"], given["bias"]]
        return {"eager": lambda: torch_fn(*args), "compile": compiled(torch_fn, args)}

    return Case(name, "conv", f"NHWC N={n} {h}x{w} C={c} depthwise {k}x{k} +bias",
                lambda: depthwise_nhwc(n, h, w, c, k), peers, lambda g: torch_fn(g["x"], g["w"], g["bias"]))


# -- attention ------------------------------------------------------------------------------------

def attention_case(name: str, b: int, h: int, s: int, d: int, causal: bool, dtype: str) -> Case:
    import torch.nn.functional as F

    def make() -> tuple[Any, float]:
        from tensortune.te import workloads

        comp = workloads.attention(b, h, s, s, d, dtype, causal)
        return comp.output, comp.flops

    def sdpa(q: Any, k: Any, v: Any) -> Any:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def peers(given: dict[str, Any]) -> dict[str, Callable[[], Any]]:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        q, k, v = given["q"], given["k"], given["v"]

        def flash() -> Any:
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                return sdpa(q, k, v)

        def cudnn() -> Any:
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return sdpa(q, k, v)
        return {"flash": flash, "cudnn": available(cudnn), "compile": compiled(sdpa, [q, k, v])}

    def reference(given: dict[str, Any]) -> Any:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel([SDPBackend.MATH]):
            return sdpa(given["q"], given["k"], given["v"])

    return Case(name, "attention", f"B={b} H={h} S={s} D={d} {dtype}" + (" causal" if causal else ""), make, peers,
                reference, half=dtype)


# -- matmul ---------------------------------------------------------------------------------------

MATMULS = [  # (name, M, N, K)
    ("square-1024", 1024, 1024, 1024), ("square-2048", 2048, 2048, 2048), ("square-2304", 2304, 2304, 2304),
    ("square-3072", 3072, 3072, 3072), ("square-4096", 4096, 4096, 4096), ("square-6144", 6144, 6144, 6144),
    ("square-8192", 8192, 8192, 8192),
    ("llama7b-qkv", 4096, 12288, 4096), ("llama7b-up", 4096, 11008, 4096), ("llama7b-down", 4096, 4096, 11008),
    ("llama3-gate", 2048, 14336, 4096), ("llama3-down", 2048, 4096, 14336), ("gpt2-mlp", 8192, 3072, 768),
    ("prefill-512", 512, 4096, 4096), ("skinny-256", 256, 14336, 4096), ("skinny-128", 128, 8192, 8192),
    ("skinny-16", 16, 8192, 8192), ("tall-16384", 16384, 1024, 1024), ("short-k", 8192, 8192, 256),
    ("deep-k", 1024, 1024, 16384),
]


def matmul_case(name: str, m: int, n: int, k: int) -> Case:
    import torch

    def make() -> tuple[Any, float]:
        from tensortune.te import workloads

        comp = workloads.matmul(m, n, k, "float16")
        return comp.output, comp.flops

    def peers(given: dict[str, Any]) -> dict[str, Callable[[], Any]]:
        a, b = given["A"], given["B"]
        return {"cublas": lambda: torch.matmul(a, b), "compile": compiled(torch.matmul, [a, b], library=True)}

    return Case(name, "matmul", f"{m}x{n}x{k}", make, peers, lambda g: torch.matmul(g["A"], g["B"]))


def suite(quick: bool) -> list[Case]:
    if quick:  # tiny shapes for the interpreter
        return [conv_case("dw3x3", 2, 8, 8, 8, 8, 8), conv_case("dw3x3-s2-relu6", 1, 8, 9, 9, 8, 8, 3, 2, "relu6"),
                nhwc_case("dw3x3-nhwc", 1, 6, 6, 16), conv_case("grouped-8pg", 1, 16, 6, 6, 16, 2, epilogue="bias"),
                conv_case("grouped-16pg", 1, 32, 4, 4, 32, 2),
                attention_case("attn-causal-fp16", 1, 2, 64, 32, True, "float16"),
                attention_case("attn-bf16", 1, 2, 64, 32, False, "bfloat16"),
                matmul_case("square-64", 64, 64, 64), matmul_case("tail-48x32x256", 48, 32, 256)]
    return [
        conv_case("dw3x3", 32, 256, 56, 56, 256, 256),
        conv_case("dw3x3-s2-relu6", 32, 144, 112, 112, 144, 144, 3, 2, "relu6"),
        nhwc_case("dw3x3-nhwc-bias", 32, 56, 56, 256),
        conv_case("dw7x7-convnext", 32, 192, 28, 28, 192, 192, 7, 1, "bias"),
        conv_case("grouped-8pg", 32, 256, 56, 56, 256, 32, epilogue="bias"),
        conv_case("grouped-32pg", 32, 256, 28, 28, 256, 8),
        *(attention_case(f"attn{'-causal' if causal else ''}-{'bf16' if dt == 'bfloat16' else 'fp16'}",
                         4, 32, 4096, 128, causal, dt)
          for dt in ("float16", "bfloat16") for causal in (False, True)),
        *(matmul_case(*spec) for spec in MATMULS),
    ]


# -- peers, inputs, checking ----------------------------------------------------------------------

ARGS: argparse.Namespace | None = None


def compiled(fn: Callable[..., Any], args: list[Any], library: bool = False) -> Callable[[], Any] | None:
    """`torch.compile(fn)` on `args` (default mode; max-autotune with --max-autotune), or None when
    skipped: on the CPU, with --no-compile, past the deadline, and (default mode) for a plain
    library call that torch.compile hands back to the library (`library`)."""
    import torch

    assert ARGS is not None
    if ARGS.quick or ARGS.no_compile or late() or (library and not ARGS.max_autotune):
        return None
    mode = "max-autotune-no-cudagraphs" if ARGS.max_autotune else None
    torch._dynamo.reset()
    f = torch.compile(fn, mode=mode, dynamic=False)
    f(*args)  # compiled here, not inside the timing
    torch.cuda.synchronize()
    return lambda: f(*args)


def available(fn: Callable[[], Any]) -> Callable[[], Any] | None:
    """`fn` if it runs here (a backend this GPU and build support), else None (skipped)."""
    assert ARGS is not None
    if ARGS.quick:
        return None
    try:
        fn()
    except RuntimeError as exc:
        print(f"peer skipped: {exc}".splitlines()[0][:200], flush=True)
        return None
    return fn


def late() -> bool:
    assert ARGS is not None
    return bool(ARGS.deadline) and time.perf_counter() - START > ARGS.deadline


def inputs(output: Any, device: str, seed: int) -> dict[str, Any]:
    import torch

    from tensortune.backends.triton.patterns import analyze

    g = torch.Generator(device="cpu").manual_seed(seed)
    dtypes = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
    return {t.name: torch.randn(t.shape, generator=g).to(device=device, dtype=dtypes[t.dtype])
            for t in analyze(output).inputs}


def reference(case: Case, given: dict[str, Any]) -> Any:
    import torch

    prev = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        return case.reference({n: x.float() for n, x in given.items()}).float()
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = prev


# -- tuning on one shared worker ------------------------------------------------------------------

class SharedTuning:
    """`autoschedule_cuda`'s search for each workload on one GPU worker and one compile pool;
    `results`: every candidate the last search measured; `confirm`: the finalists re-timed."""

    def __init__(self, args: argparse.Namespace, confirm: bool = True) -> None:
        self.args = args
        self.confirm = confirm
        self.results: list[Any] = []
        self.runner: Any = None
        self.compiler: Any = None

    def kernel(self, output: Any, trials: int, half: str) -> tuple[Any, float]:
        from tensortune.backends.triton.tune import CudaSearch

        start = time.perf_counter()
        search = CudaSearch(output, db=self.args.db, half=half, progress=False, budget_hint=trials,
                            cache_dir=self.args.cache, jobs=self.args.jobs, runner=self.runner,
                            compiler=self.compiler)
        try:
            if not self.args.retune:
                recorded = search.recorded()
                if recorded is not None:
                    return recorded, time.perf_counter() - start
            if self.runner is None:
                self._start(search)
            search.tune(trials)
            self.results = list(search.results)
            return search.finish(confirm=self.confirm), time.perf_counter() - start
        finally:
            search.close()

    def _start(self, search: Any) -> None:
        import functools

        from tensortune.measure.gpu import GpuRunner

        env = {"TRITON_INTERPRET": "1"} if self.args.quick else {}
        self.runner = GpuRunner(search.task, timeout=120.0, env=env, cutoff_factor=None if self.args.quick else 4.0)
        if not self.args.quick:
            from tensortune.measure.triton_compile import ParallelCompiler, detect_target, warm_triton

            self.compiler = ParallelCompiler(lambda c: None, jobs=self.args.jobs, env=env,
                                             warm=functools.partial(warm_triton, detect_target()), stream=True)
        search._runner, search._shared_runner, search._compiler = self.runner, True, self.compiler

    def close(self) -> None:
        for part in (self.runner, self.compiler):
            if part is not None:
                part.close()


def run_case(case: Case, args: argparse.Namespace, tuning: SharedTuning, timer: Any) -> dict[str, Any]:
    device = "cpu" if args.quick else "cuda"
    output, flops = case.make()
    trials = {"conv": args.conv_budget, "attention": args.attention_budget, "matmul": args.matmul_budget}[case.family]
    kernel, seconds = tuning.kernel(output, trials, case.half)
    row: dict[str, Any] = {"workload": case.name, "family": case.family, "shape": case.shape, "flops": flops,
                           "pattern": kernel.plan.kind, "from": kernel.tuning.source, "trials": kernel.tuning.trials,
                           "failures": kernel.tuning.failures, "tuning_seconds": round(seconds, 2),
                           "config": dict(kernel.config)}
    print(f"[{case.name}] {kernel.plan.kind}: {kernel.tuning.source}, {kernel.tuning.trials} trials in "
          f"{seconds:.1f} s, config {dict(kernel.config)}", flush=True)
    given = inputs(output, device, seed=args.seed + 1)  # fresh inputs, not the tuning's
    want = reference(case, given)
    if not args.quick:
        import torch

        torch.cuda.empty_cache()  # attention's float32 reference holds tens of GB until released
    impls: dict[str, Callable[[], Any]] = {"tensortune": lambda: kernel(*(given[n] for n in kernel.input_names))}
    row["errors"] = {"tensortune": gc.rel_error(impls["tensortune"](), want)}
    start = time.perf_counter()
    for name, fn in case.peers(given).items():
        if fn is None:
            continue
        impls[name] = fn
        row["errors"][name] = gc.rel_error(fn(), want)
    row["peer_setup_seconds"] = round(time.perf_counter() - start, 2)
    tolerance = 3e-2 if case.half == "bfloat16" else 1e-2
    row["correct"] = row["errors"]["tensortune"] <= tolerance
    times = gc.interleaved_us(impls, timer, args.rounds)
    row["us"] = {name: statistics.median(ts) for name, ts in times.items()}
    row["rounds_us"] = times
    tt = row["us"]["tensortune"]
    row["tflops"] = flops / (tt * 1e-6) / 1e12
    row["speedup"] = {name: us / tt for name, us in row["us"].items() if name != "tensortune"}
    return row


# -- report ---------------------------------------------------------------------------------------

def table(rows: dict[str, dict[str, Any]]) -> str:
    head = (f"{'workload':<20} {'shape':<44} {'pattern':<13} {'tensortune':>10} {'library':>10} {'compile':>10} "
            f"{'x lib':>6} {'x comp':>6} {'TFLOP/s':>8} {'trials':>6} {'tune s':>6}  check")
    lines = [head, "-" * len(head)]
    ratios: dict[str, list[float]] = {}
    for name, r in rows.items():
        lib = next((k for k in ("eager", "flash", "cublas") if k in r["us"]), None)
        comp = r["us"].get("compile")
        x_lib = r["speedup"].get(lib) if lib else None
        x_comp = r["speedup"].get("compile")
        if x_lib is not None and r["correct"]:
            ratios.setdefault(r["family"], []).append(x_lib)
        lines.append(
            f"{name:<20} {r['shape']:<44} {r['pattern']:<13} {r['us']['tensortune']:8.1f}us "
            + (f"{r['us'][lib]:8.1f}us " if lib else f"{'-':>10} ")
            + (f"{comp:8.1f}us " if comp is not None else f"{'-':>10} ")
            + (f"{x_lib:6.2f} " if x_lib is not None else f"{'-':>6} ")
            + (f"{x_comp:6.2f} " if x_comp is not None else f"{'-':>6} ")
            + f"{r['tflops']:8.1f} {r['trials']:6d} {r['tuning_seconds']:6.1f}  "
            + ("ok" if r["correct"] else "WRONG") + f" {r['errors']['tensortune']:.1e}")
    for family, xs in ratios.items():
        gm = math.exp(statistics.fmean(math.log(x) for x in xs))
        lines.append(f"{family}: geometric mean {gm:.2f}x of the library, lowest {min(xs):.2f}x over {len(xs)} shapes")
    lines.append("library: cuDNN eager (conv), SDPA's flash backend (attention), cuBLAS (matmul); compile: "
                 "torch.compile (max-autotune-no-cudagraphs with --max-autotune); x > 1: tensortune is faster")
    return "\n".join(lines)


def main() -> int:
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.environ.get("OUT", "bench-out/gpu_kernels"))
    parser.add_argument("--db", default=None, help="records database (default: <out>/records.db)")
    parser.add_argument("--cache", default=None, help="where generated kernels are written (default: /tmp/tt-kernels)")
    parser.add_argument("--cases", default="", help="comma-separated families (conv, attention, matmul) or names")
    parser.add_argument("--conv-budget", type=int, default=16, help="trials per convolution")
    parser.add_argument("--attention-budget", type=int, default=12, help="trials per attention workload")
    parser.add_argument("--matmul-budget", type=int, default=10, help="trials per matmul")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds")
    parser.add_argument("--max-autotune", action="store_true", help="torch.compile in max-autotune mode (slow)")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--deadline", type=float, default=540.0,
                        help="seconds after which no workload starts and torch.compile is skipped (0: none)")
    parser.add_argument("--retune", action="store_true", help="search even where records exist")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="tiny shapes under TRITON_INTERPRET=1 on the CPU")
    args = parser.parse_args()
    ARGS = args
    if args.quick:
        os.environ["TRITON_INTERPRET"] = "1"  # before Triton is imported
        args.conv_budget, args.attention_budget, args.matmul_budget = (min(v, 2) for v in (
            args.conv_budget, args.attention_budget, args.matmul_budget))
        args.rounds = 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    args.db = args.db or str(out / "records.db")
    args.cache = args.cache or str(Path("/tmp") / ("tt-kernels-quick" if args.quick else "tt-kernels"))
    import torch

    if not args.quick and not torch.cuda.is_available():
        print("gpu_kernels.py needs a CUDA GPU (none is visible); run with --quick for the CPU smoke test "
              "under Triton's interpreter", file=sys.stderr)
        return 2
    cases = suite(args.quick)
    if args.cases:
        keys = {k.strip() for k in args.cases.split(",") if k.strip()}
        known = {c.family for c in cases} | {c.name for c in cases}
        if keys - known:
            print(f"unknown cases {sorted(keys - known)}; known: {sorted(known)}", file=sys.stderr)
            return 2
        cases = [c for c in cases if c.family in keys or c.name in keys]
    timer = gc.make_timer(args.quick, budget_seconds=0.2, warmup_seconds=0.03, min_repeats=10, max_repeats=1000)
    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join(sys.argv), "machine": gc.machine(args.quick),
        "cpus": os.cpu_count(), "quick": args.quick, "versions": gc.versions(), "rows": {}, "skipped": []}
    path = out / "gpu_kernels.json"
    by_name = {c.name: c for c in cases}

    def past_deadline(name: str) -> bool:
        if not late():
            return False
        report["skipped"].append(name)
        print(f"[{name}] skipped: past --deadline {args.deadline} s", flush=True)
        return True

    tuning = SharedTuning(args)
    try:
        gc.measure_rows(by_name, lambda name: run_case(by_name[name], args, tuning, timer), report, "rows", path,
                        START, skip=past_deadline)
    finally:
        tuning.close()
    print()
    print(table(report["rows"]))
    print(f"\n{len(report['rows'])} workloads in {time.perf_counter() - START:.0f} s; "
          f"skipped {report['skipped'] or 'none'}; failed {sorted(report.get('failed', {})) or 'none'}; "
          f"results in {path}")
    return gc.exit_status(report, "rows")


if __name__ == "__main__":
    sys.exit(main())
