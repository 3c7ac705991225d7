"""Compiled tensor expressions: every workload, default and hand-scheduled (with tails),
random schedules, calling conventions, dtypes, and checked runs in an isolated worker.
Each kernel is compared with the NumPy interpreter on random (never zero) inputs."""

import random

import numpy as np
import pytest

from tensortune import te
from tensortune.backends import CCompiler, CRunner
from tensortune.backends.c_kernel import run_c_candidate
from tensortune.measure import BuildResult, CandidateError, ErrorKind, Timer, check_close
from tensortune.space import Config
from tensortune.te import workloads as W
from tensortune.te.dtype import TEError

RNG = np.random.default_rng(11)


@pytest.fixture(scope="module")
def cc(tmp_path_factory):
    return CCompiler(cache_dir=tmp_path_factory.mktemp("te-cc"))


def inputs_for(w):
    return [RNG.standard_normal(t.shape).astype(t.dtype) if t.dtype.startswith("float")
            else RNG.integers(-9, 9, t.shape).astype(t.dtype) for t in w.inputs]


def check(w, s, cc, tol=1e-4):
    kernel = te.build(s, w.args, compiler=cc)
    ins = inputs_for(w)
    got = kernel(*ins)
    want = te.evaluate(w.outputs[0], dict(zip(w.inputs, ins)))
    check_close(got, want, tol, tol)
    return kernel


WORKLOADS = {
    "matmul": lambda: W.matmul(19, 24, 13),
    "batch_matmul": lambda: W.batch_matmul(3, 10, 16, 7),
    "matmul_bias_relu": lambda: W.matmul_bias_relu(20, 32, 9),
    "conv2d_s1": lambda: W.conv2d_nchw(2, 3, 10, 9, 4, 3, 3, stride=1, padding=1),
    "conv2d_s2": lambda: W.conv2d_nchw(1, 3, 11, 10, 5, 3, 3, stride=2, padding=1),
    "depthwise": lambda: W.depthwise_conv2d_nchw(1, 6, 9, 10, 3, 3, stride=1, padding=1),
    "softmax": lambda: W.softmax(7, 37),
    "layer_norm": lambda: W.layer_norm(6, 45),
    "transpose": lambda: W.transpose(13, 29),
}


@pytest.mark.parametrize("name", WORKLOADS)
def test_default_schedule_is_correct(name, cc):
    w = WORKLOADS[name]()
    check(w, te.create_schedule(w.outputs), cc)


def sched_matmul(w):
    s = te.create_schedule(w.outputs)
    C = w.output
    CL = s.cache_write(C)
    io, jo, ii, ji = s[C].tile("i", "j", 4, 16)  # 19 rows: a guarded tail
    s[C].parallel(s[C].fuse(io, jo))
    s[CL].compute_at(s[C], "i.0@j.0")
    ko, ki = s[CL].split("k", 4)  # 13 = 3 * 4 + 1: a guarded reduction tail
    s[CL].reorder(ko, ki, "i", "j")
    s[CL].unroll("i")
    s[CL].vectorize("j")
    s[C].vectorize(ji)
    return s


def sched_batch_matmul(w):
    s = te.create_schedule(w.outputs)
    C = s[w.output]
    io, ii = C.split("i", 4)
    C.parallel(C.fuse("x", io))
    C.reorder("x@i.0", ii, "k", "j")
    C.vectorize("j")
    return s


def sched_matmul_bias_relu(w):
    s = te.create_schedule(w.outputs)
    D = s["D"]
    io, jo, ii, ji = D.tile("i", "j", 8, 16)
    D.parallel(io)
    D.vectorize(ji)
    s["C"].compute_at(D, jo)
    s["C"].reorder("k", "i", "j")
    s["C"].vectorize("j")
    return s


