"""Reductions inside expressions are split into stages when defined; the split graph means
what the expression says (checked against NumPy written independently), and both targets
compile it: the CPU sketches fuse the epilogue, the GPU patterns (run under
TRITON_INTERPRET=1) see a contraction with an epilogue or rows of reductions."""

from __future__ import annotations


import numpy as np
import pytest

from tensortune import te
from tensortune.autoschedule import SketchSpace, autoschedule, generate_sketches
from tensortune.autoschedule.apply import apply_config
from tensortune.autoschedule.seeds import register_tile_seeds
from tensortune.measure import Timer, check_close
from tensortune.te.build import reference_outputs

FAST_TIMER = Timer(warmup_seconds=0, min_repeats=2, max_repeats=3, budget_seconds=0)


def scaled_scores(b=2, sq=24, skv=40, d=16, dtype="float32"):
    """softmax's logits as users write them: one expression, the reduction scaled."""
    Q, K = te.placeholder((b, sq, d), dtype, "Q"), te.placeholder((b, skv, d), dtype, "K")
    r = te.reduce_axis(d, "d")
    return te.compute((b, sq, skv), lambda z, i, j: te.sum(
        Q[z, i, r].astype("float32") * K[z, j, r].astype("float32"), axis=r) * 0.25, name="S")


def layer_norm_one_expression(rows=6, cols=48, dtype="float32"):
    """Two reductions (the mean and the mean square) inside one expression."""
    X = te.placeholder((rows, cols), dtype, "X")
    k, l = te.reduce_axis(cols, "k"), te.reduce_axis(cols, "l")
    x = lambda i, j: X[i, j].astype("float32")  # noqa: E731
    return te.compute((rows, cols), lambda i, j: te.cast(
        (x(i, j) - te.sum(x(i, k), axis=k) / float(cols))
        / te.sqrt(te.sum(x(i, l) * x(i, l), axis=l) / float(cols) + 1e-5), dtype), name="LN")


def linear_relu(m=24, n=40, k=32, dtype="float32"):
    """An epilogue over a reduction: relu(A @ B + bias) in one expression."""
    A, B = te.placeholder((m, k), dtype, "A"), te.placeholder((k, n), dtype, "B")
    bias = te.placeholder((n,), dtype, "bias")
    r = te.reduce_axis(k, "r")
    return te.compute((m, n), lambda i, j: te.cast(te.maximum(
        te.sum(A[i, r].astype("float32") * B[r, j].astype("float32"), axis=r) + bias[j].astype("float32"), 0.0),
        dtype), name="Y")


def test_reductions_inside_an_expression_become_stages_over_the_axes_they_use():
    S = scaled_scores()
    assert [t.name for t in te.graph(S)] == ["Q", "K", "S.sum", "S"]
    assert S.op.inputs[0].shape == (2, 24, 40) and not S.op.reduce_axes
    assert str(S.op.body) == "(S.sum[z, i, j] * 0.25)"
    LN = layer_norm_one_expression()
    assert [(t.name, t.shape) for t in te.graph(LN)][1:3] == [("LN.sum", (6,)), ("LN.sum1", (6,))]
    # a reduction inside a reduction's source: the inner one is a stage over the outer's axes
    X = te.placeholder((5, 16), name="X")
    k, l = te.reduce_axis(16, "k"), te.reduce_axis(16, "l")
    den = te.compute((5,), lambda i: te.sum(te.exp(X[i, k] - te.max(X[i, l], axis=l)), axis=k), name="den")
    assert [(t.name, t.shape) for t in te.graph(den)] == [("X", (5, 16)), ("den.max", (5,)), ("den", (5,))]
    assert den.op.reduce_axes == (k,)
    # an enclosing reduce axis becomes a spatial axis of the inner stage
    Y = te.placeholder((4, 6, 8), name="Y")
    a, c = te.reduce_axis(6, "a"), te.reduce_axis(8, "c")
    sm = te.compute((4,), lambda i: te.sum(te.max(Y[i, a, c], axis=c) * 2.0, axis=a), name="summax")
    inner = sm.op.inputs[0]
    assert inner.name == "summax.max" and inner.shape == (4, 6) and [x.kind for x in inner.op.axes] == ["spatial"] * 2
    # a reduction over no axis of the compute is a one-element stage
    T = te.compute((5,), lambda i: X[i, 0] / te.max(X[4, l], axis=l), name="T")
    assert T.op.inputs[1].shape == (1,) and str(T.op.body) == "(X[i, 0] / T.max[0])"


