"""The matrix-vector variant of the GPU contraction (GEMV): a few rows times a weight matrix,
run under TRITON_INTERPRET=1 and checked against the NumPy interpreter.

Shapes are small with tails on both N and K; split-K shares (one of them empty), fused
prologues and epilogues, batches, several M axes and the three float types are covered.
The sketch must offer the variant, and seed it first, for every product of at most 8 rows.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
if importlib.util.find_spec("triton") is None:
    pytest.skip("triton is not installed", allow_module_level=True)

from tensortune import te  # noqa: E402
from tensortune.backends.triton import CodegenError, GenOptions, analyze, generate, sketch  # noqa: E402
from tensortune.backends.triton.check import relative_error, source_error  # noqa: E402
from tensortune.te import workloads  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def decode_mlp(k: int, n: int, dtype: str) -> te.Tensor:
    """silu(rms-scaled x @ Wg^T) * up + residual, the norm's scale in the A side's loads
    (a prologue) and the rest fused after the sum: a decode step's gate projection."""
    x = te.placeholder((1, k), dtype, "x")
    scale = te.placeholder((1,), "float32", "scale")
    g = te.placeholder((k,), dtype, "g")
    w = te.placeholder((n, k), dtype, "w")
    up = te.placeholder((1, n), dtype, "up")
    res = te.placeholder((1, n), dtype, "res")
    r = te.reduce_axis(k, "r")
    xn = te.compute((1, k), lambda i, j: te.cast(x[i, j], "float32") * scale[i] * te.cast(g[j], "float32"),
                    name="xn")
    acc = te.compute((1, n), lambda i, j: te.sum(xn[i, r] * te.cast(w[j, r], "float32"), axis=r), name="acc")
    return te.compute((1, n), lambda i, j: te.cast(acc[i, j] * te.sigmoid(acc[i, j]) * te.cast(up[i, j], "float32")
                                                   + te.cast(res[i, j], "float32"), dtype), name="out")


def rows_in_two_axes(dtype: str) -> te.Tensor:
    """Six rows as a 2 x 3 block (a batch of 2 sequences of 3 tokens) against one weight."""
    x = te.placeholder((2, 3, 40), dtype, "x")
    w = te.placeholder((24, 40), dtype, "w")
    r = te.reduce_axis(40, "r")
    return te.compute((2, 3, 24), lambda a, b, j: te.sum(x[a, b, r] * w[j, r], axis=r), name="y")


GEMV = {"GEMV": True}
CASES = [
    ("decode-bf16-tails", lambda: workloads.matmul(1, 40, 100, "bfloat16", "NT").output,
     {**GEMV, "BLOCK_N": 16, "BLOCK_K": 32}, "bfloat16"),
    ("split-k-with-an-empty-share", lambda: workloads.matmul(1, 40, 100, "float16", "NT").output,
     {**GEMV, "BLOCK_N": 16, "BLOCK_K": 32, "SPLIT_K": 3}, "float16"),
    ("three-rows-bias-relu-split", lambda: workloads.matmul_bias_relu(3, 40, 100, "bfloat16").output,
     {**GEMV, "BLOCK_N": 8, "BLOCK_K": 32, "SPLIT_K": 2}, "bfloat16"),
    ("fp32", lambda: workloads.matmul(2, 24, 64, "float32", "NT").output,
     {**GEMV, "BLOCK_N": 8, "BLOCK_K": 16, "SPLIT_K": 4}, "float16"),
    ("weight-along-n", lambda: workloads.matmul(1, 40, 96, "float16").output,
     {**GEMV, "BLOCK_N": 32, "BLOCK_K": 64}, "float16"),
    ("prologue-silu-mul-residual", lambda: decode_mlp(96, 48, "bfloat16"),
     {**GEMV, "BLOCK_N": 16, "BLOCK_K": 64, "SPLIT_K": 2}, "bfloat16"),
    ("batched", lambda: workloads.batch_matmul(2, 1, 24, 48, "float16").output,
     {**GEMV, "BLOCK_N": 16, "BLOCK_K": 16, "SPLIT_K": 2}, "float16"),
    ("rows-in-two-axes", lambda: rows_in_two_axes("float16"), {**GEMV, "BLOCK_N": 8, "BLOCK_K": 16, "SPLIT_K": 2},
     "float16"),
    ("eight-rows-one-column-block", lambda: workloads.matmul(8, 5, 33, "float16", "NT").output,
     {**GEMV, "BLOCK_N": 1, "BLOCK_K": 16}, "float16"),
    ("padded-conv-gathered", lambda: workloads.conv2d_nchw(1, 3, 6, 6, 8, 3, 3, 1, 1, "float16").output,
     {**GEMV, "BLOCK_N": 16, "BLOCK_K": 16, "SPLIT_K": 2}, "float16"),
]
VECTOR = {"VECTOR_TILE": False}  # the row's slice loaded once and broadcast through shared memory
CASES += [
    ("vector-split-k-tails", lambda: workloads.matmul(1, 40, 100, "bfloat16", "NT").output,
     {**GEMV, **VECTOR, "BLOCK_N": 16, "BLOCK_K": 32, "SPLIT_K": 3}, "bfloat16"),
    ("vector-prologue-epilogue", lambda: decode_mlp(96, 48, "float16"),
     {**GEMV, **VECTOR, "BLOCK_N": 8, "BLOCK_K": 32}, "float16"),
    ("vector-rows-in-two-axes", lambda: rows_in_two_axes("float16"),
     {**GEMV, **VECTOR, "BLOCK_N": 8, "BLOCK_K": 16, "SPLIT_K": 2}, "float16"),
    ("vector-padded-conv", lambda: workloads.conv2d_nchw(1, 3, 6, 6, 8, 3, 3, 1, 1, "float16").output,
     {**GEMV, **VECTOR, "BLOCK_N": 16, "BLOCK_K": 16}, "float16"),
    ("vector-fp32-batched", lambda: workloads.batch_matmul(2, 3, 24, 48, "float32").output,
     {**GEMV, **VECTOR, "BLOCK_N": 8, "BLOCK_K": 16, "SPLIT_K": 2}, "float16"),
]


