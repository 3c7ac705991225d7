"""The tensor-expression language: definitions, definition-time errors, the whiteboard
parser and the NumPy interpreter (the reference of every compiled kernel)."""

import subprocess
import sys

import numpy as np
import pytest

from tensortune import te
from tensortune.te import workloads as W
from tensortune.te.dtype import TEError

RNG = np.random.default_rng(7)


def rand(shape, dtype="float32"):
    if np.dtype(dtype).kind == "f":
        return RNG.standard_normal(shape).astype(dtype)
    return RNG.integers(-9, 9, shape).astype(dtype)


def test_compute_names_axes_after_the_lambda_and_infers_dtype():
    A = te.placeholder((4, 5), "float64", name="A")
    B = te.compute((5, 4), lambda x, y: A[y, x] * 2, name="B")
    assert [a.name for a in B.op.axes] == ["x", "y"]
    assert B.dtype == "float64" and B.op.inputs == (A,)
    assert str(B.op.body) == "(A[y, x] * 2.0)"


@pytest.mark.parametrize("make, message", [
    (lambda A, B: te.compute((4,), lambda i: A[i, 0] + B[i]), "dtype mismatch"),
    (lambda A, B: te.compute((4,), lambda i: A[i]), "indexed with 1"),
    (lambda A, B: te.compute((4,), lambda i: A[i, 9]), "constant index 9 is out of range"),
    (lambda A, B: te.compute((4,), lambda i: A[i + 1, 0]), "ranges over [1, 4]"),
    (lambda A, B: te.compute((4,), lambda i: A[i, 0] / 0.5 + te.sum(A[i, te.reduce_axis(3)], axis=[])),
     "at least one reduce axis"),
    (lambda A, B: te.compute((4,), lambda i, j: A[i, 0]), "takes 2 arguments"),
    (lambda A, B: te.compute((4,), lambda i: A[i, 0] if A[i, 0] > 0 else 0.0), "no Python truth value"),
    (lambda A, B: te.compute((4,), lambda i: A[i, 0] + 1.5 * (i // 2)), "float literal"),
    (lambda A, B: te.compute((4,), lambda i: A[i, 0] / (i + 1)), "dtype mismatch"),
    (lambda A, B: te.compute((4,), lambda i: te.exp(i)), "needs a float argument"),
    (lambda A, B: te.compute((4,), lambda i: A[i, te.reduce_axis(3, "k")]), "uses reduce axis 'k'"),
    (lambda A, B: te.compute((4,), lambda i: 1.0 + te.sum(A[i, te.reduce_axis(3, "k")] * A[te.reduce_axis(4, "m"), 0],
                                                          axis=te.reduce_axis(3, "k"))),
     "uses axis 'm', which is neither an axis of 'compute' nor a reduce axis around it"),
    (lambda A, B: te.compute((0, 3), lambda i, j: A[i, j]), "must be positive integers"),
    (lambda A, B: te.compute((4,), lambda i: A[i, 0:2]), "slices are not supported"),
    (lambda A, B: te.compute((4,), lambda i: A[i, 0] + A), "used as a value"),
    (lambda A, B: te.placeholder((2,), "complex64"), "unsupported dtype"),
])
def test_definition_errors_name_the_problem(make, message):
    A = te.placeholder((4, 3), name="A")
    B = te.placeholder((4,), "float64", name="B")
    with pytest.raises(TEError) as err:
        make(A, B)
    assert message in str(err.value)


def test_axis_from_another_compute_is_rejected():
    A = te.placeholder((4,), name="A")
    other = te.compute((8,), lambda j: A[j // 2], name="other")
    j = other.op.axes[0]
    with pytest.raises(TEError, match="axis 'j' .* not one of its axes"):
        te.compute((4,), lambda i: A[i] + te.cast(j, "float32"), name="bad")


def test_reads_under_select_may_leave_the_shape_but_not_entirely():
    A = te.placeholder((4,), name="A")
    ok = te.compute((6,), lambda i: te.select(te.all(i >= 1, i < 5), A[i - 1], 0.0), name="ok")
    assert ok.shape == (6,)
    with pytest.raises(TEError, match="ranges over"):
        te.compute((2,), lambda i: te.select(i > 0, A[i + 10], 0.0), name="never")


def test_parse_matches_the_hand_written_expression():
    A = te.placeholder((6, 4), name="A")
    B = te.placeholder((4, 5), name="B")
    parsed = te.parse("C(m, n) +=! A(m, k) * B(k, n)", A=A, B=B)
    k = te.reduce_axis(4, "k")
    by_hand = te.compute((6, 5), lambda m, n: te.sum(A[m, k] * B[k, n], axis=k), name="C")
    assert parsed.op.body == by_hand.op.body
    assert parsed.shape == (6, 5) and [a.name for a in parsed.op.axes] == ["m", "n"]


def test_parse_statements_select_where_and_functions():
    X = te.placeholder((3, 9, 9), name="X")
    text = """
        P(c, h, w) max=! X(c, 2*h + kh, 2*w + kw) where h in 0:4, w in 0:4, kh in 0:3, kw in 0:3
        R(c, h, w) = P(c, h, w) > 0 ? P(c, h, w) : 0.1 * P(c, h, w)   # leaky relu
        T(c, h, w) = tanh(R(c, h, w)) + float32(h) - exp(-R(c, h, w))
    """
    T = te.parse(text, X=X)
    x = rand(X.shape)
    pooled = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(1, 2))[:, ::2, ::2].max(axis=(-1, -2))
    leaky = np.where(pooled > 0, pooled, 0.1 * pooled)
    want = np.tanh(leaky) + np.arange(4)[None, :, None] - np.exp(-leaky)
    np.testing.assert_allclose(te.evaluate(T, {X: x}), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("text, message", [
    ("C(m, n) +=! A(m, k) * Q(k, n)", "unknown tensor or function 'Q'"),
    ("C(m) = A(m, k)", "use '+=!'"),
    ("C(m) +=! A(m, k) * A(k, m)", "ranges over 3 (dimension 1 of A) but over 4 (dimension 0 of A)"),
    ("C(m, z) = A(m, 0)", "extent of index 'z'"),
    ("C(m, n) += A(m, n)", "'+=!'"),
    ("C(m) = A(m, 1) $ 2", "unexpected character"),
    ("C(m) = A(m, 5)", "out of range"),
])
def test_parse_errors(text, message):
    with pytest.raises(TEError) as err:
        te.parse(text, A=(4, 3))
    assert message in str(err.value)


def test_interpreter_matches_numpy_on_the_workloads():
    x = rand((5, 7))
    np.testing.assert_allclose(te.evaluate(W.softmax(5, 7).output, {"X": x}),
                               np.exp(x - x.max(1, keepdims=True)) / np.exp(x - x.max(1, keepdims=True)).sum(1,
                               keepdims=True), rtol=1e-6)
    w = W.conv2d_nchw(1, 2, 5, 5, 3, 3, 3, stride=2, padding=1)
    d, k = rand((1, 2, 5, 5)), rand((3, 2, 3, 3))
    padded = np.pad(d, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((1, 3, 3, 3))
    for oh in range(3):
        for ow in range(3):
            patch = padded[:, :, 2 * oh:2 * oh + 3, 2 * ow:2 * ow + 3]
            want[:, :, oh, ow] = np.einsum("nchw,kchw->nk", patch, k)
    np.testing.assert_allclose(te.evaluate(w.output, {"data": d, "weight": k}), want, rtol=1e-5, atol=1e-5)


def test_interpreter_integer_semantics():
    A = te.placeholder((6,), "int32", name="A")
    B = te.compute((6,), lambda i: A[i] // 4 + A[i] % 4 + te.max(A[i], 2) + te.cast(te.cast(A[i], "float32") * 0.5,
                                                                               "int32"), name="B")
    a = np.array([-7, -4, -1, 0, 5, 9], dtype=np.int32)
    want = a // 4 + a % 4 + np.maximum(a, 2) + np.trunc(a * 0.5).astype(np.int32)
    np.testing.assert_array_equal(te.evaluate(B, {A: a}), want)
    assert te.evaluate(B, {A: a}).dtype == np.int32


def test_interpreter_checks_its_inputs():
    w = W.matmul(3, 4, 5)
    with pytest.raises(TEError, match="no value given for input 'B'"):
        te.evaluate(w.output, {"A": rand((3, 5))})
    with pytest.raises(TEError, match="shape"):
        te.evaluate(w.output, {"A": rand((5, 3)), "B": rand((5, 4))})


def test_workloads_is_reachable_as_an_attribute_of_te():
    """Error messages and the docs say `te.workloads.pad`; a fresh process must find it."""
    code = "from tensortune import te; print(te.workloads.matmul(8, 8, 8).name)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "matmul", out.stderr
