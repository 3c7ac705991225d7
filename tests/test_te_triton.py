"""Tensor expressions lowered to generated Triton kernels, run under TRITON_INTERPRET=1 on the CPU.

Every kernel is checked against the NumPy interpreter of the same expressions
(`te.evaluate`) on random inputs; the torch float32 reference the GPU runner uses is
checked against it too.
"""

from __future__ import annotations

import importlib.util
import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if importlib.util.find_spec("triton") is None:  # not imported here: Triton decides at import whether it
    pytest.skip("triton is not installed", allow_module_level=True)  # interprets (the kernels run in workers)

from tensortune import te  # noqa: E402
from tensortune.backends.triton import (CodegenError, GenOptions, PatternError, analyze, generate,  # noqa: E402
                                        sketch)
from tensortune.backends.triton.check import relative_error, source_error  # noqa: E402
from tensortune.backends.triton.reference import evaluate as torch_evaluate  # noqa: E402
from tensortune.te import workloads  # noqa: E402

TORCH = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def gelu_epilogue(m, n, k):
    """GELU(A @ B + bias) + residual, scaled and cast: a long fused epilogue."""
    A = te.placeholder((m, k), "float16", "A")
    B = te.placeholder((k, n), "float16", "B")
    bias = te.placeholder((n,), "float16", "bias")
    res = te.placeholder((m, n), "float16", "res")
    r = te.reduce_axis(k, "r")
    C = te.compute((m, n), lambda i, j: te.sum(te.cast(A[i, r], "float32") * te.cast(B[r, j], "float32"), axis=r),
                   name="C")
    D = te.compute((m, n), lambda i, j: C[i, j] + te.cast(bias[j], "float32"), name="D")
    E = te.compute((m, n), lambda i, j: 0.5 * D[i, j] * (1.0 + te.tanh(0.7978845608 * (D[i, j] + 0.044715 * D[i, j]
                                                                                          * D[i, j] * D[i, j]))),
                   name="E")
    return te.compute((m, n), lambda i, j: te.cast(E[i, j] * 0.5 + te.cast(res[i, j], "float32"), "float16"),
                      name="out")


def rms_norm(rows, cols):
    X = te.placeholder((rows, cols), "float16", "X")
    w = te.placeholder((cols,), "float16", "w")
    k = te.reduce_axis(cols, "k")
    ss = te.compute((rows,), lambda i: te.sum(X[i, k] * X[i, k], axis=k), name="ss")
    return te.compute((rows, cols), lambda i, j: X[i, j] / te.sqrt(ss[i] / float(cols) + 1e-6) * w[j], name="rms")


def max_pool(n: int, c: int, h: int, w: int) -> te.Tensor:
    """3x3 max pooling, stride 2, padding 1 (ResNet's): rows of 9 window elements."""
    x = te.placeholder((n, c, h, w), "float16", name="x")
    ry, rx = te.reduce_axis(3, "ry"), te.reduce_axis(3, "rx")

    def body(b, ch, y, z):
        iy, ix = y * 2 + ry - 1, z * 2 + rx - 1
        inside = te.all(iy >= 0, iy < h, ix >= 0, ix < w)
        v = te.select(inside, te.cast(x[b, ch, iy, ix], "float32"), te.const(float("-inf"), "float32"))
        return te.max(v, axis=[ry, rx])
    pooled = te.compute((n, c, (h + 1) // 2, (w + 1) // 2), body, name="pooled")
    return te.compute(pooled.shape, lambda *i: te.cast(pooled[i], "float16"), name="out")


def matvec(m, k):
    A = te.placeholder((m, k), "float16", "A")
    x = te.placeholder((k,), "float16", "x")
    r = te.reduce_axis(k, "r")
    return te.compute((m,), lambda i: te.sum(A[i, r] * x[r], axis=r), name="y")


def mixed_matmul(m, n, k):
    """float16 times bfloat16, accumulated in float32, a bfloat16 bias, a float16 output."""
    A = te.placeholder((m, k), "float16", "A")
    B = te.placeholder((k, n), "bfloat16", "B")
    bias = te.placeholder((n,), "bfloat16", "bias")
    r = te.reduce_axis(k, "r")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r].astype("float32") * B[r, j].astype("float32"), axis=r),
                   name="C")
    return te.compute((m, n), lambda i, j: te.cast(C[i, j] + bias[j].astype("float32"), "float16"), name="D")


