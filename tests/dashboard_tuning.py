"""A real records database for the dashboard tests: a small C kernel tuned for real (compiled, checked
against NumPy, timed in an isolated worker), with candidates that fail in three ways, in two runs on one
target and one run on a second. The two targets are this CPU with the C compiler invoked as `cc` and as
`gcc-12` (or `gcc`): `Target.cpu` records the compiler's --version line, which names the program, so
the same machine gives two targets without faking one.

Also a script: `python tests/dashboard_tuning.py DB [SCALE]` fills DB (scripts/dashboard_screenshot.py
uses it for the picture in docs/dashboard.md).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np

from tensortune import Tuner
from tensortune.backends import ArrayArg, CBuilder, CCompiler, CProblem, CRunner, ScalarArg
from tensortune.db import Database, Target, Workload
from tensortune.measure import Timer
from tensortune.space import Space

SOURCE = r"""
#ifndef MODE
#define MODE 0
#endif
__attribute__((optimize(OPT)))                    /* GCC's -O level for this function */
void axpy(const float *x, float *y, float a, int n) {
#if MODE == 1
    volatile int *p = 0; *p = 1;                  /* crashes */
#elif MODE == 2
    this does not compile;
#else
    int i = 0;
    for (; i + UNROLL <= n; i += UNROLL)
        for (int u = 0; u < UNROLL; u++) y[i + u] = a * x[i + u] + y[i + u] * (MODE == 3 ? 0.0f : 1.0f);
    for (; i < n; i++) y[i] = a * x[i] + y[i];
#endif
}
"""
N = 4096
# MODE 1 crashes, 2 does not compile, 3 is wrong; only with UNROLL 16, so that most candidates succeed
SPACE = Space({"OPT": [0, 1, 3], "UNROLL": [1, 2, 4, 8, 16], "MODE": [0, 1, 2, 3]},
              constraints=["MODE == 0 or UNROLL == 16"])


def axpy_reference(x, y):
    return {"y": np.float32(1.5) * x + y}


def problem() -> CProblem:
    return CProblem(SOURCE, "axpy", (ArrayArg("x", (N,)), ArrayArg("y", (N,), role="inout"),
                                     ScalarArg("a", 1.5, "float"), ScalarArg("n", N)), reference=axpy_reference)


WORKLOAD = Workload.make("axpy", SOURCE, {"n": N})


def second_compiler() -> str:
    for name in ("gcc-12", "gcc"):
        if shutil.which(name):
            return name
    raise RuntimeError("the dashboard tests need gcc next to cc to tune for two targets")


def tune(db: Database, cc: str, cache: Path, seed: int, trials: int, strategy: str = "random") -> Target:
    """Tune the kernel for `trials` candidates with the compiler `cc`; the target it was tuned on."""
    target = Target.cpu(cc)
    p = problem()
    builder = CBuilder(p, CCompiler(cc=cc, cache_dir=cache), jobs=2)
    runner = CRunner(p, Timer(warmup_seconds=0, min_repeats=3, budget_seconds=0.005), timeout=20)
    try:
        Tuner(SPACE, runner, builder=builder, workload=WORKLOAD, target=target, db=db, strategy=strategy,
              budget=trials, seed=seed, progress=False).run()
    finally:
        runner.close()
        builder.close()
    return target


def fill(db_path: Path, cache: Path, scale: int = 1) -> tuple[Target, Target]:
    """Two runs with `cc` (the second resumes and measures what the first did not) and one with the
    second compiler, `scale` times the tests' few trials; the two targets."""
    with Database(db_path) as db:
        first = tune(db, "cc", cache, seed=1, trials=8 * scale)
        tune(db, "cc", cache, seed=2, trials=6 * scale)
        second = tune(db, second_compiler(), cache, seed=3, trials=12 * scale)
    return first, second


if __name__ == "__main__":
    fill(Path(sys.argv[1]), Path(sys.argv[1]).parent / "cc-cache", int(sys.argv[2]) if len(sys.argv) > 2 else 1)
