"""Depthwise and grouped convolutions as their own GPU pattern, run under TRITON_INTERPRET=1.

Graphs are written the way the model importer lowers `torch.nn.Conv2d(groups=...)`
(NCHW, padding as a stage of its own, the group's first channel as `k // fg * cg`) and
channels-last (NHWC) with a fused bias, activation and residual. Every kernel is checked
against the NumPy interpreter of the same graph on random inputs.
"""

from __future__ import annotations

import importlib.util

import pytest

torch = pytest.importorskip("torch")
if importlib.util.find_spec("triton") is None:
    pytest.skip("triton is not installed", allow_module_level=True)

from tensortune import te  # noqa: E402
from tensortune.backends.triton import CodegenError, analyze, generate, sketch  # noqa: E402
from tensortune.backends.triton.check import relative_error  # noqa: E402
from tensortune.te import workloads  # noqa: E402


def grouped_conv_nchw(n, c, h, w, f, groups, k=3, stride=1, pad=1, dtype="float16", bias_relu=False):
    """`torch.nn.Conv2d(c, f, k, stride, pad, groups=groups)` as the model importer writes it."""
    cg, fg = c // groups, f // groups
    x = te.placeholder((n, c, h, w), dtype, "x")
    wt = te.placeholder((f, cg, k, k), dtype, "w")
    src = workloads.pad(x, pad, pad) if pad else x
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    rr, rs = te.reduce_axis(k, "rr"), te.reduce_axis(k, "rs")
    if cg == 1:
        def body(b, o, y, z):
            ch = o if groups == f else o // fg
            return te.sum(src[b, ch, y * stride + rr, z * stride + rs] * wt[o, 0, rr, rs], axis=[rr, rs])
    else:
        rc = te.reduce_axis(cg, "rc")

        def body(b, o, y, z):
            ch = rc if groups == 1 else o // fg * cg + rc
            return te.sum(src[b, ch, y * stride + rr, z * stride + rs] * wt[o, rc, rr, rs],
                          axis=[rc, rr, rs])
    conv = te.compute((n, f, oh, ow), body, name="conv")
    if not bias_relu:
        return conv
    bias = te.placeholder((f,), dtype, "bias")
    return te.compute((n, f, oh, ow), lambda b, o, y, z: te.maximum(conv[b, o, y, z] + bias[o], 0.0), name="out")


def depthwise_nhwc(n, h, w, c, k=3, dtype="float16"):
    """A channels-last depthwise convolution with bias, GELU-like activation and a residual."""
    x = te.placeholder((n, h, w, c), dtype, "x")
    wt = te.placeholder((k, k, c), dtype, "w")
    bias = te.placeholder((c,), dtype, "bias")
    pad = k // 2
    rr, rs = te.reduce_axis(k, "rr"), te.reduce_axis(k, "rs")

    def body(b, y, z, ch):
        yy, zz = y + rr - pad, z + rs - pad
        inside = te.all(yy >= 0, yy < h, zz >= 0, zz < w)
        return te.sum(te.select(inside, x[b, yy, zz, ch], 0.0).astype("float32") * wt[rr, rs, ch].astype("float32"),
                      axis=[rr, rs])
    conv = te.compute((n, h, w, c), body, name="dw")
    return te.compute((n, h, w, c), lambda b, y, z, ch: te.cast(
        te.sigmoid(conv[b, y, z, ch] + bias[ch].astype("float32")) * conv[b, y, z, ch]
        + x[b, y, z, ch].astype("float32"), dtype), name="out")