def test_the_split_graph_computes_what_the_expression_says():
    rng = np.random.default_rng(0)
    q, kk = rng.standard_normal((2, 24, 16)), rng.standard_normal((2, 40, 16))
    got = te.evaluate(scaled_scores(), {"Q": q.astype("float32"), "K": kk.astype("float32")})
    check_close(got, np.einsum("bid,bjd->bij", q, kk) * 0.25, 1e-5, 1e-5)
    x = rng.standard_normal((6, 48))
    want = (x - x.mean(1, keepdims=True)) / np.sqrt((x * x).mean(1, keepdims=True) + 1e-5)
    check_close(te.evaluate(layer_norm_one_expression(), {"X": x.astype("float32")}), want, 1e-4, 1e-4)
    a, b, bias = rng.standard_normal((24, 32)), rng.standard_normal((32, 40)), rng.standard_normal(40)
    got = te.evaluate(linear_relu(), {"A": a.astype("float32"), "B": b.astype("float32"), "bias": bias.astype("float32")})
    check_close(got, np.maximum(a @ b + bias, 0.0), 1e-4, 1e-4)
    X = te.placeholder((5, 16), name="X")
    k, l = te.reduce_axis(16, "k"), te.reduce_axis(16, "l")
    den = te.compute((5,), lambda i: te.sum(te.exp(X[i, k] - te.max(X[i, l], axis=l)), axis=k), name="den")
    y = rng.standard_normal((5, 16))
    check_close(te.evaluate(den, {"X": y.astype("float32")}), np.exp(y - y.max(1, keepdims=True)).sum(1), 1e-5, 1e-5)


def test_a_lifted_reduction_outside_the_expressions_axes_is_a_clear_error():
    A = te.placeholder((4, 3), name="A")
    other = te.reduce_axis(5, "m")
    with pytest.raises(te.TEError, match="uses axis 'm', which is neither an axis of 'bad'"):
        te.compute((4,), lambda i: 1.0 + te.sum(A[i, other % 3], axis=te.reduce_axis(3, "k")), name="bad")


@pytest.mark.parametrize("make", [scaled_scores, layer_norm_one_expression, linear_relu])
def test_cpu_sketches_of_split_stages_build_kernels_that_match_the_interpreter(make):
    out = make()
    sp = SketchSpace.of(out)
    if make is not layer_norm_one_expression:  # the reduction is tiled in the epilogue's loops
        assert any(key.startswith(f"{out.op.inputs[0].name}:tile_local") for key in sp.sketches)
    args = te.placeholders(out) + [out]
    rng = np.random.default_rng(1)
    inputs = {t.name: rng.standard_normal(t.shape).astype("float32") for t in te.placeholders(out)}
    want = reference_outputs((out,), **inputs)[out.name]
    configs = register_tile_seeds(sp)[:3] + [sp.canonical(next(c for c in sp.space.sample(200, rng)
                                                               if c["sketch"] == key)) for key in sp.sketches]
    for cfg in configs:
        kernel = te.build(apply_config(sp, cfg), args)
        check_close(kernel(*[inputs[t.name] for t in kernel.inputs]), want, 1e-3, 1e-3)


def test_cpu_autoschedule_tunes_a_scaled_reduction_written_as_one_expression():
    k = autoschedule(scaled_scores(1, 16, 24, 8), budget=4, db=":memory:", progress=False, timer=FAST_TIMER,
                     confirm=1)
    assert k.trials == 4 and any("(pack)" in sk.key for sk in generate_sketches(scaled_scores(1, 16, 24, 8)))
    rng = np.random.default_rng(2)
    q, kk = rng.standard_normal((1, 16, 8)).astype("float32"), rng.standard_normal((1, 24, 8)).astype("float32")
    check_close(k(q, kk), np.einsum("bid,bjd->bij", q, kk) * 0.25, 1e-4, 1e-4)


GPU_CASES = [
    ("scaled-scores", lambda: scaled_scores(dtype="float16"), "contraction", {"BLOCK_M": 16, "BLOCK_N": 16,
                                                                              "BLOCK_K": 16}),
    ("linear-relu", lambda: linear_relu(dtype="float16"), "contraction", {"BLOCK_M": 16, "BLOCK_N": 32,
                                                                          "BLOCK_K": 16}),
    ("layer-norm-one-expression", lambda: layer_norm_one_expression(dtype="float16"), "rows",
     {"BLOCK_R": 2, "BLOCK_C": 16}),
]


@pytest.mark.parametrize("name,make,kind,config", GPU_CASES, ids=[c[0] for c in GPU_CASES])
def test_gpu_patterns_take_split_stages_and_their_kernels_match_the_interpreter(name, make, kind, config,
                                                                                interpreter, tmp_path):
    from tensortune.backends.triton import analyze
    from tensortune.backends.triton.check import relative_error
    out = make()
    assert analyze(out).kind == kind
    err = interpreter.call(relative_error, out, config, directory=str(tmp_path))
    assert err < 1e-2, f"{name}: relative error {err:.3g}"


def test_two_contractions_in_one_expression_are_two_gpu_kernels_and_the_error_says_so():
    from tensortune.backends.triton import PatternError, analyze
    A, B = te.placeholder((24, 32), "float16", "A"), te.placeholder((32, 40), "float16", "B")
    C, D = te.placeholder((24, 16), "float16", "C"), te.placeholder((16, 40), "float16", "D")
    k, l = te.reduce_axis(32, "k"), te.reduce_axis(16, "l")
    O = te.compute((24, 40), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k) + te.sum(C[i, l] * D[l, j], axis=l),
                   name="O")
    with pytest.raises(PatternError, match="'O.sum' .* and 'O.sum1'"):
        analyze(O)
    # the CPU compiles it as two tiled reductions and a fused sum
    assert generate_sketches(O)[0].key == "O.sum:tile_local>O,O.sum1:cache_write,O:tile_consumer<O.sum"
