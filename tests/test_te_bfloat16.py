"""bfloat16 in tensor expressions on the CPU: the interpreter's and the C kernels' rounding
against torch's, C kernels against the interpreter, torch tensors in and out, features,
errors, text, and the CPU auto-scheduler end to end."""

from __future__ import annotations

import numpy as np
import pytest

from tensortune import te
from tensortune.autoschedule import autoschedule
from tensortune.autoschedule.features import program_features
from tensortune.backends import CCompiler, CRunner
from tensortune.measure import BuildResult, ErrorKind, Timer, WrongResult, check_close
from tensortune.space import Config
from tensortune.te import workloads as W
from tensortune.te.build import default_tolerance
from tensortune.te.dtype import TEError, bfloat16

torch = pytest.importorskip("torch")

BF16 = bfloat16()
RNG = np.random.default_rng(5)
FAST_TIMER = Timer(warmup_seconds=0, min_repeats=2, max_repeats=3, budget_seconds=0)


def special_floats() -> np.ndarray:
    """float32 values that stress rounding: ties (to even, both ways), just off ties, the
    largest finite bfloat16 and what overflows past it, subnormals, signed zeros, NaNs."""
    bits = [0x3F808000, 0x3F818000, 0x3F808001, 0x3F807FFF, 0xBF808000, 0x7F7F7FFF, 0x7F7F8000, 0x7F7FFFFF,
            0x00008000, 0x00018000, 0x00000001, 0x807FFFFF, 0x80000000, 0x00000000, 0x7F800000, 0xFF800000,
            0x7FC00000, 0xFFC00001, 0x7F800001, 0x7FFFFFFF]
    fixed = np.array(bits, dtype=np.uint32).view(np.float32)
    wide = (RNG.standard_normal(4000) * np.exp2(RNG.integers(-130, 120, 4000))).astype(np.float32)
    return np.concatenate([fixed, wide])


def torch_bf16_bits(x: np.ndarray) -> np.ndarray:
    return torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


def assert_same_bf16(got: np.ndarray, x: np.ndarray) -> None:
    """Bit for bit torch's conversion of `x`, except that any NaN is a NaN (payloads differ)."""
    want = torch_bf16_bits(x)
    bits = got.view(np.uint16)
    nan = np.isnan(x)
    assert np.isnan(got[nan].astype(np.float32)).all()
    np.testing.assert_array_equal(bits[~nan], want[~nan])


def to_bf16_graph(n):
    X = te.placeholder((n,), "float32", "X")
    return X, te.compute((n,), lambda i: X[i].astype("bfloat16"), name="Y")


@pytest.mark.filterwarnings("ignore:invalid value encountered in cast")  # (the signaling NaN)
def test_interpreter_rounds_to_nearest_even_as_torch_does():
    x = special_floats()
    X, Y = to_bf16_graph(len(x))
    got = te.evaluate(Y, {X: x})
    assert got.dtype == BF16
    assert_same_bf16(got, x)
    # a cast inside an expression rounds where it stands, then computing goes on
    Z = te.compute((len(x),), lambda i: X[i].astype("bfloat16").astype("float32") * 1.0, name="Z")
    roundtrip = torch.from_numpy(x).to(torch.bfloat16).float().numpy()
    np.testing.assert_array_equal(te.evaluate(Z, {X: x}), roundtrip)


def test_c_kernels_round_to_nearest_even_as_torch_does():
    x = special_floats()
    X, Y = to_bf16_graph(len(x))
    s = te.create_schedule(Y)
    s[Y].vectorize("i")  # the conversion vectorized, as kernels use it
    got = te.build(s, [X, Y])(x)
    assert_same_bf16(got, x)
    back = te.compute((len(x),), lambda i: Y[i].astype("float32"), name="back")
    widened = te.build(te.create_schedule(back), [X, back])(x)
    np.testing.assert_array_equal(widened[~np.isnan(x)], got.astype(np.float32)[~np.isnan(x)])
    # a cast inside a kernel rounds the float32 value it stands on
    Z = te.compute((len(x),), lambda i: X[i].astype("bfloat16").astype("float32"), name="Z")
    z = te.build(te.create_schedule(Z), [X, Z])(x)
    roundtrip = torch.from_numpy(x).to(torch.bfloat16).float().numpy()
    np.testing.assert_array_equal(z[~np.isnan(x)], roundtrip[~np.isnan(x)])
    assert np.isnan(z[np.isnan(x)]).all()