CASES = [
    ("depthwise-nchw", lambda: workloads.depthwise_conv2d_nchw(2, 5, 7, 7, 3, 3, 1, 1, "float16").output,
     {"BLOCK_P": 32, "BLOCK_C": 2}),
    ("depthwise-nchw-stride2", lambda: workloads.depthwise_conv2d_nchw(1, 6, 9, 9, 3, 3, 2, 1, "float16").output,
     {"BLOCK_P": 16, "BLOCK_C": 4, "num_warps": 2}),
    ("depthwise-7x7-bf16", lambda: workloads.depthwise_conv2d_nchw(1, 4, 10, 10, 7, 7, 1, 3, "bfloat16").output,
     {"BLOCK_P": 64, "BLOCK_C": 1}),
    ("depthwise-importer-bias-relu", lambda: grouped_conv_nchw(2, 6, 6, 6, 6, 6, bias_relu=True),
     {"BLOCK_P": 32, "BLOCK_C": 4}),
    ("channel-multiplier", lambda: grouped_conv_nchw(1, 3, 6, 6, 6, 3), {"BLOCK_P": 16, "BLOCK_C": 4}),
    ("grouped-4-per-group", lambda: grouped_conv_nchw(1, 8, 6, 6, 8, 2, bias_relu=True),
     {"BLOCK_P": 16, "BLOCK_C": 8, "num_stages": 2}),
    ("grouped-stride2-fp32", lambda: grouped_conv_nchw(2, 6, 7, 7, 9, 3, stride=2, dtype="float32"),
     {"BLOCK_P": 32, "BLOCK_C": 2}),
    ("depthwise-nhwc-epilogue", lambda: depthwise_nhwc(2, 5, 6, 12), {"BLOCK_P": 16, "BLOCK_C": 8}),
    ("depthwise-nhwc-5x5", lambda: depthwise_nhwc(1, 7, 7, 20, k=5), {"BLOCK_P": 8, "BLOCK_C": 32}),
]


