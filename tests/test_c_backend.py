import os
import time
import uuid

import numpy as np
import pytest

from tensortune.backends import ArrayArg, CBuilder, CCompiler, CProblem, CRunner, ScalarArg, load_function
from tensortune.measure import CandidateError, ErrorKind, Timer
from tensortune.space import Config

SOURCE = r"""
#include <stdlib.h>
#ifndef MODE
#define MODE 0
#endif
void saxpy(const float *x, float *y, float a, int n) {
#if MODE == 1
    volatile int *p = NULL; *p = 1;            /* crash */
#elif MODE == 2
    volatile int spin = 1; while (spin) {}     /* hang */
#elif MODE == 3
    for (int i = 0; i < n; i++) y[i] = a * x[i];  /* wrong: forgets y */
#elif MODE == 4
    this does not compile;
#else
    #pragma omp parallel for num_threads(THREADS)
    for (int i = 0; i < n; i++) y[i] = a * x[i] + y[i];
#endif
}
"""


def saxpy_reference(x, y):
    return {"y": np.float32(2.5) * x + y}


def problem():
    n = 1000
    return CProblem(SOURCE, "saxpy",
                    (ArrayArg("x", (n,)), ArrayArg("y", (n,), role="inout"), ScalarArg("a", 2.5, "float"),
                     ScalarArg("n", n)),
                    reference=saxpy_reference)


def test_compile_is_cached_and_callable(tmp_path):
    cc = CCompiler(cache_dir=tmp_path)
    lib = cc.compile(SOURCE, {"THREADS": 1})
    assert cc.compile(SOURCE, {"THREADS": 1}) == lib
    assert cc.compile(SOURCE, {"THREADS": 2}) != lib
    fn = load_function(lib, "saxpy", ["float32*", "float32*", "float", "int"])
    x = np.random.default_rng(0).standard_normal(16).astype(np.float32)
    y = np.ones(16, np.float32)
    fn(x.ctypes.data, y.ctypes.data, 2.0, 16)
    np.testing.assert_allclose(y, 2 * x + 1, rtol=1e-6)


def test_compile_error_carries_the_compiler_message(tmp_path):
    with pytest.raises(CandidateError) as err:
        CCompiler(cache_dir=tmp_path).compile(SOURCE, {"MODE": 4})
    assert err.value.kind is ErrorKind.COMPILE_ERROR
    assert "error" in str(err.value)


def test_every_failure_kind_is_recorded_and_tuning_goes_on(tmp_path):
    p = problem()
    builder = CBuilder(p, CCompiler(cache_dir=tmp_path), jobs=2)
    runner = CRunner(p, Timer(warmup_seconds=0, min_repeats=3, budget_seconds=0.01), timeout=5)
    configs = [Config(MODE=m, THREADS=1) for m in (0, 1, 2, 3, 4)] + [Config(MODE=0, THREADS=2)]
    try:
        results = list(runner.run(builder.build(configs)))
    finally:
        runner.close()
        builder.close()
    kinds = [r.error for r in results]
    assert kinds == [None, ErrorKind.CRASHED, ErrorKind.TIMEOUT, ErrorKind.WRONG_RESULT,
                     ErrorKind.COMPILE_ERROR, None]
    assert results[0].ok and results[0].time > 0 and len(results[0].times) >= 3
    assert "signal" in results[1].message
    assert results[-1].ok  # the worker came back after the crash and the hang


def _processes_mentioning(marker):
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(entry))
        except (OSError, ValueError):
            continue
    return found


def test_a_compile_past_its_timeout_ends_the_whole_compiler(tmp_path):
    fifo = tmp_path / "never-written"
    os.mkfifo(fifo)  # the preprocessor blocks opening it: a compile that never ends
    marker = f"tt{uuid.uuid4().hex}"
    with pytest.raises(CandidateError) as err:
        CCompiler(cache_dir=tmp_path, timeout=2).compile(f'#include "{fifo}"\n', {"MARK": marker})
    assert err.value.kind is ErrorKind.TIMEOUT
    deadline = time.monotonic() + 30
    while _processes_mentioning(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes_mentioning(marker) == [], "the compiler's cc1 outlived the timeout"


def test_builder_timeout_is_the_compilers(tmp_path):
    b = CBuilder(problem(), CCompiler(cache_dir=tmp_path), timeout=7)
    try:
        compiler = b.build_fn.args[0]
        assert compiler.timeout == 7 and compiler.cache_dir == tmp_path
        assert b.timeout > compiler.timeout  # the pool's limit is only a backstop
    finally:
        b.close()