def inputs(tensors):
    return [RNG.standard_normal(t.shape).astype(BF16) for t in tensors]


def check_against_interpreter(w, schedule, tol=2e-2):
    kernel = te.build(schedule, list(w.args))
    ins = inputs(w.inputs)
    got = kernel(*ins)
    assert got.dtype == BF16
    want = te.evaluate(w.output, dict(zip(w.inputs, ins)))
    check_close(got, want, tol, tol)
    return kernel


def scheduled_matmul(w):
    s = te.create_schedule(w.outputs)
    C = w.output
    CL = s.cache_write(C)
    io, jo, ii, ji = s[C].tile("i", "j", 4, 16)
    s[C].parallel(s[C].fuse(io, jo))
    s[CL].compute_at(s[C], "i.0@j.0")
    ko, ki = s[CL].split("k", 4)
    s[CL].reorder(ko, ki, "i", "j")
    s[CL].unroll("i")
    s[CL].vectorize("j")
    s[C].vectorize(ji)
    return s


def gelu_rows(rows, cols):
    X = te.placeholder((rows, cols), "bfloat16", "X")
    Y = te.compute((rows, cols), lambda i, j: te.select(
        X[i, j] > 0, X[i, j] * te.sigmoid(X[i, j] * 1.702), te.max(X[i, j], -0.5) * 0.1), name="Y")
    return W.Computation("gelu_rows", (X,), (Y,), 0.0)


def row_sums(rows, cols):
    X = te.placeholder((rows, cols), "bfloat16", "X")
    k = te.reduce_axis(cols, "k")
    S = te.compute((rows,), lambda i: te.sum(X[i, k] * X[i, k], axis=k), name="S")
    return W.Computation("row_sums", (X,), (S,), 0.0)


CASES = {
    "matmul-default": lambda: (W.matmul(19, 24, 13, "bfloat16"), None),
    "matmul-scheduled": lambda: (W.matmul(19, 24, 13, "bfloat16"), scheduled_matmul),
    "matmul-bias-relu": lambda: (W.matmul_bias_relu(20, 32, 9, "bfloat16"), None),
    "elementwise": lambda: (gelu_rows(7, 37), None),
    "softmax": lambda: (W.softmax(7, 37, "bfloat16"), None),
    "layer-norm": lambda: (W.layer_norm(6, 45, dtype="bfloat16"), None),
    "row-sums": lambda: (row_sums(5, 300), None),
    "conv2d": lambda: (W.conv2d_nchw(1, 3, 9, 9, 4, 3, 3, stride=1, padding=1, dtype="bfloat16"), None),
}


@pytest.mark.parametrize("name", CASES)
def test_c_kernels_on_bfloat16_match_the_interpreter(name):
    w, schedule = CASES[name]()
    s = schedule(w) if schedule else te.create_schedule(w.outputs)
    kernel = check_against_interpreter(w, s)
    assert "uint16_t* restrict" in kernel.source


def test_checked_runs_in_an_isolated_worker_draw_bfloat16_inputs_and_catch_wrong_kernels(tmp_path):
    w = W.softmax(7, 37, "bfloat16")
    cc = CCompiler(cache_dir=tmp_path)
    kernel = te.build(te.create_schedule(w.outputs), list(w.args), compiler=cc)
    problem = kernel.problem()
    assert (problem.rtol, problem.atol) == (2e-2, 2e-2)
    assert np.unique(problem.inputs(1)["X"].astype(np.float32)).size > 200  # normal draws, not small integers
    wrong = cc.compile(kernel.source.replace("/ rowsum[", "* rowsum["), {}, kernel.flags)  # not normalised
    runner = CRunner(problem, FAST_TIMER)
    try:
        good, bad = runner.run([BuildResult(Config(v=0), str(kernel.library)), BuildResult(Config(v=1), str(wrong))])
    finally:
        runner.close()
    assert good.ok and bad.error is ErrorKind.WRONG_RESULT


