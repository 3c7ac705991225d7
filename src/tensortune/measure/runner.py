"""Runners time built candidates and yield one result per candidate as it is known.

Example:
    >>> from tensortune.space import Config
    >>> from tensortune.measure import BuildResult, Timer
    >>> runner = CallableRunner(lambda n: sum(range(n)), Timer(min_repeats=2, budget_seconds=0))
    >>> next(iter(runner.run([BuildResult(Config(n=10))]))).ok
    True
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import numpy as np

from .attribution import LATE_SETTLE_SECONDS, WorkerRuns
from .errors import CandidateError, WrongResult, environment_cause
from .executor import RemoteRunner
from .result import BuildResult, MeasureResult, failed_build
from .timer import Timer
from .worker import IsolatedWorker, classify_exception, worker_state


class Runner(Protocol):
    """Measures built candidates; failures become failed results, never exceptions.

    A runner may also have `late_results()`, which the tuner calls once at the end of a
    run: results that could only show after the last candidate returned (amendments
    blaming a candidate whose leftovers crashed the worker afterwards)."""

    def run(self, builds: Sequence[BuildResult]) -> Iterator[MeasureResult]: ...


def check_close(actual: Any, expected: Any, rtol: float | None = None, atol: float | None = None) -> None:
    """Raise WrongResult unless `actual` matches `expected` within dtype-fitting tolerances."""
    a = np.asarray(actual)
    e = np.asarray(expected)
    if a.shape != e.shape:
        raise WrongResult(f"shape {a.shape} != expected {e.shape}")
    if rtol is None or atol is None:
        tol = {"float16": 1e-2, "bfloat16": 2e-2, "float32": 1e-4}.get(a.dtype.name, 1e-7)
        if a.dtype.kind in "iub":
            tol = 0.0
        rtol = tol if rtol is None else rtol
        atol = tol if atol is None else atol
    # bfloat16 arrays (ml_dtypes) are compared in float32: NumPy has no bfloat16 arithmetic
    a, e = (x.astype(np.float32) if x.dtype.name == "bfloat16" else x for x in (a, e))
    if not np.all(np.isfinite(a[np.isfinite(e)])):
        raise WrongResult("result has NaN or infinity where the reference is finite")
    finite = e[np.isfinite(e)] if e.dtype.kind == "f" else e
    scale = float(np.max(np.abs(finite))) if finite.size else 0.0  # a NaN in the reference must not make it NaN
    if not np.allclose(a, e, rtol=rtol, atol=atol * max(scale, 1.0), equal_nan=True):
        err = float(np.max(np.abs(a.astype(np.float64) - e.astype(np.float64))))
        raise WrongResult(f"max abs error {err:.3g} exceeds rtol={rtol:g}, atol={atol:g} (scale {scale:.3g})")


class CallableRunner:
    """Times `fn(**config)` in this process (for `tensortune.tune`).

    With `reference`, the first call's return value is compared with `reference(**config)`
    (or `reference()` if it takes no arguments) and a mismatch is a `wrong_result`.
    """

    def __init__(self, fn: Callable[..., Any], timer: Timer | None = None,
                 reference: Callable[..., Any] | None = None) -> None:
        self.fn = fn
        self.timer = timer or Timer()
        self.reference = reference
        self._expected: Any = None

    def run(self, builds: Sequence[BuildResult]) -> Iterator[MeasureResult]:
        for b in builds:
            if not b.ok:
                yield failed_build(b)
                continue
            start = time.perf_counter()
            kwargs = dict(b.config)
            try:
                out = self.fn(**kwargs)
                if self.reference is not None:
                    if self._expected is None:
                        self._expected = self.reference()
                    check_close(out, self._expected)
                times = self.timer.time(lambda: self.fn(**kwargs))
            except CandidateError as exc:
                yield MeasureResult.failed(b.config, exc.kind, str(exc), exc.environment,
                                           run_seconds=time.perf_counter() - start)
                continue
            except Exception as exc:  # noqa: BLE001 - the candidate's failure, recorded
                yield MeasureResult.failed(b.config, classify_exception(exc), f"{type(exc).__name__}: {exc}",
                                           environment_cause(exc) or "", run_seconds=time.perf_counter() - start)
                continue
            yield MeasureResult(b.config, times, compile_seconds=b.compile_seconds,
                                run_seconds=time.perf_counter() - start)

    def remote_runner(self) -> RemoteRunner:
        """The recipe for measuring in a Ray actor (`fn` travels by cloudpickle there)."""
        return RemoteRunner(functools.partial(_callable_runner, self.fn, self.timer, self.reference))


def _callable_runner(fn: Callable[..., Any], timer: Timer, reference: Callable[..., Any] | None,
                     index: int) -> CallableRunner:
    return CallableRunner(fn, timer, reference)


def _call_and_time(fn: Callable[..., Any], kwargs: dict[str, Any], timer: Timer,
                   reference: Callable[[], Any] | None) -> tuple[float, ...]:
    """Inside the worker: check `fn(**kwargs)` against the reference (computed once per
    worker), then time it."""
    out = fn(**kwargs)
    if reference is not None:
        state = worker_state()
        key = ("callable-reference", reference)
        if key not in state:
            state[key] = reference()
        check_close(out, state[key])
    return timer.time(lambda: fn(**kwargs))


class WorkerRunner:
    """What runners measuring in one reused isolated worker share (`measure.attribution`):
    the worker's runs, the end-of-run look at it, closing it. Subclasses write `run`,
    usually as `self.runs.run_all(builds, call_for)`."""

    def __init__(self, timeout: float = 60.0, memory_limit: int | None = None) -> None:
        self.runs = WorkerRuns.isolated(timeout, memory_limit)

    @property
    def worker(self) -> IsolatedWorker:
        return self.runs.worker

    def warm_up(self) -> None:
        """Start the worker now rather than at the first candidate."""
        self.runs.warm_up()

    def late_results(self) -> tuple[MeasureResult, ...]:
        """At the end of a run: amendments for a worker that died just after its last
        candidate returned (what that candidate left running)."""
        return self.runs.finish(settle=LATE_SETTLE_SECONDS)

    def close(self) -> None:
        self.runs.close()


class IsolatedCallableRunner(WorkerRunner):
    """Times `fn(**config)` in a worker process (`tune(..., isolate=True)`): a crash, a
    hang past `timeout` or memory past `memory_limit` fails only that candidate, and the
    caller's process survives. `fn` and `reference` travel to the worker by reference, so
    they must be defined at module level."""

    def __init__(self, fn: Callable[..., Any], timer: Timer | None = None,
                 reference: Callable[[], Any] | None = None, timeout: float = 60.0,
                 memory_limit: int | None = None) -> None:
        super().__init__(timeout, memory_limit)
        self.fn = fn
        self.timer = timer or Timer()
        self.reference = reference
        self.timeout, self.memory_limit = timeout, memory_limit

    def run(self, builds: Sequence[BuildResult]) -> Iterator[MeasureResult]:
        def call_for(b: BuildResult) -> Callable[[IsolatedWorker], Any]:
            kwargs = dict(b.config)
            return lambda worker: worker.call(_call_and_time, self.fn, kwargs, self.timer, self.reference)
        return self.runs.run_all(builds, call_for)

    def remote_runner(self) -> RemoteRunner:
        return RemoteRunner(functools.partial(_isolated_callable_runner, self.fn, self.timer, self.reference,
                                              self.timeout, self.memory_limit), timeout=4 * self.timeout + 120)


def _isolated_callable_runner(fn: Callable[..., Any], timer: Timer, reference: Callable[[], Any] | None,
                              timeout: float, memory_limit: int | None, index: int) -> IsolatedCallableRunner:
    return IsolatedCallableRunner(fn, timer, reference, timeout, memory_limit)