def mixed_rms_norm(rows, cols):
    """A bfloat16 activation, float16 weights, a float16 output; the sum in float32."""
    X = te.placeholder((rows, cols), "bfloat16", "X")
    w = te.placeholder((cols,), "float16", "w")
    k = te.reduce_axis(cols, "k")
    ss = te.compute((rows,), lambda i: te.sum(X[i, k].astype("float32") * X[i, k].astype("float32"), axis=k),
                    name="ss")
    return te.compute((rows, cols), lambda i, j: te.cast(
        X[i, j].astype("float32") / te.sqrt(ss[i] / float(cols) + 1e-6) * w[j].astype("float32"), "float16"),
        name="rms")


CASES = [
    ("matmul", lambda: workloads.matmul(40, 24, 48, "float16").output, {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16}),
    ("matmul-grouped", lambda: workloads.matmul(64, 64, 32, "float16").output,
     {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 2}),
    ("matmul-persistent", lambda: workloads.matmul(48, 40, 32, "float16").output,
     {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 32, "PERSISTENT": True}),
    ("matmul-splitk", lambda: workloads.matmul(20, 24, 200, "float16").output,
     {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 32, "SPLIT_K": 3}),
    ("matmul-tma", lambda: workloads.matmul(40, 24, 48, "float16").output,
     {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "TMA": True, "PERSISTENT": True}),
    ("matmul-fp32", lambda: workloads.matmul(24, 20, 36, "float32").output,
     {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16}),
    ("batch-matmul", lambda: workloads.batch_matmul(3, 20, 24, 40, "float16").output,
     {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16}),
    ("matmul-bias-relu", lambda: workloads.matmul_bias_relu(40, 24, 48, "float16").output,
     {"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16}),
    ("gelu-residual-epilogue", lambda: gelu_epilogue(24, 40, 32), {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16}),
    ("gelu-residual-splitk", lambda: gelu_epilogue(24, 40, 96),
     {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16, "SPLIT_K": 2}),
    ("conv2d-pad1", lambda: workloads.conv2d_nchw(2, 4, 6, 6, 8, 3, 3, 1, 1, "float16").output,
     {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16}),
    ("conv2d-stride2", lambda: workloads.conv2d_nchw(2, 3, 7, 7, 5, 3, 3, 2, 1, "float16").output,
     {"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16}),
    ("conv2d-stem-7x7", lambda: workloads.conv2d_nchw(2, 3, 12, 12, 8, 7, 7, 2, 3, "float16").output,
     {"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 32}),
    ("conv2d-split-epilogue", lambda: workloads.conv2d_nchw(2, 20, 5, 5, 6, 3, 3, 1, 1, "float16").output,
     {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16, "EPILOGUE_SPLIT": 2, "SPLIT_K": 1}),
    ("conv2d-relayout", lambda: workloads.conv2d_nchw(2, 20, 5, 5, 6, 3, 3, 1, 1, "float16").output,
     {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16, "RELAYOUT": True, "EPILOGUE_SPLIT": 2}),
    ("conv2d-relayout-stride2-splitk", lambda: workloads.conv2d_nchw(1, 20, 7, 7, 6, 3, 3, 2, 1, "float16").output,
     {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "RELAYOUT": True, "SPLIT_K": 3}),
    ("conv2d-splitk", lambda: workloads.conv2d_nchw(1, 20, 5, 5, 6, 3, 3, 1, 1, "float16").output,
     {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16, "SPLIT_K": 4}),
    ("matmul-tma-store-split", lambda: workloads.matmul_bias_relu(48, 64, 40, "float16").output,
     {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16, "TMA": True, "PERSISTENT": True, "EPILOGUE_SPLIT": 2}),
    ("gelu-split-epilogue", lambda: gelu_epilogue(24, 40, 32),
     {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16, "EPILOGUE_SPLIT": 2}),
    ("depthwise-conv", lambda: workloads.depthwise_conv2d_nchw(1, 3, 6, 6, 3, 3, 1, 1, "float16").output,
     {"BLOCK_P": 16, "BLOCK_C": 2}),
    ("softmax-one-pass", lambda: workloads.softmax(6, 40, "float16").output, {"BLOCK_R": 2, "BLOCK_C": 64}),
    ("softmax-looped", lambda: workloads.softmax(6, 40, "float16").output, {"BLOCK_R": 4, "BLOCK_C": 16}),
    ("layer-norm", lambda: workloads.layer_norm(6, 48, dtype="float16").output, {"BLOCK_R": 1, "BLOCK_C": 16}),
    ("rms-norm", lambda: rms_norm(5, 32), {"BLOCK_R": 2, "BLOCK_C": 32}),
    ("matvec", lambda: matvec(12, 40), {"BLOCK_R": 4, "BLOCK_C": 16}),
    ("max-pool-many-rows", lambda: max_pool(2, 3, 9, 9), {"BLOCK_R": 64, "BLOCK_C": 16}),
    ("transpose", lambda: workloads.transpose(6, 40, "float16").output, {"BLOCK": 64}),
    ("matmul-bf16", lambda: workloads.matmul(40, 24, 48, "bfloat16").output, {"BLOCK_M": 16, "BLOCK_N": 16,
                                                                              "BLOCK_K": 16}),
    ("matmul-bias-relu-bf16-splitk", lambda: workloads.matmul_bias_relu(20, 24, 200, "bfloat16").output,
     {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 32, "SPLIT_K": 2}),
    ("conv2d-bf16-relayout", lambda: workloads.conv2d_nchw(2, 20, 5, 5, 6, 3, 3, 1, 1, "bfloat16").output,
     {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "RELAYOUT": True}),
    ("softmax-bf16", lambda: workloads.softmax(6, 40, "bfloat16").output, {"BLOCK_R": 2, "BLOCK_C": 64}),
    ("mixed-matmul", lambda: mixed_matmul(24, 16, 32), {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16}),
    ("mixed-rms-norm", lambda: mixed_rms_norm(5, 48), {"BLOCK_R": 2, "BLOCK_C": 16}),
    ("transpose-bf16", lambda: workloads.transpose(6, 40, "bfloat16").output, {"BLOCK": 64}),
]


@pytest.mark.parametrize("name,make,config", CASES, ids=[c[0] for c in CASES])
def test_generated_kernel_matches_numpy_interpreter(name, make, config, interpreter, tmp_path):
    err = interpreter.call(relative_error, make(), config, directory=str(tmp_path))
    assert err < 1e-2, f"{name}: relative error {err:.3g}"


def test_bfloat16_storage(interpreter, tmp_path):
    """A float16 graph with half="bfloat16" still means bfloat16 storage."""
    err = interpreter.call(relative_error, workloads.matmul_bias_relu(24, 16, 32, "float16").output,
                           {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16}, half="bfloat16", directory=str(tmp_path))
    assert err < 3e-2


def test_bfloat16_tensors_are_stored_and_multiplied_as_bfloat16():
    config = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16}
    plan = analyze(workloads.matmul(32, 16, 48, "bfloat16").output)
    src = generate(plan, config, GenOptions())
    assert src.dtypes == ("bfloat16", "bfloat16", "bfloat16")
    assert "acc = tl.dot(ta0, tb0, acc)" in src.text  # bfloat16 tiles straight from memory
    assert ".to(tl.bfloat16)" in src.text  # the store rounds the float32 accumulator
    interpreted = generate(plan, config, GenOptions(interpret=True)).text
    assert "tl.float32)" in interpreted.split("tl.dot")[0]  # the interpreter's operands are widened
    # the old way: a float16 graph with half="bfloat16" gives the same kernel arguments
    old = generate(analyze(workloads.matmul(32, 16, 48, "float16").output), config, GenOptions(half="bfloat16"))
    assert old.dtypes == src.dtypes and "acc = tl.dot(ta0, tb0, acc)" in old.text
    # a mixed graph keeps each tensor's type; half= changes only the float16 ones
    mixed = mixed_matmul(24, 16, 32)
    assert generate(analyze(mixed), config, GenOptions()).dtypes == ("float16", "bfloat16", "bfloat16", "float16")
    assert set(generate(analyze(mixed), config, GenOptions(half="bfloat16")).dtypes) == {"bfloat16"}


def kernel_argument_problems(directory):
    """In the interpreter worker: a CudaKernel built for bfloat16 takes torch.bfloat16 and
    refuses float16 with a message naming both."""
    from tensortune.backends.triton import CudaKernel
    from tensortune.te.dtype import TEError

    kernel = CudaKernel.build(workloads.matmul(16, 16, 32, "bfloat16").output,
                              {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16}, cache_dir=directory)
    a, b = torch.randn(16, 32, dtype=torch.bfloat16), torch.randn(32, 16, dtype=torch.bfloat16)
    out = kernel(a, b)
    err = float((out.float() - a.float() @ b.float()).abs().max() / (a.float() @ b.float()).abs().max())
    problems = []
    for bad in ((a.half(), b), (a, b.float())):
        try:
            kernel(*bad)
        except TEError as exc:
            problems.append(str(exc))
    try:
        kernel(a, b, out=torch.empty(16, 16, dtype=torch.float16))
    except TEError as exc:
        problems.append(str(exc))
    return str(out.dtype), err, problems


def test_a_bfloat16_kernel_takes_torch_bfloat16_tensors(interpreter, tmp_path):
    dtype, err, problems = interpreter.call(kernel_argument_problems, str(tmp_path))
    assert dtype == "torch.bfloat16" and err < 2e-2
    assert problems == ["input 'A' is torch.float16; this kernel was built for torch.bfloat16",
                        "input 'B' is torch.float32; this kernel was built for torch.bfloat16",
                        "out must be a contiguous torch.bfloat16 tensor of shape (16, 16)"]


def test_a_wrong_kernel_is_caught(interpreter, tmp_path):
    """The check is not vacuous: a kernel that drops the last K block fails it."""
    out = workloads.matmul(32, 16, 48, "float16").output
    err = interpreter.call(relative_error, out, {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 32, "SPLIT_K": 2,
                                                 "GROUP_M": 1}, directory=str(tmp_path))
    assert err < 1e-2
    src = generate(analyze(out), {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16}, GenOptions(interpret=True))
    assert "for it in range(0, 3):" in src.text
    broken = dataclasses.replace(src, text=src.text.replace("range(0, 3)", "range(0, 2)"))
    err = interpreter.call(source_error, out, broken, directory=str(tmp_path))
    assert err > 0.05


def test_patterns_of_the_workloads():
    mm = analyze(workloads.matmul_bias_relu(64, 32, 16).output)
    assert mm.kind == "contraction" and mm.sizes == (1, 64, 32, 16)
    conv = analyze(workloads.conv2d_nchw(2, 4, 8, 8, 6, 3, 3, 1, 1).output)
    assert conv.kind == "contraction" and conv.sizes == (1, 6, 2 * 8 * 8, 4 * 9)  # filters x pixels
    bmm = analyze(workloads.batch_matmul(3, 8, 8, 8).output)
    assert bmm.sizes == (3, 8, 8, 8)
    sm = analyze(workloads.softmax(4, 8).output)
    assert sm.kind == "rows" and [r.combiner for r in sm.reductions] == ["max", "sum"]
    assert analyze(workloads.layer_norm(4, 8).output).kind == "rows"
    assert analyze(matvec(8, 16)).kind == "rows"
    assert analyze(workloads.transpose(4, 8).output).kind == "elementwise"


def test_unsupported_graphs_say_why():
    mm = workloads.matmul(8, 8, 8)
    with pytest.raises(PatternError, match="exactly one output"):
        analyze([mm.output, mm.output])
    k = te.reduce_axis(8, "k")
    C = mm.output
    rowmax = te.compute((8,), lambda i: te.max(C[i, k], axis=k), name="rowmax")
    attn = te.compute((8, 8), lambda i, j: te.exp(C[i, j] - rowmax[i]), name="p")
    with pytest.raises(PatternError, match="do not share their row and column axes|no GPU pattern"):
        analyze(attn)


def test_bad_configuration_is_a_codegen_error():
    plan = analyze(workloads.matmul(32, 32, 32, "float16").output)
    with pytest.raises(CodegenError, match="power of two of at least 16"):
        generate(plan, {"BLOCK_M": 8})
    with pytest.raises(CodegenError, match="unknown"):
        generate(plan, {"BLOCKM": 16})


def test_torch_reference_matches_numpy_interpreter():
    for comp in (workloads.matmul_bias_relu(6, 5, 7), workloads.conv2d_nchw(2, 3, 7, 7, 4, 3, 3, 2, 1),
                 workloads.softmax(4, 9), workloads.layer_norm(3, 10),
                 workloads.depthwise_conv2d_nchw(1, 2, 5, 5, 3, 3, 1, 1)):
        rng = np.random.default_rng(3)
        arrays = {t.name: rng.standard_normal(t.shape).astype("float32") for t in comp.inputs}
        got = torch_evaluate(comp.output, {k: torch.from_numpy(v) for k, v in arrays.items()}).numpy()
        np.testing.assert_allclose(got, te.evaluate(comp.output, arrays), rtol=1e-5, atol=1e-5)


def test_torch_reference_rounds_bfloat16_casts_as_the_interpreter_does():
    for out in (mixed_matmul(6, 5, 7), mixed_rms_norm(3, 10)):
        rng = np.random.default_rng(4)
        graph_inputs = analyze(out).inputs
        tensors = {t.name: torch.from_numpy(rng.standard_normal(t.shape).astype("float32")).to(TORCH[t.dtype])
                   for t in graph_inputs}
        got = torch_evaluate(out, tensors).numpy()
        want = te.evaluate(out, {k: v.float().numpy() for k, v in tensors.items()}, precise=True)
        np.testing.assert_allclose(got, want.astype("float32"), rtol=1e-3, atol=1e-3)
    X = te.placeholder((64,), "float32", "X")
    Y = te.compute((64,), lambda i: X[i].astype("bfloat16").astype("float32") * 3.0, name="Y")
    x = torch.randn(64)
    np.testing.assert_array_equal(torch_evaluate(Y, {"X": x}).numpy(), te.evaluate(Y, {"X": x.numpy()}))


def test_sketch_spaces_respect_the_hardware():
    sk = sketch(analyze(workloads.matmul(4096, 4096, 4096, "float16").output))
    assert set(sk.space.names) >= {"BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages", "TMA"}
    for cfg in list(sk.seeds) + sk.space.sample(50, seed=0):
        smem = (cfg["BLOCK_M"] * cfg["BLOCK_K"] + cfg["BLOCK_K"] * cfg["BLOCK_N"]) * 2 * cfg["num_stages"]
        assert smem <= 227 * 1024
    tall = sketch(analyze(workloads.matmul(64, 64, 8192, "float16").output))
    assert max(p for p in (c["SPLIT_K"] for c in tall.space.sample(200, seed=1))) > 1
    conv = sketch(analyze(workloads.conv2d_nchw(2, 4, 8, 8, 16, 3, 3, 1, 1, "float16").output))
    assert all(not c["TMA"] for c in conv.space.sample(50, seed=0))  # gathers: no tensor descriptors


def test_short_rows_are_taken_many_a_program():
    pool = sketch(analyze(max_pool(32, 64, 112, 112)))
    assert max(c["BLOCK_R"] for c in pool.seeds) >= 128  # a window of 9: rows of 16 would be 400k programs
    softmax = sketch(analyze(workloads.softmax(4096, 4096, "float16").output))
    assert max(c["BLOCK_R"] for c in softmax.space.sample(100, seed=0)) <= 16


def test_small_and_short_k_products_are_seeded_with_what_won_them_on_the_h100():
    def first(m, n, k):
        c = sketch(analyze(workloads.matmul(m, n, k, "float16").output)).seeds[0]
        return (c["BLOCK_M"], c["BLOCK_N"], c["num_stages"], c["SPLIT_K"], c["PERSISTENT"], c["TMA_STORE"])
    assert first(1024, 1024, 1024) == (64, 128, 5, 1, False, False)  # 128 tiles: one wave, no split-K pass
    assert first(512, 4096, 4096) == (128, 128, 5, 1, False, False)  # 128x128 tiles already fill it
    assert first(8192, 8192, 256) == (128, 256, 4, 1, True, True)    # four K steps, all in flight
    assert first(4096, 4096, 4096) == (128, 256, 3, 1, False, False)  # large products keep their seeds
    assert first(1024, 1024, 16384)[3] > 1                            # a long K still splits


def test_split_k_sketches_never_propose_what_the_generator_rejects():
    # a skinny, long-K matmul: both SPLIT_K > 1 and TMA stores are in its sketch, never together
    # (the H100 sketch space measured 480 such configurations, all rejected at code generation)
    sk = sketch(analyze(workloads.matmul(256, 2048, 8192, "float16").output))
    assert {"SPLIT_K", "TMA_STORE"} <= set(sk.space.names)
    configs = list(sk.space)
    assert any(c["SPLIT_K"] > 1 for c in configs) and any(c["TMA_STORE"] for c in configs)
    assert not any(c["SPLIT_K"] > 1 and c["TMA_STORE"] for c in configs)


def test_convolution_steps_its_window_as_scalars():
    plan = analyze(workloads.conv2d_nchw(2, 16, 6, 6, 4, 3, 3, 1, 1, "float16").output)
    assert [a.extent for a in plan.k] == [16] and [a.extent for a in plan.window] == [3, 3]
    text = generate(plan, {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16}).text
    assert "for it in range(0, 9):" in text and "k1 = (kw // 3)" in text
    # three input channels (an RGB stem): 7x7x3 = 147 gathered as one K, not 49 steps of K=3
    stem = analyze(workloads.conv2d_nchw(2, 3, 16, 16, 8, 7, 7, 2, 3, "float16").output)
    assert not stem.window and [a.extent for a in stem.k] == [3, 7, 7]