def sched_conv(w):
    s = te.create_schedule(w.outputs)
    conv = w.output
    CL = s.cache_write(conv)
    s["pad"].compute_inline()
    f = s[conv]
    yo, yi = f.split("y", 2)
    xo, xi = f.split("x", 4)
    f.reorder("b", "f", yo, xo, yi, xi)
    f.parallel(f.fuse("b", "f"))
    s[CL].compute_at(f, xo)
    s[CL].reorder("rc", "rr", "rs", "b", "f", "y", "x")
    s[CL].unroll("rs")
    s[CL].vectorize("x")
    return s


def sched_conv_pad_at(w):
    s = te.create_schedule(w.outputs)
    conv = s[w.output]
    fo, fi = conv.split("f", 2)
    conv.reorder("b", fo, "y", "rc", "rr", "rs", fi, "x")
    s["pad"].compute_at(conv, "y")  # the padded rows one output row needs
    conv.vectorize("x")
    return s


def sched_depthwise(w):
    s = te.create_schedule(w.outputs)
    s["pad"].compute_inline()
    d = s[w.output]
    d.parallel(d.fuse("b", "ch"))
    xo, xi = d.split("x", 8)
    d.reorder("b@ch", "y", xo, "rr", "rs", xi)
    d.vectorize(xi)
    return s


def sched_softmax(w):
    s = te.create_schedule(w.outputs)
    out = s[w.output]
    io, ii = out.split("i", 3)
    out.parallel(io)
    jo, ji = out.split("j", 16)
    out.vectorize(ji)
    for name in ("rowsum", "exp", "rowmax"):
        s[name].compute_at(out, ii)
    s["exp"].vectorize("j")
    return s


def sched_layer_norm(w):
    s = te.create_schedule(w.outputs)
    out = s[w.output]
    out.parallel("i")
    jo, ji = out.split("j", 8)
    out.vectorize(ji)
    s["var"].compute_at(out, "i")
    s["mean"].compute_at(out, "i")
    return s


def sched_transpose(w):
    s = te.create_schedule(w.outputs)
    T = s[w.output]
    io, jo, ii, ji = T.tile("i", "j", 8, 8)
    T.parallel(io)
    T.unroll(ii)
    T.vectorize(ji)
    return s


HAND = {"matmul": sched_matmul, "batch_matmul": sched_batch_matmul, "matmul_bias_relu": sched_matmul_bias_relu,
        "conv2d_s1": sched_conv, "conv2d_s2": sched_conv_pad_at, "depthwise": sched_depthwise,
        "softmax": sched_softmax, "layer_norm": sched_layer_norm, "transpose": sched_transpose}


@pytest.mark.parametrize("name", HAND)
def test_hand_schedules_with_tails_are_correct(name, cc):
    w = WORKLOADS[name]()
    check(w, HAND[name](w), cc)


def test_conv2d_stride2_with_hand_schedule_of_stride1(cc):
    w = WORKLOADS["conv2d_s2"]()
    check(w, sched_conv(w), cc)


def test_annotations_become_pragmas(cc):
    w = WORKLOADS["matmul"]()
    src = te.build(sched_matmul(w), w.args, compiler=cc).source
    assert "#pragma omp parallel for" in src and "#pragma omp simd" in src and "#pragma GCC unroll 4" in src
    assert "float C_local[64] __attribute__((aligned(64)));" in src
    assert "const float* restrict A" in src and "float* restrict C" in src


def test_a_parallel_loop_of_one_iteration_starts_no_threads():
    A = te.placeholder((1, 8), name="A")
    B = te.compute((1, 8), lambda i, j: A[i, j] * 2.0, name="B")
    s = te.create_schedule(B)
    s[B].parallel("i")
    assert "omp parallel" not in te.c_source(s)
    A2 = te.placeholder((2, 8), name="A")
    B2 = te.compute((2, 8), lambda i, j: A2[i, j] * 2.0, name="B")
    s2 = te.create_schedule(B2)
    s2[B2].parallel("i")
    assert "#pragma omp parallel for" in te.c_source(s2)