@pytest.mark.parametrize("name,make,config,half", CASES, ids=[c[0] for c in CASES])
def test_gemv_matches_numpy_interpreter(name, make, config, half, interpreter, tmp_path):
    out = make()
    plan = analyze(out)
    assert plan.kind == "contraction"
    src = generate(plan, config, GenOptions(half=half, interpret=True))
    assert src.kernels == ("tt_gemv",) and "tl.dot" not in src.text
    err = interpreter.call(relative_error, out, config, half=half, directory=str(tmp_path))
    assert err < 1e-2, f"{name}: relative error {err:.3g}"


def launched_twice(directory):
    """In the interpreter worker: one split-K module launched twice on new inputs; both results
    right and the arrival counters back at zero after each launch."""
    from tensortune.backends.triton.generate import load

    out = workloads.matmul(1, 40, 100, "float32", "NT").output
    src = generate(analyze(out), {**GEMV, "BLOCK_N": 8, "BLOCK_K": 16, "SPLIT_K": 4}, GenOptions(interpret=True))
    module = load(src.save(os.path.join(directory, "gemv.py")))
    errors, counters = [], []
    for seed in (1, 2):
        g = torch.Generator().manual_seed(seed)
        a, b = torch.randn(1, 100, generator=g), torch.randn(40, 100, generator=g)
        c = torch.full((1, 40), float("nan"))
        module.launch(a, b, c)
        errors.append(float((c - a @ b.T).abs().max()))
        counters.append(int(module._tail_counters(c, 5).abs().sum()))
    return errors, counters


def test_split_k_counters_are_reset_for_the_next_launch(interpreter, tmp_path):
    errors, counters = interpreter.call(launched_twice, str(tmp_path))
    assert max(errors) < 1e-4 and counters == [0, 0]


def test_a_wrong_gemv_is_caught(interpreter, tmp_path):
    """The check sees a split-K sum that drops a share, and one that drops a K step."""
    out = workloads.matmul(1, 40, 128, "float16", "NT").output
    src = generate(analyze(out), {**GEMV, "BLOCK_N": 16, "BLOCK_K": 32, "SPLIT_K": 4}, GenOptions(interpret=True))
    assert "tl.static_range(1, 4)" in src.text
    for old, new in (("tl.static_range(1, 4)", "tl.static_range(1, 3)"), ("pid_k * 1 + 1)", "pid_k * 1 + 0)")):
        assert old in src.text
        broken = dataclasses.replace(src, text=src.text.replace(old, new))
        assert interpreter.call(source_error, out, broken, directory=str(tmp_path)) > 0.05, new


DECODE = [(1, 2048, 2048), (1, 512, 2048), (1, 8192, 2048), (1, 2048, 8192), (1, 11008, 4096), (4, 768, 3072),
          (1, 32000, 2048)]


