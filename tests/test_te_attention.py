"""Attention as tensor expressions: the stages `te.workloads.attention_stages` builds, their
meaning (against torch's scaled_dot_product_attention), the CPU target, the GPU pattern
analysis of equivalent graphs, and the torch float32 reference the GPU runner checks with."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tensortune import te
from tensortune.backends.triton import AttentionPlan, PatternError, analyze, sketch
from tensortune.backends.triton import reference
from tensortune.te import workloads as W
from tensortune.te.dtype import TEError

torch = pytest.importorskip("torch")
F = torch.nn.functional


def random_inputs(w, seed=0, masked_rows=()):
    """Normal floats; bool masks keep 70% (rows listed in `masked_rows` keep nothing)."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for t in w.inputs:
        if t.dtype == "bool":
            a = rng.random(t.shape) < 0.7
            for r in masked_rows:
                a[..., r, :] = False
            arrays[t.name] = a
        else:
            arrays[t.name] = rng.standard_normal(t.shape).astype(t.dtype)
    return arrays


def sdpa(arrays, causal=False, lower_right=True):
    """torch's scaled_dot_product_attention in float32 (math path); causal as an explicit
    lower-right mask unless `lower_right` is False (then torch's own is_causal)."""
    q, k, v = (torch.from_numpy(arrays[n].astype("float32")) for n in "qkv")
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    mask = arrays.get("mask")
    m = None if mask is None else torch.from_numpy(mask if mask.dtype == bool else mask.astype("float32"))
    if causal and lower_right:
        sq, skv = q.shape[2], k.shape[2]
        keep = torch.ones(sq, skv, dtype=torch.bool).tril(skv - sq)
        m = keep if m is None else (m & keep if m.dtype == torch.bool else m.masked_fill(~keep, -math.inf))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=causal and not lower_right)
    return out.numpy()


def args_in_order(w, arrays):
    return [arrays[t.name] for t in w.inputs]