def _try(fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except TEError:
        pass


def random_schedule(w, rnd):
    """Random primitives (illegal ones are refused and skipped): splits with non-dividing
    factors, reorders, fusions, annotations, inlining, caches and compute locations."""
    s = te.create_schedule(w.outputs)
    for st in reversed(s.stages):
        if not st.is_output and not st.is_reduction and rnd.random() < 0.4:
            _try(st.compute_inline)
        elif st.is_reduction and rnd.random() < 0.4:
            _try(s.cache_write, st.name)
        elif st.is_reduction and rnd.random() < 0.3:
            r = st.reduce_axis[0].name
            _try(st.split, r, rnd.choice([2, 3, 4]))
            _try(s.rfactor, st.name, rnd.choice([f"{r}.0", f"{r}.1"]))
    if rnd.random() < 0.3:
        _try(s.cache_read, w.inputs[0].name, s.consumers(w.inputs[0].name))
    for st in reversed(s.stages):
        if st.inlined:
            continue
        for _ in range(rnd.randint(0, 3)):
            _try(st.split, rnd.choice(st.loops), factors=rnd.choice([[2], [3], [4], [5], [8], [2, 3], [4, 2]]))
        order = st.loops
        rnd.shuffle(order)
        _try(st.reorder, *order)
        if len(st.loops) > 1 and rnd.random() < 0.4:
            k = rnd.randrange(len(st.loops) - 1)
            _try(st.fuse, st.loops[k], st.loops[k + 1])
        if st.attach is None:  # (parallel loops deep inside serial ones are legal but slow on a busy machine)
            _try(st.parallel, st.loops[0])
        _try(st.vectorize, st.loops[-1])
        small = [x for x in st.loops if x.extent <= 8]
        if small and rnd.random() < 0.4:
            _try(st.unroll, rnd.choice(small))  # (bigger unrolls are legal but slow to compile)
    for st in s.stages:
        if st.inlined or st.is_output or rnd.random() < 0.3:
            continue
        cons = s.consumers(st.name)
        targets = [x for x in s.stages if not x.inlined and x.name != st.name and x.name in cons + [
            s.state(c).attach[0] for c in cons if s.state(c).attach]]
        if targets:
            t = rnd.choice(targets)
            _try(st.compute_at, t, rnd.choice(t.loops))
    for st in s.stages:
        if not st.inlined and not st.is_output and rnd.random() < 0.5:
            axes = [a.name for a in st.op.axes]
            rnd.shuffle(axes)
            _try(st.reorder_storage, *axes)
    return s


@pytest.mark.parametrize("seed", range(16))
def test_random_schedules_are_correct(seed, cc):
    names = list(WORKLOADS)
    w = WORKLOADS[names[seed % len(names)]]()
    s = random_schedule(w, random.Random(seed))
    check(w, s, cc)
    again = te.Schedule.from_steps(w.outputs, s.to_json())
    assert str(again) == str(s)


def test_reorder_storage_packs_a_copy_and_lays_out_an_accumulator(cc):
    """A conv vectorized over filters: the weights packed filter-last, the accumulator
    tile laid out (y, x, f); every read and write follows the new layouts."""
    w = W.conv2d_nchw(1, 5, 9, 10, 32, 3, 3, padding=1)
    s = te.create_schedule(w.outputs)
    conv = s[w.output]
    CL = s[s.cache_write(w.output)]
    WL = s[s.cache_read(w.inputs[1], [CL])]
    WL.reorder_storage("i1", "i2", "i3", "i0")
    fo, fi = conv.split("f", 16)
    xo, xi = conv.split("x", 4)  # (a tail: 10 = 2 * 4 + 2)
    conv.reorder("b", fo, "y", xo, fi, xi)
    conv.vectorize(xi)
    CL.compute_at(conv, xo)
    CL.reorder_storage("b", "y", "x", "f")
    CL.reorder("rc", "rr", "rs", "b", "y", "x", "f")
    CL.unroll("x")
    CL.vectorize("f")
    text = str(s)
    assert "allocate weight.local: float32[5, 3, 3, 32] (global)" in text
    assert "allocate conv.local: float32[1, 1, 4, 16] (local)" in text
    assert "weight.local[i1, i2, i3, i0] = weight[i0, i1, i2, i3]" in text
    check(w, s, cc)
    assert str(te.Schedule.from_steps(w.outputs, s.to_json())) == text


def test_kernel_calling_conventions_and_argument_checks(cc):
    w = W.matmul(8, 16, 4)
    k = te.build(te.create_schedule(w.outputs), [w.inputs[1], w.output, w.inputs[0]], compiler=cc)
    a, b = RNG.standard_normal((8, 4)).astype("float32"), RNG.standard_normal((4, 16)).astype("float32")
    c = np.full((8, 16), np.nan, "float32")
    assert k(b, c, a) is c
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(k(b, a), a @ b, rtol=1e-5, atol=1e-5)  # inputs only: output allocated
    with pytest.raises(TEError, match="must be float32\\[4, 16\\], got float64"):
        k(b.astype("float64"), a)
    with pytest.raises(TEError, match="shares memory"):
        big = np.zeros((8, 16), "float32")
        k(big[:4], big, a)
    with pytest.raises(TEError, match="or all 3 arguments"):
        k(a)
    with pytest.raises(TEError, match="input 'A' is missing"):
        te.build(te.create_schedule(w.outputs), [w.inputs[1], w.output], compiler=cc)


@pytest.mark.parametrize("dtype", ["float64", "int32", "float16"])
def test_other_dtypes(dtype, cc):
    A = te.placeholder((6, 10), dtype, name="A")
    k = te.reduce_axis(10, "k")
    if dtype == "int32":
        M = te.compute((6,), lambda i: te.max(A[i, k] * 3 // 2 - A[i, k] % 4, axis=k), name="M")
    else:
        M = te.compute((6,), lambda i: te.sum(te.exp(A[i, k] * 0.1) - te.sqrt(te.abs(A[i, k])), axis=k), name="M")
    s = te.create_schedule(M)
    io, ii = s[M].split("i", 4)
    s[M].parallel(io)
    w = W.Computation("t", (A,), (M,), 0.0)
    check(w, s, cc, tol=2e-2 if dtype == "float16" else 1e-9 if dtype == "float64" else 0)


def test_checked_runs_in_an_isolated_worker_catch_wrong_kernels(cc):
    w = WORKLOADS["softmax"]()
    kernel = te.build(sched_softmax(w), w.args, compiler=cc)
    problem = kernel.problem()
    wrong = cc.compile(kernel.source.replace("q * r * r + r + 1.0f", "q * r * r + 1.5f * r + 1.0f"), {}, kernel.flags)  # a wrong exp
    runner = CRunner(problem, Timer(warmup_seconds=0, min_repeats=2, budget_seconds=0))
    try:
        good, bad = runner.run([BuildResult(Config(v=0), str(kernel.library)), BuildResult(Config(v=1), str(wrong))])
    finally:
        runner.close()
    assert good.ok and len(good.times) >= 2
    assert bad.error is ErrorKind.WRONG_RESULT
    with pytest.raises(CandidateError):
        run_c_candidate(str(wrong), problem, Timer(min_repeats=1, budget_seconds=0), 3)


def test_rfactor_parallel_and_vectorized_partial_reductions(cc):
    A = te.placeholder((3, 250), name="A")
    k = te.reduce_axis(250, "k")
    S = te.compute((3,), lambda i: te.sum(A[i, k], axis=k), name="S")
    M = te.compute((3,), lambda i: te.max(A[i, k], axis=k), name="M")
    w = W.Computation("rows", (A,), (S, M), 0.0)
    s = te.create_schedule([S, M])
    ko, ki = s[S].split("k", 16)  # 250 = 15 * 16 + 10: the partial sums guard their tail
    SR = s.rfactor(S, ki)
    s[SR].reorder("i", "k.0", "k.1")
    s[SR].vectorize("k.1")
    ko, ki = s[M].split("k", nparts=4)
    MR = s.rfactor(M, ko)
    s[MR].parallel("k.0")
    kernel = te.build(s, w.args, compiler=cc)
    a = RNG.standard_normal((3, 250)).astype("float32") - 5.0  # all negative: a zero would be a wrong max
    got_s, got_m = kernel(a)
    np.testing.assert_allclose(got_s, a.sum(1), rtol=1e-4)
    np.testing.assert_array_equal(got_m, a.max(1))
    assert "k.0" in str(s) and s[SR].loop("k.1").kind == "spatial"


def test_rfactor_of_one_of_several_reduce_axes(cc):
    w = W.conv2d_nchw(1, 8, 6, 6, 4, 3, 3, 1, 1)
    s = te.create_schedule(w.outputs)
    s.rfactor(w.output, "rc")
    check(w, s, cc)
    with pytest.raises(TEError, match="is not a reduction"):
        s.rfactor("pad", "b")
    s2 = te.create_schedule(w.outputs)
    s2[w.output].split("y", 2)
    with pytest.raises(TEError, match="before any other transformation"):
        s2.rfactor(w.output, "rc")


@pytest.mark.parametrize("cols", [8, 16, 13])
def test_bool_inputs_are_one_byte_masks(cols, cc):
    """A NumPy bool array is one byte per element; as `int*` the kernel read garbage, and GCC
    12.2 vectorized a float select on `unsigned char` conditions wrongly at 8 and 16 columns."""
    M = te.placeholder((4, cols), "bool", "M")
    X = te.placeholder((4, cols), "float32", "X")
    Y = te.compute((4, cols), lambda i, j: te.select(M[i, j], X[i, j] * 2.0, -1.0), name="Y")
    f = te.build(Y, compiler=cc)
    m = RNG.random((4, cols)) < 0.6
    x = RNG.standard_normal((4, cols)).astype("float32")
    np.testing.assert_array_equal(f(m, x), np.where(m, x * 2.0, -1.0).astype("float32"))
    np.testing.assert_array_equal(te.evaluate(Y, {"M": m, "X": x}), f(m, x))


@pytest.mark.parametrize("name", ["exp", "tanh", "erf", "sigmoid"])
def test_vectorizable_float_math_matches_numpy(name):
    """The C generator's own exp, tanh and erf (libm's are scalar calls in a vector loop):
    within 2e-6 relative of float64 NumPy over [-110, 110], and infinities and NaN as libm."""
    import numpy as np
    from scipy.special import erf

    n = 4096
    A = te.placeholder((n,), name="A")
    fn = {"exp": te.exp, "tanh": te.tanh, "erf": te.erf, "sigmoid": te.sigmoid}[name]
    B = te.compute((n,), lambda i: fn(A[i]), name="B")
    s = te.create_schedule(B)
    _, inner = s[B].split("i", 16)
    s[B].vectorize(inner)
    special = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-30, -1e-4, 88.7, -87.4, 200.0], np.float32)
    xs = np.concatenate([np.linspace(-110, 110, n - len(special)), special]).astype(np.float32)
    ref = {"exp": np.exp, "tanh": np.tanh, "erf": erf, "sigmoid": lambda v: 1 / (1 + np.exp(-v))}[name]
    with np.errstate(all="ignore"):
        want = ref(xs.astype(np.float64)).astype(np.float32).astype(np.float64)
    got = te.build(s, [A, B])(xs).astype(np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    inf = np.isinf(want)
    assert np.array_equal(got[inf], want[inf])
    normal = np.isfinite(want) & (np.abs(want) > 2.0 ** -124)
    assert np.max(np.abs(got[normal] - want[normal]) / np.abs(want[normal])) < 2e-6
    assert np.all(np.abs(got[np.isfinite(want) & ~normal]) <= 2.0 ** -124)
