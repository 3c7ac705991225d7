"""`tensortune.tune_c`: tune a C function in one call, as Kernel Tuner's `tune_kernel`.

The configuration's values become `-D` defines of the source; candidates compile in
parallel and run in an isolated worker, each checked against `reference` on fresh random
inputs before it is timed. The records are keyed on the function's name, a hash of its
source and compiler flags, and its arguments' shapes and values, so editing the kernel
starts from nothing instead of reusing the old kernel's results.

Example:
    >>> import tensortune as tt
    >>> src = '''
    ... void scale(float* x, int n) {
    ...     for (int i = 0; i < n; i += STEP) for (int j = i; j < i + STEP && j < n; j++) x[j] *= 2.0f;
    ... }'''
    >>> result = tt.tune_c(src, "scale", [tt.ArrayArg("x", (4096,), role="inout"), tt.ScalarArg("n", 4096)],
    ...                    {"STEP": [1, 8, 64]}, db=":memory:", progress=False)
    >>> result.best_config["STEP"] in (1, 8, 64)
    True
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..backends.c_kernel import ArrayArg, CBuilder, CProblem, CRunner, ScalarArg
from ..db import Database, Target, Workload
from ..measure import Timer
from ..measure.main_guard import check_guarded
from ..space import Space
from ..tuner import Budget, Tuner, TuneResult, TuningFailed
from .callable import open_db


def tune_c(
    source: str,
    function: str,
    args: Sequence[ArrayArg | ScalarArg],
    space: Space | Mapping[str, Any],
    *,
    reference: Callable[..., Mapping[str, np.ndarray]] | None = None,
    budget: Budget | int | float | None = None,
    strategy: str = "auto",
    flags: Sequence[str] = (),
    rtol: float | None = None,
    atol: float | None = None,
    key: Mapping[str, Any] | None = None,
    name: str | None = None,
    db: "Database | str | os.PathLike[str] | None" = None,
    seed: int | None = None,
    timer: Timer | None = None,
    timeout: float = 60.0,
    jobs: int | None = None,
    progress: bool = True,
    retune: bool = False,
    retry_failed: bool = False,
) -> TuneResult:
    """Search `space` for the `-D` defines that make the C `function` of `source` fastest.

    `args` describe the function's parameters in order: `ArrayArg(name, shape, dtype,
    role)` (role "in", "out" or "inout"; arrays are filled with random values) and
    `ScalarArg(name, value, ctype)`. `reference(**arrays)` returns the expected "out" and
    "inout" arrays by name; it runs in a worker process, so it must be defined at module
    level, and a script that calls `tune_c` keeps the call under
    `if __name__ == "__main__":` (worker processes import the script). Without a reference
    nothing is checked, only timed. Raises `TuningFailed` when no candidate succeeded, and
    RuntimeError before measuring anything when called unguarded from a script's top level.
    """
    check_guarded("tune_c", reference)
    if not isinstance(space, Space):
        space = Space(space)
    args = tuple(args)
    for arg in args:
        if not isinstance(arg, (ArrayArg, ScalarArg)):
            raise TypeError(f"tune_c: each argument must be an ArrayArg or a ScalarArg, not {arg!r}")
    problem = CProblem(source, function, args, reference, rtol=rtol, atol=atol, flags=tuple(flags))
    workload = c_workload(problem, name, key)
    runner = CRunner(problem, timer, timeout=timeout)
    try:
        tuner = Tuner(space, runner, builder=CBuilder(problem, jobs=jobs), workload=workload, target=Target.cpu(),
                      db=open_db(db), strategy=strategy, budget=budget, seed=seed, progress=progress,
                      description=name or function, retune=retune, retry_failed=retry_failed)
        result = tuner.run()
    finally:
        runner.close()
    if result.best is None:
        raise TuningFailed(result.failure_report(name or function))
    return result


def c_workload(problem: CProblem, name: str | None = None, key: Mapping[str, Any] | None = None) -> Workload:
    """The identity of a C problem's records: its name, a hash of its source, function and
    flags, and a key of its arguments (shapes, dtypes, roles, scalar values) and `key`."""
    described = [[a.name, list(a.shape), a.dtype, a.role] if isinstance(a, ArrayArg) else [a.name, a.value, a.ctype]
                 for a in problem.args]
    hashed = json.dumps({"source": problem.source, "function": problem.function, "flags": list(problem.flags)})
    return Workload.make(name or problem.function, hashed, {"args": described, **dict(key or {})})
