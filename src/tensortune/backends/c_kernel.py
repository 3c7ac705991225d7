"""Tuning C kernels: a problem (source, arguments, reference), a parallel builder and
an isolated runner that checks every candidate on fresh random inputs before timing it.

Example:
    >>> import numpy as np
    >>> src = "void scale(float* x, int n) { for (int i = 0; i < n; i++) x[i] *= FACTOR; }"
    >>> p = CProblem(src, "scale", (ArrayArg("x", (8,), "float32", "inout"), ScalarArg("n", 8)),
    ...              reference=None)
    >>> p.argtypes
    ['float32*', 'int']
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..measure import (BuildResult, IsolatedWorker, MeasureResult, ProcessPoolBuilder,
                       Timer, check_close, worker_state)
from ..measure.builder import build_one
from ..measure.executor import RemoteBuild, RemoteRunner, ShippedFile, materialize_library, shipped_build
from ..measure.runner import WorkerRunner
from ..space import Config
from ..te.dtype import is_float_array, numpy_dtype
from .c_compiler import CCompiler, load_function


@dataclass(frozen=True)
class ArrayArg:
    """An array argument described by shape and dtype; role is "in", "out" or "inout"."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    role: str = "in"

    def random(self, rng: np.random.Generator) -> np.ndarray:
        dt = numpy_dtype(self.dtype)
        if is_float_array(dt):
            return rng.standard_normal(self.shape).astype(dt)
        return rng.integers(-8, 8, self.shape).astype(dt)


@dataclass(frozen=True)
class ScalarArg:
    """A scalar argument passed by value; `ctype` is "int", "float", "double", "long" and the like."""

    name: str
    value: int | float
    ctype: str = "int"


@dataclass(frozen=True)
class CProblem:
    """A C function, the arguments it is called with and how to check it.

    `reference(**inputs)` (a picklable, module-level function) returns a dict of the
    expected values of the "out"/"inout" arrays given every array argument's input.
    Config values become `-D` defines of the source.
    """

    source: str
    function: str
    args: tuple[ArrayArg | ScalarArg, ...]
    reference: Callable[..., Mapping[str, np.ndarray]] | None
    rtol: float | None = None
    atol: float | None = None
    flags: tuple[str, ...] = ()

    @property
    def argtypes(self) -> list[str]:
        return [f"{a.dtype}*" if isinstance(a, ArrayArg) else a.ctype for a in self.args]

    def inputs(self, seed: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        return {a.name: a.random(rng) for a in self.args if isinstance(a, ArrayArg)}

    def call(self, fn: Any, arrays: Mapping[str, np.ndarray]) -> None:
        fn(*[arrays[a.name].ctypes.data if isinstance(a, ArrayArg) else a.value for a in self.args])


def _compile(compiler: CCompiler, problem: CProblem, config: Config) -> str:
    return str(compiler.compile(problem.source, dict(config), problem.flags))


POOL_GRACE_SECONDS = 30.0


class CBuilder(ProcessPoolBuilder):
    """Compiles each configuration's -D variant of the source, in parallel.

    `timeout` (default: the compiler's) bounds each compilation; the compiler enforces it
    and ends its whole process group, and the pool's own limit, a grace period later, is
    only a backstop (killing a pool process would leave its compiler running).
    """

    def __init__(self, problem: CProblem, compiler: CCompiler | None = None, jobs: int | None = None,
                 timeout: float | None = None) -> None:
        compiler = compiler or CCompiler()
        if timeout is not None:
            compiler = dataclasses.replace(compiler, timeout=timeout)
        super().__init__(functools.partial(_compile, compiler, problem), jobs=jobs,
                         timeout=compiler.timeout + POOL_GRACE_SECONDS)

    def remote_build(self) -> RemoteBuild:
        """Built on a node of the target; the library travels to the measuring node."""
        return RemoteBuild(functools.partial(shipped_build, functools.partial(build_one, self.build_fn),
                                             ShippedFile.of), timeout=self.timeout)


def run_c_candidate(library: str, problem: CProblem, timer: Timer, check_seed: int) -> tuple[float, ...]:
    """Inside the worker: check on fresh random inputs, then time. Returns seconds per run."""
    fn = load_function(library, problem.function, problem.argtypes)
    if problem.reference is not None:
        arrays = problem.inputs(check_seed)
        expected = problem.reference(**{k: v.copy() for k, v in arrays.items()})
        for a in problem.args:
            if isinstance(a, ArrayArg) and a.role == "out":
                arrays[a.name].fill(np.nan)  # poison: every element must be written
        problem.call(fn, arrays)
        for name, want in expected.items():
            check_close(arrays[name], want, problem.rtol, problem.atol)
    state = worker_state()
    key = ("c-inputs", hash(problem.source), problem.function, hash(problem.args))
    if key not in state:
        state.clear()
        state[key] = problem.inputs(0)
    arrays = state[key]
    pristine = {a.name: arrays[a.name].copy() for a in problem.args
                if isinstance(a, ArrayArg) and a.role == "inout"}
    if not pristine:
        return timer.time(lambda: problem.call(fn, arrays))

    def restored_call() -> None:
        for name, value in pristine.items():
            np.copyto(arrays[name], value)
        problem.call(fn, arrays)

    return timer.time(restored_call)


class CRunner(WorkerRunner):
    """Runs candidates in an isolated worker: a crash, a hang or a memory bomb fails only
    that candidate, and a worker lost to what an earlier candidate left behind is blamed
    on that one (`measure.attribution`).

    `memory_limit`: bytes the worker may hold (default: half the machine's memory; 0: no
    limit); a candidate past it is stopped and recorded as `out_of_resources`.
    """

    def __init__(self, problem: CProblem, timer: Timer | None = None, timeout: float = 60.0,
                 seed: int = 0, memory_limit: int | None = None) -> None:
        super().__init__(timeout, memory_limit)
        self.problem = problem
        self.timer = timer or Timer()
        self._checks = seed
        self.timeout, self.memory_limit = timeout, memory_limit

    def remote_runner(self) -> RemoteRunner:
        """Measured in a Ray actor's isolated worker; each actor checks on its own seeds."""
        return RemoteRunner(functools.partial(_c_runner, self.problem, self.timer, self.timeout, self._checks,
                                              self.memory_limit), unpack=materialize_library,
                            timeout=4 * self.timeout + 120)

    def run(self, builds: Sequence[BuildResult]) -> Iterator[MeasureResult]:
        def call_for(b: BuildResult) -> Callable[[IsolatedWorker], Any]:
            self._checks += 1
            library, seed = b.artifact, 1000 + self._checks  # a fresh check per candidate, the same on replay
            return lambda worker: worker.call(run_c_candidate, library, self.problem, self.timer, seed)
        return self.runs.run_all(builds, call_for)


def _c_runner(problem: CProblem, timer: Timer, timeout: float, seed: int, memory_limit: int | None,
              index: int) -> CRunner:
    return CRunner(problem, timer, timeout, seed + 1_000_000 * (index + 1), memory_limit)