def test_a_long_sum_into_a_bfloat16_output_accumulates_in_float32():
    """Rounding the running sum to bfloat16 at each of 4096 steps would be far off (the
    sum of squares stops growing once its increments fall under half a unit in the last
    place); accumulated in float32 and rounded once, it is within a rounding of exact."""
    w = row_sums(3, 4096)
    s = te.create_schedule(w.outputs)
    assert "allocate S.acc: float32[3] (global)" in str(s.lower())
    kernel = check_against_interpreter(w, s, tol=8e-3)
    x = inputs(w.inputs)[0]
    exact = (x.astype(np.float64) ** 2).sum(axis=1)
    stepwise = np.zeros(3, BF16)
    for k in range(4096):
        stepwise = (stepwise.astype(np.float32) + x[:, k].astype(np.float32) ** 2).astype(BF16)
    assert (stepwise.astype(np.float64) / exact < 0.6).all()  # stuck near 2048: what float32 accumulation avoids
    np.testing.assert_allclose(kernel(x).astype(np.float64), exact, rtol=8e-3)


def test_kernels_take_and_give_torch_bfloat16_tensors():
    w = W.matmul(8, 16, 24, "bfloat16")
    kernel = te.build(te.create_schedule(w.outputs), list(w.args))
    a, b = torch.randn(8, 24, dtype=torch.bfloat16), torch.randn(24, 16, dtype=torch.bfloat16)
    out = kernel(a, b)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    want = (a.float() @ b.float()).to(torch.bfloat16)
    assert (out.float() - want.float()).abs().max() <= 2e-2 * want.float().abs().max()
    given = torch.full((8, 16), float("nan"), dtype=torch.bfloat16)
    assert kernel(a, b, given) is given and torch.equal(given, out)  # written in place
    assert torch.equal(kernel(a.t().contiguous().t(), b), out)  # a strided input is copied first
    from_numpy = kernel(a.view(torch.int16).numpy().view(BF16), b.view(torch.int16).numpy().view(BF16))
    assert isinstance(from_numpy, np.ndarray) and np.array_equal(from_numpy.view(np.uint16),
                                                                out.view(torch.int16).numpy().view(np.uint16))
    with pytest.raises(TEError, match=r"argument 'A' must be bfloat16\[8, 24\], got float16"):
        kernel(a.half(), b)
    with pytest.raises(TEError, match="writable C-contiguous"):
        kernel(a, b, torch.empty(16, 8, dtype=torch.bfloat16).t())
    with pytest.raises(TEError, match="numpy array or a torch tensor"):
        kernel([[0.0] * 24] * 8, b)
    # the interpreter takes torch tensors too
    np.testing.assert_array_equal(te.evaluate(w.output, {"A": a, "B": b}).view(np.uint16),
                                  out.view(torch.int16).numpy().view(np.uint16))