DOT_CASES = [  # 8 channels per group and more: one implicit-GEMM contraction per group (the batch axis)
    ("dot-8-per-group-bias-relu", lambda: grouped_conv_nchw(1, 32, 6, 6, 32, 4, bias_relu=True),
     {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16}),
    ("dot-groups-bias-relu", lambda: grouped_conv_nchw(1, 32, 6, 6, 32, 2, bias_relu=True),
     {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16}),
    ("dot-groups-relayout", lambda: grouped_conv_nchw(2, 32, 5, 5, 64, 2, stride=2),
     {"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16, "RELAYOUT": True}),
    ("dot-groups-splitk", lambda: grouped_conv_nchw(1, 48, 4, 4, 48, 3),
     {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "SPLIT_K": 3}),
]


@pytest.mark.parametrize("name,make,config", CASES + DOT_CASES, ids=[c[0] for c in CASES + DOT_CASES])
def test_grouped_conv_kernel_matches_numpy_interpreter(name, make, config, interpreter, tmp_path):
    out = make()
    assert analyze(out).kind == ("contraction" if name.startswith("dot-") else "grouped_conv")
    err = interpreter.call(relative_error, out, config, directory=str(tmp_path))
    assert err < 1e-2, f"{name}: relative error {err:.3g}"


def test_a_grouped_conv_missing_a_window_position_is_caught(interpreter, tmp_path):
    import dataclasses

    from tensortune.backends.triton import GenOptions
    from tensortune.backends.triton.check import source_error

    out = grouped_conv_nchw(1, 8, 6, 6, 8, 2)
    src = generate(analyze(out), {"BLOCK_P": 16, "BLOCK_C": 4}, GenOptions(interpret=True))
    broken = dataclasses.replace(src, text=src.text.replace("tl.static_range(9)", "tl.static_range(8)"))
    assert broken.text != src.text
    assert interpreter.call(source_error, out, broken, directory=str(tmp_path)) > 0.05


def test_sketch_seeds_every_grouped_conv_in_the_space_and_run(interpreter, tmp_path):
    """Every seed of both layouts is valid in its space and computes the right result."""
    for out in (grouped_conv_nchw(1, 4, 6, 6, 4, 4), depthwise_nhwc(1, 4, 4, 16)):
        sk = sketch(analyze(out))
        assert sk.seeds and all(sk.space.is_valid(s) for s in sk.seeds)
        for cfg in sk.seeds[:3]:
            assert interpreter.call(relative_error, out, dict(cfg), directory=str(tmp_path)) < 1e-2


def test_grouped_conv_is_recognised_on_the_right_graphs_only():
    dw = analyze(workloads.depthwise_conv2d_nchw(2, 8, 6, 6, 3, 3, 1, 1).output)
    assert dw.kind == "grouped_conv" and dw.sizes == (2 * 6 * 6, 8, 1, 9) and not dw.channels_last
    grouped = analyze(grouped_conv_nchw(1, 8, 6, 6, 16, 4))
    assert grouped.sizes == (36, 16, 2, 9) and [a.extent for a in grouped.group] == [2]
    # 16 input and 32 output channels per group: a contraction batched over the 2 groups
    dot = analyze(grouped_conv_nchw(2, 32, 6, 6, 64, 2))
    assert dot.kind == "contraction" and dot.sizes == (2, 32, 2 * 36, 16 * 9)
    assert [a.extent for a in dot.window] == [3, 3] and [a.extent for a in dot.k] == [16]
    # 16 input and 8 output channels per group: a contraction too (its 8 filters padded to 16 rows)
    assert analyze(grouped_conv_nchw(1, 32, 6, 6, 16, 2)).kind == "contraction"
    # 8 input but 4 output channels per group (a channel multiplier below 8): the FMA kernel
    assert analyze(grouped_conv_nchw(1, 16, 6, 6, 8, 2)).kind == "grouped_conv"
    assert analyze(depthwise_nhwc(1, 4, 4, 16)).channels_last
    # a dense convolution, a matmul, a matrix-vector product and a softmax keep their patterns
    assert analyze(workloads.conv2d_nchw(1, 4, 6, 6, 8, 3, 3, 1, 1).output).kind == "contraction"
    assert analyze(grouped_conv_nchw(1, 4, 6, 6, 8, 1)).kind == "contraction"  # groups=1
    assert analyze(workloads.matmul(16, 16, 16).output).kind == "contraction"
    assert analyze(workloads.softmax(4, 8).output).kind == "rows"
    A, x = te.placeholder((8, 16), "float32", "A"), te.placeholder((16,), "float32", "x")
    r = te.reduce_axis(16, "r")
    assert analyze(te.compute((8,), lambda i: te.sum(A[i, r] * x[r], axis=r), name="y")).kind == "rows"
    # a batched matrix-vector product: the weight misses an axis, but nothing slides over a pixel
    B, v = te.placeholder((4, 8, 16), "float32", "B"), te.placeholder((4, 16), "float32", "v")
    assert analyze(te.compute((4, 8), lambda b, i: te.sum(B[b, i, r] * v[b, r], axis=r), name="bmv")).kind == "rows"
    # one filter shared by every channel (a blur): no channel axis in the weight, a row reduction
    X, k3 = te.placeholder((2, 10), "float32", "X"), te.placeholder((3,), "float32", "k3")
    s = te.reduce_axis(3, "s")
    blur = te.compute((2, 8), lambda b, i: te.sum(X[b, i + s] * k3[s], axis=s), name="blur")
    assert analyze(blur).kind == "rows"


def test_grouped_conv_window_is_unrolled_and_bad_configs_say_why():
    plan = analyze(grouped_conv_nchw(1, 8, 6, 6, 8, 2))
    text = generate(plan, {"BLOCK_P": 16, "BLOCK_C": 4}).text
    assert "for gi in range(4):" in text and "for wi in tl.static_range(9):" in text
    with pytest.raises(CodegenError, match="power of two"):
        generate(plan, {"BLOCK_P": 24})
    with pytest.raises(CodegenError, match="unknown grouped_conv parameter"):
        generate(plan, {"BLOCK_M": 16})
    with pytest.raises(CodegenError, match="at least 16 elements"):
        generate(plan, {"BLOCK_P": 2, "BLOCK_C": 2})
