"""Real kernels, unchanged, under triton.autotune and @tensortune.autotune side by side.

The kernels are other people's code, used as their authors ship it (their autotune lists,
their launchers, their keyword launches): Triton's tutorial matmul and fused attention
(TensorDescriptor arguments, a configuration pre_hook), mamba's chunked causal batched matmul
(which leaves part of its output unwritten by design) and flash-attention's layer norm (under
`@triton.heuristics`, with `None` arguments). They are not part of tensortune and not in this
repository: give the folder holding their source files (`--sources DIR`, files named as in
SOURCES; a whole upstream file or an excerpt holding the listed definitions both do). For
each tuner, the named definitions are taken from the file and written to a module of their
own; the tensortune one differs only in its decorator (`@triton.autotune(` becomes
`@tensortune.autotune(`, which is all a user changes).

Each (kernel, tuner) runs in its own process with an empty Triton cache and (tensortune) an
empty records database: the seconds of the first call (tuning included), of a second call
with a new key where the kernel has one (the tutorial matmul: 4096^3 then 8192x8192x1024),
whether the result matches torch, the configuration chosen and its time (CUDA events, cold L2).

Usage (CUDA machine):  PYTHONPATH=src python benchmarks/triton_kernels.py --sources DIR --out OUT
Dry run on a CPU:      PYTHONPATH=src python benchmarks/triton_kernels.py --sources DIR --cpu
                       (TRITON_INTERPRET=1, tiny shapes, an H100 faked for the modules' imports)
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

# file -> (repository, commit, path, license, the top-level definitions taken, in file order)
SOURCES = {
    "triton_03_matrix_multiplication.py": (
        "triton-lang/triton", "7649d87cce6c12361bb9da234b9b227b2880b499", "python/tutorials/03-matrix-multiplication.py",
        "MIT", ["DEVICE", "is_cuda", "is_hip_cdna2", "get_cuda_autotune_config", "get_hip_autotune_config",
                "get_autotune_config", "matmul_kernel", "leaky_relu", "matmul"]),
    "triton_06_fused_attention.py": (
        "triton-lang/triton", "003da478d84f5bb0f51b3988cf0ea0bbe60282b7", "python/tutorials/06-fused-attention.py",
        "MIT", ["DEVICE", "is_hip", "is_cuda", "supports_tma", "_attn_fwd_inner", "_attn_fwd_inner_tma", "configs",
                "keep", "_attn_fwd", "_tma_pre_hook", "configs_tma", "keep_tma", "_attn_fwd_tma", "_attention",
                "attention"]),
    "mamba_ssd_bmm.py": (
        "state-spaces/mamba", "07429724847d24161e39e08382ceb2066c3417bb", "mamba_ssm/ops/triton/ssd_bmm.py",
        "Apache-2.0", ["init_to_zero", "_bmm_chunk_fwd_kernel", "_bmm_chunk_fwd"]),
    "flash_attn_layer_norm.py": (
        "Dao-AILab/flash-attention", "0a721daebe4fa7149f06ecf3d3eabeb6dcd0f1fa", "flash_attn/ops/triton/layer_norm.py",
        "BSD-3-Clause", ["triton_autotune_configs", "_layer_norm_fwd_1pass_kernel", "_layer_norm_fwd"]),
}

FAKE_H100 = '''
import os as _os
if _os.environ.get("TT_BENCH_FAKE_H100"):  # the CPU dry run: the module's import-time GPU queries see an H100
    import types as _types
    import torch as _torch
    import triton as _triton
    from triton.backends.compiler import GPUTarget as _GPUTarget

    class _FakeH100:
        def is_active(self): return True
        def get_current_target(self): return _GPUTarget("cuda", 90, 32)
        def get_active_torch_device(self): return _torch.device("cpu")
        def get_current_device(self): return 0
        def get_current_stream(self, device=None): return 0
        def get_benchmarker(self):
            import time as _time
            def bench(fn, quantiles=None, **kw):
                start = _time.perf_counter(); fn(); ms = (_time.perf_counter() - start) * 1e3
                return [ms] * len(quantiles) if quantiles else ms
            return bench

    _triton.runtime.driver.set_active(_FakeH100())
    _torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
    _torch.cuda.get_device_properties = lambda *a, **k: _types.SimpleNamespace(warp_size=32)
    _torch.cuda.current_device = lambda: 0
    import contextlib as _contextlib
    _torch.cuda.device = lambda index: _contextlib.nullcontext()
'''


# ---- taking the kernels from their files ---------------------------------------------------------
def extract(text: str, definitions: list[str], tensortune: bool) -> str:
    """The module of the named definitions (and the file's imports), with the autotune
    decorator swapped for tensortune's when `tensortune`."""
    tree = ast.parse(text)
    body: list[ast.stmt] = []
    wanted = set(definitions)
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            body.append(_tolerant(node))
        elif isinstance(node, ast.Try) and all(isinstance(s, (ast.Import, ast.ImportFrom, ast.Assign))
                                               for s in node.body):
            body.append(node)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in wanted:
            body.append(node)
        elif isinstance(node, ast.Assign) and {getattr(t, "id", None) for t in node.targets} & wanted:
            body.append(node)
    found = {getattr(n, "name", None) for n in body} | {getattr(t, "id", None) for n in body
                                                         if isinstance(n, ast.Assign) for t in n.targets}
    missing = [d for d in definitions if d not in found]
    if missing:
        raise ValueError(f"the source file lacks {missing}")
    if tensortune:
        for node in body:
            for deco in getattr(node, "decorator_list", []):
                if isinstance(deco, ast.Call) and _is_triton_autotune(deco.func):
                    deco.func = ast.Attribute(value=ast.Name(id="tensortune", ctx=ast.Load()), attr="autotune",
                                              ctx=ast.Load())
        body.insert(0, ast.Import(names=[ast.alias(name="tensortune")]))
    module = ast.Module(body=body, type_ignores=[])
    return FAKE_H100 + "\n" + ast.unparse(ast.fix_missing_locations(module)) + "\n"


def _is_triton_autotune(func: ast.expr) -> bool:
    return isinstance(func, ast.Attribute) and func.attr == "autotune" and isinstance(func.value, ast.Name) \
        and func.value.id == "triton"


def _tolerant(node: ast.stmt) -> ast.stmt:
    """An import that may fail (a package's own helpers the taken definitions do not need)."""
    if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("torch", "triton", "math"):
        return node
    if isinstance(node, ast.Import) and all(a.name.split(".")[0] in ("torch", "triton", "math", "pytest")
                                            for a in node.names):
        return node
    return ast.Try(body=[node], handlers=[ast.ExceptHandler(type=ast.Name(id="ImportError", ctx=ast.Load()),
                                                             name=None, body=[ast.Pass()])],
                   orelse=[], finalbody=[])


def load(sources: Path, work: Path, file: str, tuner: str) -> Any:
    """Import the definitions of `file` as a module of their own for `tuner`."""
    repo, commit, path, license_, definitions = SOURCES[file]
    text = (sources / file).read_text()
    name = f"{Path(file).stem}_{tuner}"
    (work / f"{name}.py").write_text(
        f"# {name}: definitions of {repo}/{path} at {commit} ({license_}), for benchmarks/triton_kernels.py\n"
        + extract(text, definitions, tuner == "tensortune"))
    if str(work) not in sys.path:
        sys.path.insert(0, str(work))
    return importlib.import_module(name)


# ---- the kernels ------------------------------------------------------------------------------------
@dataclass
class Case:
    file: str
    kernel: str  # the autotuned object's name in the module
    shapes: list[dict[str, int]]  # GPU shapes; the first is tuned first, the second is a new key
    cpu_shapes: list[dict[str, int]]
    make: Callable[..., tuple]
    run: Callable[..., Any]
    check: Callable[..., float]  # max abs error against torch (raises if far off)
    flops: Callable[..., float]
    cpu_dtype: str = "float32"  # the dtype of the CPU dry run (the GPU runs float16)


def _randn(shape, dtype, device, seed):
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(shape, generator=g, device=device, dtype=torch.float32).to(dtype)


def make_matmul(M, N, K, device, dtype):
    return _randn((M, K), dtype, device, 1), _randn((K, N), dtype, device, 2)


def check_close(got, want, atol, what):
    err = (got.float() - want.float()).abs().max().item()
    if not err <= atol:
        raise AssertionError(f"{what}: max abs error {err:.3g} > {atol}")
    return err


def make_attention(Z, H, N_CTX, HEAD_DIM, device, dtype):
    return tuple(_randn((Z, H, N_CTX, HEAD_DIM), dtype, device, s) * 0.5 for s in (1, 2, 3))


def attention_ref(q, k, v, causal, sm_scale):
    import torch

    n = q.shape[2]
    p = torch.matmul(q.float(), k.float().transpose(2, 3)) * sm_scale
    if causal:
        p[:, :, torch.tril(torch.ones(n, n, device=q.device)) == 0] = float("-inf")
    return torch.matmul(torch.softmax(p, dim=-1), v.float())


def make_bmm(batch, seqlen, dstate, chunk, device, dtype):
    return (_randn((batch, seqlen, 1, dstate), dtype, device, 1), _randn((batch, seqlen, 1, dstate), dtype, device, 2),
            chunk)


def bmm_check(out, a, b, chunk):
    import torch

    bt, sl, g, k = a.shape
    ac = a.float().reshape(bt, sl // chunk, chunk, g, k).permute(0, 1, 3, 2, 4)
    bc = b.float().reshape(bt, sl // chunk, chunk, g, k).permute(0, 1, 3, 4, 2)
    want = ac @ bc  # (batch, nchunks, groups, chunk, chunk)
    lower = torch.tril(torch.ones(chunk, chunk, dtype=torch.bool, device=a.device))  # what a causal launch writes
    return check_close(out[..., lower], want[..., lower], 0.05 * max(1.0, want.abs().max().item()) * 0.2,
                       "chunked bmm")


def make_layer_norm(M, N, device, dtype):
    return _randn((M, N), dtype, device, 1), _randn((N,), dtype, device, 2), _randn((N,), dtype, device, 3)


def layer_norm_check(out, x, w, b):
    import torch.nn.functional as F

    return check_close(out, F.layer_norm(x.float(), x.shape[-1:], w.float(), b.float(), 1e-6), 0.05, "layer norm")


CASES = {
    "tutorial-matmul": Case(
        "triton_03_matrix_multiplication.py", "matmul_kernel",
        [dict(M=4096, N=4096, K=4096), dict(M=8192, N=8192, K=1024)], [dict(M=64, N=64, K=64), dict(M=128, N=64, K=32)],
        make=lambda s, dev, dt: make_matmul(s["M"], s["N"], s["K"], dev, dt),
        run=lambda m, a, b: m.matmul(a, b),
        check=lambda out, a, b: check_close(out, a.float() @ b.float(), 0.05 * math.sqrt(a.shape[1]), "matmul"),
        flops=lambda s: 2.0 * s["M"] * s["N"] * s["K"]),
    "tutorial-attention": Case(
        "triton_06_fused_attention.py", "_attn_fwd_tma",
        [dict(Z=1, H=32, N_CTX=4096, HEAD_DIM=64)], [dict(Z=1, H=2, N_CTX=128, HEAD_DIM=64)],
        make=lambda s, dev, dt: make_attention(s["Z"], s["H"], s["N_CTX"], s["HEAD_DIM"], dev, dt),
        run=lambda m, q, k, v: m.attention(q, k, v, True, 0.5),
        check=lambda out, q, k, v: check_close(out, attention_ref(q, k, v, True, 0.5), 0.02, "attention"),
        flops=lambda s: 2.0 * 2.0 * s["Z"] * s["H"] * s["N_CTX"] ** 2 * s["HEAD_DIM"] * 0.5, cpu_dtype="float16"),
    "mamba-chunked-bmm": Case(
        "mamba_ssd_bmm.py", "_bmm_chunk_fwd_kernel",
        [dict(batch=8, seqlen=8192, dstate=128, chunk=256)], [dict(batch=2, seqlen=128, dstate=32, chunk=64)],
        make=lambda s, dev, dt: make_bmm(s["batch"], s["seqlen"], s["dstate"], s["chunk"], dev, dt),
        run=lambda m, a, b, chunk: m._bmm_chunk_fwd(a, b, chunk, causal=True),
        check=bmm_check,
        flops=lambda s: 2.0 * s["batch"] * s["seqlen"] * s["chunk"] * s["dstate"] / 2),
    "flash-attn-layer-norm": Case(
        "flash_attn_layer_norm.py", "_layer_norm_fwd_1pass_kernel",
        [dict(M=16384, N=4096)], [dict(M=64, N=256)],
        make=lambda s, dev, dt: make_layer_norm(s["M"], s["N"], dev, dt),
        run=lambda m, x, w, b: m._layer_norm_fwd(x, w, b, 1e-6)[0],
        check=lambda out, x, w, b: layer_norm_check(out, x, w, b),
        flops=lambda s: 8.0 * s["M"] * s["N"]),
}


# ---- one (kernel, tuner) in its own process ---------------------------------------------------------
def phase(opts) -> dict:
    import torch

    from tensortune.measure.cuda_timer import CudaTimer

    case = CASES[opts.case]
    device, dtype = ("cpu", getattr(torch, case.cpu_dtype)) if opts.cpu else ("cuda", torch.float16)
    work = Path(opts.work)
    os.environ["PYTHONPATH"] = os.pathsep.join([str(work), os.environ.get("PYTHONPATH", "")])  # for workers
    start = time.perf_counter()
    module = load(Path(opts.sources), work, case.file, opts.tuner)
    out: dict[str, Any] = {"import_seconds": round(time.perf_counter() - start, 3), "keys": []}
    kernel = getattr(module, case.kernel)
    timer = CudaTimer(clock="host", budget_seconds=0.0, warmup_seconds=0.0, min_repeats=1) if opts.cpu \
        else CudaTimer(budget_seconds=0.1, warmup_seconds=0.02)
    sync = (lambda: None) if opts.cpu else torch.cuda.synchronize
    for shape in (case.cpu_shapes if opts.cpu else case.shapes):
        inputs = case.make(shape, device, dtype)
        sync()
        t0 = time.perf_counter()
        result = case.run(module, *inputs)
        sync()
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        case.run(module, *inputs)
        sync()
        again = time.perf_counter() - t0
        row: dict[str, Any] = {"shape": shape, "first_call_seconds": round(first, 3),
                               "second_call_seconds": round(again, 5)}
        try:
            row["max_abs_error"] = case.check(result, *inputs)
            row["correct"] = True
        except AssertionError as exc:
            row["correct"], row["error"] = False, str(exc)
        best = getattr(kernel, "best_config", None)
        row["best"] = {**best.kwargs, "num_warps": best.num_warps, "num_stages": best.num_stages} if best else None
        row["bench_time"] = getattr(kernel, "bench_time", None)
        times = timer.time(lambda: case.run(module, *inputs))
        median = sorted(times)[len(times) // 2]
        row["tuned_seconds"] = median
        row["tflops"] = case.flops(shape) / median / 1e12
        tunings = getattr(kernel, "tunings", None)
        if tunings:
            t = list(tunings.values())[-1]
            row["tensortune"] = {"trials": t.result.trials, "failed": sum(1 for r in t.result.history if not r.ok),
                                 "check": t.check, "isolated": any("device" in r.extra for r in t.result.history),
                                 "errors": sorted({str(r.error) for r in t.result.history if not r.ok})}
        out["keys"].append(row)
    return out


# ---- the orchestrator ---------------------------------------------------------------------------------
def run_all(opts) -> dict:
    work_root = Path(tempfile.mkdtemp(prefix="tt-kernels-"))
    env_base = {"TRITON_INTERPRET": "1", "TT_BENCH_FAKE_H100": "1"} if opts.cpu else {}
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M"), "sources": {
        f: {"repository": r, "commit": c, "path": p, "license": lic} for f, (r, c, p, lic, _) in SOURCES.items()},
        "kernels": {}}
    begin = time.perf_counter()
    for name in opts.cases:
        for tuner in ("triton", "tensortune"):
            left = opts.deadline - (time.perf_counter() - begin)
            if left < 20:
                results["kernels"].setdefault(name, {})[tuner] = {"error": "not run: the deadline came"}
                continue
            work = work_root / f"{name}-{tuner}"
            work.mkdir()
            env = {**os.environ, **env_base, "TRITON_CACHE_DIR": str(work / "triton-cache"),
                   "TENSORTUNE_DB": str(work / "tuning.db"), "TENSORTUNE_PROGRESS": "0", "PYTHONUNBUFFERED": "1"}
            cmd = [sys.executable, __file__, "--phase", "--case", name, "--tuner", tuner, "--sources",
                   str(Path(opts.sources).resolve()), "--work", str(work)] + (["--cpu"] if opts.cpu else [])
            t0 = time.perf_counter()
            try:
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=min(opts.timeout, left))
                if proc.returncode != 0:
                    row = {"error": proc.stderr[-3000:]}
                else:
                    row = json.loads(proc.stdout.strip().splitlines()[-1])
            except subprocess.TimeoutExpired:
                row = {"error": f"timed out after {min(opts.timeout, left):.0f} s"}
            row["process_seconds"] = round(time.perf_counter() - t0, 2)
            results["kernels"].setdefault(name, {})[tuner] = row
            print(name, tuner, json.dumps(row)[:600], flush=True)
            if opts.out:
                Path(opts.out).mkdir(parents=True, exist_ok=True)
                (Path(opts.out) / "triton_kernels.json").write_text(json.dumps(results, indent=1))
    shutil.rmtree(work_root, ignore_errors=True)
    return results


def print_table(results: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title="real kernels, unchanged: triton.autotune vs @tensortune.autotune (first call = tuning)")
    for col in ("kernel", "shape", "triton s", "tensortune s", "triton TFLOP/s", "tensortune TFLOP/s", "correct",
                "tensortune check"):
        t.add_column(col)
    for name, by in results["kernels"].items():
        tri, tt_ = by.get("triton", {}), by.get("tensortune", {})
        for i in range(max(len(tri.get("keys", [])), len(tt_.get("keys", [])), 1)):
            a = (tri.get("keys") or [{}] * (i + 1))[i] if i < len(tri.get("keys", [])) else {}
            b = (tt_.get("keys") or [{}] * (i + 1))[i] if i < len(tt_.get("keys", [])) else {}
            shape = "x".join(str(v) for v in (a.get("shape") or b.get("shape") or {}).values())
            t.add_row(name, shape, _s(a, "first_call_seconds", tri), _s(b, "first_call_seconds", tt_),
                      f"{a['tflops']:.1f}" if "tflops" in a else "-", f"{b['tflops']:.1f}" if "tflops" in b else "-",
                      f"{a.get('correct', '-')}/{b.get('correct', '-')}",
                      (b.get("tensortune") or {}).get("check", "")[:60])
    Console(width=200).print(t)


def _s(row: dict, key: str, whole: dict) -> str:
    if key in row:
        return f"{row[key]:.2f}"
    return "error" if "error" in whole else "-"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sources", required=True, help="folder with the kernels' source files (see SOURCES)")
    p.add_argument("--out", default=os.environ.get("OUT"))
    p.add_argument("--cpu", action="store_true")
    p.add_argument("--cases", nargs="+", default=list(CASES))
    p.add_argument("--deadline", type=float, default=330.0)
    p.add_argument("--timeout", type=float, default=150.0, help="seconds for one (kernel, tuner) process")
    p.add_argument("--phase", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--case", help=argparse.SUPPRESS)
    p.add_argument("--tuner", choices=("triton", "tensortune"), help=argparse.SUPPRESS)
    p.add_argument("--work", help=argparse.SUPPRESS)
    opts = p.parse_args()
    if opts.phase:
        print(json.dumps(phase(opts), default=str))
        return
    results = run_all(opts)
    print_table(results)


if __name__ == "__main__":
    main()