@pytest.mark.parametrize("m,n,k", DECODE, ids=[f"{m}x{k}->{n}" for m, n, k in DECODE])
def test_a_few_rows_are_searched_and_seeded_as_gemv(m, n, k):
    sk = sketch(analyze(workloads.matmul(m, n, k, "bfloat16", "NT").output), GenOptions(half="bfloat16"))
    assert "GEMV" in sk.space.names
    first = sk.seeds[0]
    assert first["GEMV"] and first["VECTOR_TILE"] and first["BLOCK_K"] >= 256
    assert any(c["GEMV"] and not c["VECTOR_TILE"] for c in sk.seeds[:6])
    assert any(not c["GEMV"] for c in sk.seeds)  # the tiled kernel still competes
    text = generate(sk.plan, first, GenOptions(half="bfloat16")).text
    assert "def tt_gemv(" in text and "tl.dot" not in text
    programs = -(-n // first["BLOCK_N"]) * first["SPLIT_K"]
    assert programs >= 132  # every multiprocessor has work
    sample = sk.space.sample(300, seed=0) + list(sk.seeds)
    assert sum(c["GEMV"] for c in sample) > 10
    for c in sample:  # every point of the space is one the generator accepts
        assert c["GEMV"] or not c["VECTOR_TILE"]
        generate(sk.plan, c, GenOptions(half="bfloat16"))


def test_many_rows_and_convolutions_have_no_gemv():
    for w in (workloads.matmul(16, 256, 256, "float16", "NT"), workloads.matmul(512, 512, 512, "float16"),
              workloads.conv2d_nchw(1, 16, 6, 6, 4, 3, 3, 1, 1, "float16")):  # a window stepped as scalars
        assert "GEMV" not in sketch(analyze(w.output)).space.names


def test_gemv_rejects_what_it_cannot_generate():
    plan = analyze(workloads.matmul(1, 64, 64, "float16", "NT").output)
    for bad in ({"TMA": True}, {"PERSISTENT": True}, {"EPILOGUE_SPLIT": 2}):
        with pytest.raises(CodegenError, match="GEMV is not combined"):
            generate(plan, {**GEMV, **bad})
    with pytest.raises(CodegenError, match="exceeds the 4 BLOCK_K steps"):
        generate(plan, {**GEMV, "BLOCK_K": 16, "SPLIT_K": 8})
    with pytest.raises(CodegenError, match="power of two"):
        generate(plan, {**GEMV, "BLOCK_N": 12})
    with pytest.raises(CodegenError, match="at most 8 rows"):
        generate(analyze(workloads.matmul(16, 64, 64, "float16", "NT").output), GEMV)
    with pytest.raises(CodegenError, match="VECTOR_TILE apply to GEMV configurations only"):
        generate(plan, {"GEMV": False, "VECTOR_TILE": True, "BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16})


SEARCH = textwrap.dedent("""
    import json, sys
    from tensortune.backends.triton import autoschedule_cuda
    from tensortune.backends.triton.tune import CudaSearch
    from tensortune.te import workloads

    def main():
        w = workloads.matmul(1, 48, 160, "bfloat16", "NT")
        search = CudaSearch(w.output, db=sys.argv[1], cache_dir=sys.argv[2], progress=False, half="bfloat16")
        try:
            results = search.run(6)
            kernel = search.finish(confirm=False)
        finally:
            search.close()
        print(json.dumps({"gemv": [bool(r.config["GEMV"]) for r in results], "ok": [r.ok for r in results],
                          "errors": [str(r.error) for r in results if not r.ok], "best": dict(kernel.config)}))

    if __name__ == "__main__":
        main()
""")


@pytest.mark.slow
def test_the_search_measures_and_checks_gemv_candidates_first(tmp_path):
    """The whole loop: the seeds of a one-row product are GEMV kernels, built, checked against
    the float32 reference by the GPU runner (in the interpreter) and recorded."""
    script = tmp_path / "search.py"
    script.write_text(SEARCH)
    env = {**os.environ, "TRITON_INTERPRET": "1", "TENSORTUNE_PROGRESS": "0",
           "PYTHONPATH": os.path.join(ROOT, "src")}
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "r.db"), str(tmp_path / "cache")],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert all(result["ok"]), result["errors"]
    assert result["gemv"][:4] == [True] * 4


def test_a_gpu_template_gets_the_tiled_kernel_unless_it_asks_for_gemv():
    from tensortune.template.cuda import cuda_schedule, resolve

    w = workloads.matmul(1, 256, 512, "float16", "NT")
    tiled = resolve(cuda_schedule(w, BLOCK_N=64, num_warps=4)).config
    assert not tiled["GEMV"] and tiled["BLOCK_N"] == 64 and tiled["GROUP_M"] == 8
    gemv = resolve(cuda_schedule(w, GEMV=True, BLOCK_K=256)).config
    assert gemv["GEMV"] and gemv["BLOCK_K"] == 256


def test_a_new_knob_of_the_tiled_kernel_must_say_its_gemv_value():
    from tensortune.backends.triton.sketch_gemv import with_gemv
    from tensortune.space import Categorical

    plan = analyze(workloads.matmul(1, 64, 64, "float16", "NT").output)
    params = [p for p in sketch(plan).space.params if p.name != "GEMV"] + [Categorical("WARP_SPECIALIZE", [False, True])]
    with pytest.raises(ValueError, match="WARP_SPECIALIZE"):
        with_gemv(plan, params, [], 2)