def test_dtype_errors_name_the_problem():
    with pytest.raises(TEError, match=r"unsupported dtype 'bf16' \(did you mean 'bfloat16'\?\)"):
        te.placeholder((4,), "bf16")
    with pytest.raises(TEError, match="unsupported dtype 'float8'; use one of float16, bfloat16"):
        te.cast(te.placeholder((4,), "bfloat16", "A")[0], "float8")
    with pytest.raises(TEError, match="unsupported dtype torch.float8_e4m3fn"):
        te.placeholder((4,), torch.float8_e4m3fn)
    assert te.placeholder((4,), torch.bfloat16).dtype == "bfloat16"
    H = te.placeholder((4,), "float16", "H")
    B = te.placeholder((4,), "bfloat16", "B")
    with pytest.raises(TEError, match="H\\[i\\] is float16 but B\\[i\\] is bfloat16; cast one side with te.cast"):
        te.compute((4,), lambda i: H[i] + B[i])
    with pytest.raises(TEError, match="te.exp needs a float argument"):
        te.exp(te.cast(B[0], "int32"))
    mixed = te.compute((4,), lambda i: H[i].astype("bfloat16") + B[i], name="mixed")
    assert mixed.dtype == "bfloat16"
    assert te.cast(0.1, "bfloat16").value == 0.10009765625  # a folded cast rounds as any cast does
    assert (B[0] * 0.1).b.value == 0.1  # a literal that meets bfloat16 is computed in float32


def test_printer_and_parser_speak_bfloat16():
    C = te.parse("C(m, n) +=! A(m, k) * B(k, n)", dtype="bfloat16", A=(4, 8), B=(8, 6))
    A, B = te.placeholders(C)
    assert (A.dtype, B.dtype, C.dtype) == ("bfloat16", "bfloat16", "bfloat16")
    D = te.parse("D(m, n) = float32(C(m, n)) * 2", C=C)
    E = te.parse("E(m, n) = bfloat16(D(m, n))", D=D)
    assert E.dtype == "bfloat16" and str(E.op.body) == "bfloat16(D[m, n])"
    text = str(te.create_schedule(E).lower())
    assert "A: bfloat16[4, 8]" in text and "E: bfloat16[4, 6]" in text
    a, b = (RNG.standard_normal(s).astype(BF16) for s in ((4, 8), (8, 6)))
    want = (a.astype(np.float64) @ b.astype(np.float64)).astype(BF16).astype(np.float64) * 2
    check_close(te.evaluate(E, {"A": a, "B": b}), want.astype(BF16), 8e-3, 8e-3)


def test_loop_nest_facts_and_features_count_what_is_stored():
    w16, w32 = W.matmul_bias_relu(16, 32, 24, "bfloat16"), W.matmul_bias_relu(16, 32, 24)
    facts = {a.buffer: a.itemsize for s in te.loop_nest_info(te.create_schedule(w16.outputs)) for a in s.accesses}
    assert facts == {"A": 2, "B": 2, "bias": 2, "D": 2, "C": 4}  # the temporary C holds float32
    f16, f32 = (program_features(te.create_schedule(w.outputs).lower()) for w in (w16, w32))
    assert not np.array_equal(f16, f32)  # 2-byte arguments move fewer bytes
    assert default_tolerance(w16.args) == 2e-2


def test_check_close_compares_bfloat16_arrays_in_float32():
    want = np.linspace(-3, 3, 50).astype(BF16)
    check_close(want.copy(), want)
    off = want.copy()
    off[7] = BF16.type(float(off[7]) + 0.5)
    with pytest.raises(WrongResult, match="max abs error 0.5"):
        check_close(off, want)


def test_cpu_autoschedule_tunes_and_checks_a_bfloat16_graph(tmp_path):
    w = W.matmul_bias_relu(32, 32, 48, "bfloat16")
    k = autoschedule(w, budget=4, db=tmp_path / "r.db", progress=False, timer=FAST_TIMER, confirm=1)
    assert k.trials == 4 and not k.from_db
    a, b, bias = inputs(w.inputs)
    got = k(a, b, bias)
    assert got.dtype == BF16
    check_close(got, te.evaluate(w.output, {"A": a, "B": b, "bias": bias}), 2e-2, 2e-2)
    again = autoschedule(W.matmul_bias_relu(32, 32, 48, "bfloat16"), budget=4, db=tmp_path / "r.db", progress=False)
    assert again.from_db and again.config == k.config
    other = autoschedule(W.matmul_bias_relu(32, 32, 48), budget=1, db=tmp_path / "r.db", progress=False,
                         timer=FAST_TIMER, confirm=1)
    assert not other.from_db  # float32 is another workload