CASES = {
    "plain": ((2, 3, 5, 7, 8), {}),
    "causal-square": ((1, 2, 6, 6, 4), {"causal": True}),
    "causal-fewer-queries": ((1, 2, 3, 7, 4), {"causal": True}),
    "causal-more-queries": ((1, 2, 7, 4, 4), {"causal": True}),  # rows 0-2 see no key: zeros
    "gqa": ((2, 4, 5, 6, 8), {"kv_heads": 2, "causal": True}),
    "float-mask": ((2, 2, 4, 6, 4), {"mask": "float", "mask_shape": (2, 1, 4, 6)}),
    "float-mask-2d": ((2, 2, 4, 6, 4), {"mask": "float", "mask_shape": (4, 6)}),  # right-aligned, as torch
    "bool-mask": ((2, 2, 4, 6, 4), {"mask": "bool", "mask_shape": (2, 1, 1, 6)}),
    "bool-mask-causal": ((1, 2, 5, 5, 4), {"mask": "bool", "causal": True}),
    "value-width": ((1, 2, 4, 5, 4), {"dv": 6}),
    "float16": ((1, 2, 6, 6, 8), {"dtype": "float16", "causal": True, "kv_heads": 1}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_attention_means_what_torch_sdpa_computes(name):
    shape, kw = CASES[name]
    kw = {"dtype": "float32", **kw}
    w = W.attention(*shape, **kw)
    arrays = random_inputs(w)
    got = te.evaluate(w.output, arrays)
    assert got.dtype == np.dtype(kw["dtype"]) and got.shape == shape[:3] + (kw.get("dv", shape[4]),)
    tol = 2e-3 if kw["dtype"] == "float16" else 1e-5
    np.testing.assert_allclose(got.astype("float32"), sdpa(arrays, kw.get("causal", False)), rtol=tol, atol=tol)


def test_causal_matches_torch_is_causal_for_square_attention_and_zeros_fully_masked_rows():
    w = W.attention(1, 2, 6, 6, 4, "float32", causal=True)
    arrays = random_inputs(w, seed=1)
    np.testing.assert_allclose(te.evaluate(w.output, arrays), sdpa(arrays, True, lower_right=False), atol=1e-5)
    m = W.attention(1, 2, 4, 6, 4, "float32", mask="bool", mask_shape=(1, 1, 4, 6))
    arrays = random_inputs(m, seed=2, masked_rows=(1, 3))
    got = te.evaluate(m.output, arrays)
    assert np.all(got[:, :, [1, 3]] == 0) and np.abs(got[:, :, 0]).max() > 0
    np.testing.assert_allclose(got, sdpa(arrays), atol=1e-5)  # torch gives zeros there too


@pytest.mark.parametrize("name", ["gqa", "bool-mask-causal", "float16", "causal-more-queries"])
def test_attention_builds_for_the_cpu(name):
    shape, kw = CASES[name]
    kw = {"dtype": "float32", **kw}
    w = W.attention(*shape, **kw)
    arrays = random_inputs(w, seed=3)
    kernel = te.build(w.output, list(w.args))
    got = kernel(*args_in_order(w, arrays)).astype("float32")
    tol = 2e-3 if kw["dtype"] == "float16" else 1e-5
    np.testing.assert_allclose(got, te.evaluate(w.output, arrays).astype("float32"), rtol=tol, atol=tol)
    np.testing.assert_allclose(got, sdpa(arrays, kw.get("causal", False)), rtol=tol, atol=tol)


def test_attention_autoschedules_for_the_cpu(tmp_path):
    from tensortune.measure import Timer

    w = W.attention(1, 2, 8, 12, 8, "float32", causal=True, kv_heads=1, mask="bool", mask_shape=(1, 1, 8, 12))
    timer = Timer(warmup_seconds=0, min_repeats=2, max_repeats=3, budget_seconds=0)
    kernel = te.autoschedule(w, target="cpu", budget=4, db=tmp_path / "r.db", progress=False, timer=timer,
                             confirm=1)
    arrays = random_inputs(w, seed=4, masked_rows=(2,))
    got = kernel(*args_in_order(w, arrays))
    np.testing.assert_allclose(got, te.evaluate(w.output, arrays), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, sdpa(arrays, True), rtol=1e-5, atol=1e-5)


def test_attention_stages_reject_what_does_not_fit():
    q = te.placeholder((1, 4, 8, 16), "float32", "q")
    k = te.placeholder((1, 3, 8, 16), "float32", "k")
    v = te.placeholder((1, 3, 8, 16), "float32", "v")
    with pytest.raises(TEError, match="3 key/value heads do not divide 4"):
        W.attention_stages(q, k, v, scale=0.25)
    k2 = te.placeholder((1, 2, 8, 8), "float32", "k")
    with pytest.raises(TEError, match="shapes do not fit"):
        W.attention_stages(q, k2, v, scale=0.25)
    kv = te.placeholder((1, 2, 8, 16), "float16", "k")
    with pytest.raises(TEError, match="share a dtype"):
        W.attention_stages(q, kv, kv, scale=0.25)
    k4 = te.placeholder((1, 2, 8, 16), "float32", "k")
    mask = te.placeholder((1, 3, 8, 8), "bool", "mask")
    with pytest.raises(TEError, match="does not broadcast"):
        W.attention_stages(q, k4, k4, scale=0.25, mask=mask)
    with pytest.raises(TEError, match="finite number"):
        W.attention_stages(q, k4, k4, scale=float("nan"))
    with pytest.raises(TEError, match="'float', 'bool' or None"):
        W.attention(1, 1, 4, 4, 4, mask="int")


def test_attention_flops_count_the_kept_pairs():
    assert W.attention(1, 1, 4, 4, 8).flops == 2.0 * 16 * 16
    assert W.attention(1, 1, 4, 4, 8, causal=True).flops == 2.0 * 10 * 16
    assert W.attention_pairs(2, 5, True) == 4 + 5  # the last query sees every key
    assert W.attention_pairs(5, 2, True) == 0 + 0 + 0 + 1 + 2


# -- the GPU pattern ---------------------------------------------------------------------------

def scaled_q_graph(b=1, h=2, sq=16, skv=24, d=16, dtype="float32"):
    """The scale folded into q, no guards against fully masked rows, the normalisation after
    the weighted sum, and the causal bound written `i - j >= sq - skv`."""
    q = te.placeholder((b, h, sq, d), dtype, "q")
    k = te.placeholder((b, h, skv, d), dtype, "k")
    v = te.placeholder((b, h, skv, d), dtype, "v")
    qs = te.compute(q.shape, lambda z, y, i, c: q[z, y, i, c] * (1.0 / math.sqrt(d)), name="qs")
    rd = te.reduce_axis(d, "d")
    s = te.compute((b, h, sq, skv), lambda z, y, i, j: te.sum(qs[z, y, i, rd] * k[z, y, j, rd], axis=rd), name="s")
    x = te.compute(s.shape, lambda z, y, i, j: te.select(i - j >= sq - skv, s[z, y, i, j], float("-inf")), name="x")
    j1, j2, j3 = (te.reduce_axis(skv, "j") for _ in range(3))
    m = te.compute((b, h, sq), lambda z, y, i: te.max(x[z, y, i, j1], axis=j1), name="m")
    e = te.compute(s.shape, lambda z, y, i, j: te.exp(x[z, y, i, j] - m[z, y, i]), name="e")
    total = te.compute((b, h, sq), lambda z, y, i: te.sum(e[z, y, i, j2], axis=j2), name="l")
    o = te.compute((b, h, sq, d), lambda z, y, i, c: te.sum(e[z, y, i, j3] * v[z, y, j3, c], axis=j3), name="o")
    return te.compute(o.shape, lambda z, y, i, c: o[z, y, i, c] / total[z, y, i], name="out")


def exp_scaled_graph(b=1, h=2, sq=16, skv=24, d=16):
    """softmax(scale * S) written as exp(scale * S - scale * max S), with a padding mask added."""
    q = te.placeholder((b, h, sq, d), "float32", "q")
    k = te.placeholder((b, h, skv, d), "float32", "k")
    v = te.placeholder((b, h, skv, d), "float32", "v")
    pad = te.placeholder((b, skv), "float32", "pad")
    rd = te.reduce_axis(d, "d")
    s = te.compute((b, h, sq, skv), lambda z, y, i, j: te.sum(q[z, y, i, rd] * k[z, y, j, rd], axis=rd), name="s")
    x = te.compute(s.shape, lambda z, y, i, j: s[z, y, i, j] + pad[z, j], name="x")
    j1, j2, j3 = (te.reduce_axis(skv, "j") for _ in range(3))
    m = te.compute((b, h, sq), lambda z, y, i: te.max(x[z, y, i, j1], axis=j1), name="m")
    e = te.compute(s.shape, lambda z, y, i, j: te.exp(x[z, y, i, j] * 0.125 - 0.125 * m[z, y, i]), name="e")
    total = te.compute((b, h, sq), lambda z, y, i: te.sum(e[z, y, i, j2], axis=j2), name="l")
    p = te.compute(s.shape, lambda z, y, i, j: e[z, y, i, j] * (1.0 / total[z, y, i]), name="p")
    return te.compute((b, h, sq, d), lambda z, y, i, c: te.sum(p[z, y, i, j3] * v[z, y, j3, c], axis=j3), name="o")


def test_the_builder_is_one_attention_kernel():
    plan = analyze(W.attention(2, 8, 64, 80, 32, causal=True, kv_heads=2, mask="bool",
                               mask_shape=(2, 1, 1, 80)).output)
    assert isinstance(plan, AttentionPlan) and plan.kind == "attention"
    assert plan.sizes == (16, 64, 80, 32, 32) and plan.causal == 16 and plan.row_guarded
    assert plan.p_dtype == "float16" and plan.exp_scale == pytest.approx(1 / math.sqrt(32))
    assert "n0 <= " not in str(plan.logits_inside) and "mask" in str(plan.logits_inside)
    assert "(b1 // 4)" in str(plan.k_factor) and "(b1 // 4)" in str(plan.v_factor)
    plain = analyze(W.attention(1, 2, 16, 16, 16, "float32").output)
    assert plain.causal is None and plain.p_dtype == "float32" and str(plain.logits) == "score"


def test_equivalent_attention_graphs_are_recognised():
    folded = analyze(scaled_q_graph())
    assert folded.kind == "attention" and folded.causal == 8 and not folded.row_guarded
    assert "0.25" in str(folded.q_factor) and str(folded.weight) == "1.0"
    assert "rowsum" in str(folded.epilogue)
    scaled = analyze(exp_scaled_graph())
    assert scaled.kind == "attention" and scaled.exp_scale == 0.125 and "pad[b0, n0]" in str(scaled.logits)
    decode = analyze(W.attention(1, 4, 1, 64, 16, causal=True).output)  # the one query sees every key
    assert decode.causal is None and str(decode.logits) == "score"


def test_graphs_that_are_not_attention_keep_their_patterns_or_errors():
    assert analyze(W.softmax(8, 32).output).kind == "rows"
    assert analyze(W.batch_matmul(2, 8, 8, 8).output).kind == "contraction"
    w = W.attention(1, 2, 8, 8, 8, "float32")
    probs = next(t for t in te.graph(w.output) if t.name == "attention_probs")
    with pytest.raises(PatternError, match="do not share their row and column axes"):
        analyze(probs)  # scores then softmax: two kernels, refused as before
    X = te.placeholder((4, 8), "float32", "X")
    k1, k2, k3 = (te.reduce_axis(8, "k") for _ in range(3))
    mx = te.compute((4,), lambda i: te.max(X[i, k1], axis=k1), name="mx")
    entropy_like = te.compute((4,), lambda i: te.sum(te.exp(X[i, k2] - mx[i]) * X[i, k2], axis=k2), name="h")
    assert analyze(entropy_like).kind == "rows"  # a weighted sum, but over the rows of its own weights
    mean = te.compute((4,), lambda i: te.sum(X[i, k1] * 0.125, axis=k1), name="mean")
    assert analyze(te.compute((4,), lambda i: te.sum(X[i, k3] * mean[i], axis=k3), name="y")).kind == "rows"
    q = te.placeholder((1, 8, 8), "float32", "q")
    v = te.placeholder((1, 8, 8), "float32", "v")
    j1, j3 = te.reduce_axis(8, "j"), te.reduce_axis(8, "j")
    m = te.compute((1, 8), lambda z, i: te.max(q[z, i, j1], axis=j1), name="m")
    o = te.compute((1, 8, 8), lambda z, i, c: te.sum(te.exp(q[z, i, j3] - m[z, i]) * v[z, j3, c], axis=j3), name="o")
    with pytest.raises(PatternError, match="attention graph: the logits .* must read one sum"):
        analyze(o)  # a softmax of an input, not of scores


def test_attention_sketch_fits_the_hardware_and_splits_decoding():
    from tensortune.backends.triton.sketches import SHARED_BYTES

    long = sketch(analyze(W.attention(1, 16, 2048, 2048, 128, causal=True).output))
    assert {"BLOCK_M", "BLOCK_N", "MASK_SPLIT", "REVERSE_M", "num_warps", "num_stages"} <= set(long.space.names)
    assert long.seeds[0]["BLOCK_M"] == 128 and all(c["SPLIT_KV"] == 1 for c in long.seeds)
    for c in list(long.seeds) + long.space.sample(100, seed=0):
        assert (c["BLOCK_M"] * 128 + c["num_stages"] * c["BLOCK_N"] * 256) * 2 <= SHARED_BYTES
        assert c["BLOCK_M"] * (128 + c["BLOCK_N"]) <= c["num_warps"] * 32 * 192
    assert any(c["TMA"] for c in long.seeds) and not any(c["TMA"] for c in sketch(analyze(scaled_q_graph())).seeds)
    odd = sketch(analyze(W.attention(1, 2, 64, 64, 12).output))  # 24-byte rows: no tensor descriptors
    assert not any(c["TMA"] for c in odd.space.sample(50, seed=2))
    decode = sketch(analyze(W.attention(1, 16, 1, 2048, 128).output))
    assert decode.seeds[0]["BLOCK_M"] == 16 and decode.seeds[0]["SPLIT_KV"] == 8  # 16 heads x 8 on 132 SMs
    assert all(c["MASK_SPLIT"] and not c["REVERSE_M"] for c in decode.space.sample(50, seed=1))


# -- the float32 torch reference ---------------------------------------------------------------

@pytest.mark.parametrize("name", ["gqa", "bool-mask-causal", "causal-more-queries", "float-mask"])
def test_torch_reference_evaluates_attention(name, monkeypatch):
    shape, kw = CASES[name]
    w = W.attention(*shape, **{"dtype": "float32", **kw})
    arrays = random_inputs(w, seed=5)
    want = te.evaluate(w.output, arrays)
    got = reference.evaluate(w.output, {n: torch.from_numpy(a) for n, a in arrays.items()}).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    monkeypatch.setattr(reference, "STAGE_CHUNK", 7)  # chunks over several leading axes
    chunked = reference.evaluate(w.output, {n: torch.from_numpy(a) for n, a in arrays.items()}).numpy()
    np.testing.assert_allclose(chunked, want, rtol=1e-5, atol=1e-5)


def test_torch_reference_drops_intermediates_once_read():
    w = W.attention(1, 2, 8, 8, 4, "float32", causal=True)
    arrays = {n: torch.from_numpy(a) for n, a in random_inputs(w).items()}
    alive: list[int] = []
    stage = reference._stage

    def spy(t, values):
        alive.append(sum(1 for v in values.values() if v.shape == (1, 2, 8, 8)))
        return stage(t, values)

    reference._stage = spy
    try:
        reference.evaluate(w.output, arrays)
    finally:
        reference._stage = stage
    assert max(alive) == 1  # scores, logits, exp, probs: each dropped once its last reader is computed
