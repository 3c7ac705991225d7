"""Building and measuring auto-scheduled candidates.

`SketchBuilder` turns configurations into C in this process (filling the sketch,
lowering, generating code: milliseconds), drops candidates whose C source another
candidate already has, and compiles the rest in parallel threads (the compiler is a
subprocess). `SketchRunner` runs each library in an isolated worker: first on random
inputs, checked against the NumPy interpreter of the original expressions (a mismatch
is that candidate's `wrong_result`), then timed. Inputs are drawn afresh for every
candidate while the reference is cheap; an expensive reference (a big convolution) is
recomputed on new inputs every `refresh` candidates. A candidate whose checked run takes
over 0.1 s and is already `cutoff` times slower than the best so far is not timed
further (a busy machine can slow one run of a good kernel tenfold, so the bar is high).

Example:
    >>> from tensortune.te import workloads
    >>> from tensortune.autoschedule.holes import SketchSpace
    >>> sp = SketchSpace.of(workloads.matmul(16, 16, 16).outputs)
    >>> cfg = sp.canonical(sp.space.sample(1, 0)[0])
    >>> b = SketchBuilder(sp, jobs=1).build([cfg])[0]
    >>> b.ok, b.artifact.function
    (True, 'kernel')
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..backends.c_codegen import FLAGS, generate_c
from ..backends.c_compiler import CCompiler, load_function
from ..measure import (BuildResult, CandidateError, ErrorKind, IsolatedWorker, MeasureResult, Timer, check_close,
                       failed_build, worker_state)
from ..measure.attribution import LATE_SETTLE_SECONDS, WorkerRuns, measured_result
from ..measure.errors import environment_cause
from ..measure.executor import RemoteBuild, RemoteRunner, ShippedFile, materialize_library, shipped_build
from ..space import Config
from ..te.build import default_tolerance, reference_outputs
from ..te.dtype import TEError, numpy_dtype
from ..te.tensor import Tensor
from .apply import apply_config
from .holes import SketchSpace


@dataclass(frozen=True)
class ArgSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str
    is_output: bool
    low: int = -8  # integers are drawn from [low, high): an index stays inside what it indexes
    high: int = 8
    positive: bool = False  # floats drawn non-negative (they reach a square root or a logarithm)


def random_inputs(spec: "CheckSpec", rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Fresh inputs for a check: standard normal floats (their absolute values where they
    must be positive), integers within their ranges."""
    out = {}
    for a in spec.args:
        if a.is_output:
            continue
        if a.dtype == "int32":
            out[a.name] = rng.integers(a.low, a.high, a.shape).astype(np.int32)
        else:
            x = rng.standard_normal(a.shape)
            out[a.name] = (np.abs(x) if a.positive else x).astype(numpy_dtype(a.dtype))
    return out


@dataclass(frozen=True)
class Candidate:
    """A compiled candidate: its library, the steps that made it and its source's hash."""

    library: str
    function: str
    steps: tuple[dict, ...]
    source_hash: str


@dataclass(frozen=True)
class CheckSpec:
    """What the worker needs to check a candidate: arguments in call order, the original
    outputs (for the interpreter) and tolerances."""

    key: str
    args: tuple[ArgSpec, ...]
    outputs: tuple[Tensor, ...]
    rtol: float | None
    atol: float | None

    @staticmethod
    def of(outputs: Sequence[Tensor], args: Sequence[Tensor], key: str) -> CheckSpec:
        from ..te.ranges import DEFAULT_RANGE, input_ranges, positive_inputs
        outs = {t.name for t in outputs}
        tol = default_tolerance(list(args))
        ranges, positive = input_ranges(outputs), positive_inputs(outputs)
        return CheckSpec(key, tuple(ArgSpec(t.name, t.shape, t.dtype, t.name in outs,
                                            *ranges.get(t.name, DEFAULT_RANGE), t.name in positive) for t in args),
                         tuple(outputs), tol, tol)


def kernel_args(sp: SketchSpace, args: Sequence[Tensor] | None = None) -> list[Tensor]:
    """The kernel's arguments: `args` if given, else the inputs in graph order, then the outputs."""
    if args is not None:
        return list(args)
    return list(sp.graph.inputs) + list(sp.outputs)


def schedule_source(sp: SketchSpace, config: Config, args: Sequence[Tensor], name: str = "kernel"):
    """(schedule, C source) of a configuration; the schedule's own tensors replace the
    original outputs in `args` when the sketch rewrote the graph (rfactor)."""
    s = apply_config(sp, config)
    by_name = {t.name: t for t in list(s.inputs) + list(s.outputs)}
    sargs = [by_name[t.name] for t in args]
    return s, generate_c(s.lower(name, sargs)), sargs


class SketchBuilder:
    """Configurations -> compiled libraries, `jobs` compilers at a time."""

    def __init__(self, sp: SketchSpace, args: Sequence[Tensor] | None = None, compiler: CCompiler | None = None,
                 jobs: int = 2, function: str = "kernel") -> None:
        self.sp = sp
        self.args = kernel_args(sp, args)
        self.compiler = compiler or CCompiler()
        self.jobs = jobs
        self.function = function

    def schedule_source(self, config: Config) -> tuple[Any, str]:
        """(schedule, C source) of one configuration; a TEError is that candidate's failure.
        The one place a builder of other schedules (templates) differs."""
        s, src, _ = schedule_source(self.sp, config, self.args, self.function)
        return s, src

    def build(self, configs: Sequence[Config]) -> list[BuildResult]:
        results: dict[int, BuildResult] = {}
        sources: dict[int, tuple[str, tuple[dict, ...], float]] = {}
        for k, cfg in enumerate(configs):
            start = time.perf_counter()
            try:
                s, src = self.schedule_source(cfg)
            except TEError as exc:
                results[k] = BuildResult(cfg, None, ErrorKind.INVALID, f"schedule refused: {exc}",
                                         time.perf_counter() - start)
                continue
            sources[k] = (src, tuple(s.to_json()), time.perf_counter() - start)

        texts = sorted({src for src, _, _ in sources.values()})  # each distinct source compiled once

        def compile_source(src: str) -> tuple[str, Any, float]:
            start = time.perf_counter()
            try:
                return "ok", str(self.compiler.compile(src, {}, FLAGS)), time.perf_counter() - start
            except CandidateError as exc:
                return "error", (exc.kind, str(exc), exc.environment), time.perf_counter() - start
            except Exception as exc:  # noqa: BLE001 - a build's failure belongs to its candidate
                return ("error", (ErrorKind.COMPILE_ERROR, f"{type(exc).__name__}: {exc}", environment_cause(exc) or ""),
                        time.perf_counter() - start)

        if self.jobs > 1 and len(texts) > 1:
            with ThreadPoolExecutor(self.jobs) as pool:
                compiled = dict(zip(texts, pool.map(compile_source, texts)))
        else:
            compiled = {src: compile_source(src) for src in texts}
        for k, (src, steps, prep) in sources.items():
            status, payload, seconds = compiled[src]
            if status == "ok":
                digest = hashlib.sha256(src.encode()).hexdigest()[:16]
                results[k] = BuildResult(configs[k], Candidate(payload, self.function, steps, digest), None, "",
                                         prep + seconds)
            else:
                results[k] = BuildResult(configs[k], None, payload[0], payload[1], prep + seconds, payload[2])
        return [results[k] for k in range(len(configs))]

    def remote_build(self) -> RemoteBuild:
        """One configuration per call, on a node of the target; the library travels."""
        one = SketchBuilder(self.sp, self.args, self.compiler, jobs=1, function=self.function)
        return RemoteBuild(functools.partial(shipped_build, functools.partial(_build_single, one), _ship_candidate),
                           timeout=self.compiler.timeout + 30)


def _build_single(builder: SketchBuilder, config: Config) -> BuildResult:
    return builder.build([config])[0]


def _ship_candidate(candidate: Candidate) -> Candidate:
    return dataclasses.replace(candidate, library=ShippedFile.of(candidate.library))


def _unship_candidate(candidate: Candidate) -> Candidate:
    return dataclasses.replace(candidate, library=materialize_library(candidate.library))


@dataclass
class _Reference:
    seed: int
    inputs: dict[str, np.ndarray]
    expected: dict[str, np.ndarray]
    seconds: float
    uses: int = 0


def run_candidate(library: str, function: str, spec: CheckSpec, timer: Timer, seed: int, refresh: int,
                  cutoff_seconds: float) -> tuple[float, ...]:
    """Inside the worker: check the candidate on random inputs, then time it."""
    state = worker_state()
    ref: _Reference | None = state.get(("reference", spec.key))
    if ref is None or (ref.seed != seed and (ref.seconds < 0.25 or ref.uses >= refresh)):
        inputs = random_inputs(spec, np.random.default_rng(seed))
        start = time.perf_counter()
        expected = reference_outputs(spec.outputs, **inputs)
        ref = _Reference(seed, inputs, expected, time.perf_counter() - start)
        state[("reference", spec.key)] = ref
    ref.uses += 1
    fn = load_function(library, function, [f"{a.dtype}*" for a in spec.args], restype="int")
    arrays = {}
    for a in spec.args:
        if a.is_output:
            arrays[a.name] = np.full(a.shape, np.nan, numpy_dtype(a.dtype))  # every element must be written
        else:
            arrays[a.name] = ref.inputs[a.name]
    ptrs = [arrays[a.name].ctypes.data for a in spec.args]

    def call() -> None:
        if fn(*ptrs) != 0:
            raise CandidateError(ErrorKind.OUT_OF_RESOURCES, "the kernel could not allocate its temporaries")

    start = time.perf_counter()
    call()
    first = time.perf_counter() - start
    for name, want in ref.expected.items():
        check_close(arrays[name], want, spec.rtol, spec.atol)
    if first > cutoff_seconds:
        return (first,)
    return timer.time(call)


SLOW_SECONDS = 0.1  # a checked run slower than this (and than `cutoff` x the best) is not timed further


@dataclass
class SketchRunner:
    """Checks and times candidates in one isolated worker; a crash, a hang or a memory bomb
    fails only that candidate, and a worker lost to what an earlier candidate left behind
    is blamed on that one (`measure.attribution`). Identical sources are measured once.
    `memory_limit`: bytes the worker may hold (None: half the machine's memory; 0: none)."""

    spec: CheckSpec
    timer: Timer = field(default_factory=lambda: Timer(warmup_seconds=0.01, min_repeats=5, max_repeats=50,
                                                       budget_seconds=0.05))
    timeout: float = 60.0
    seed: int = 0
    refresh: int = 16
    cutoff: float = 3.0
    memory_limit: int | None = None

    def __post_init__(self) -> None:
        self.runs = WorkerRuns.isolated(self.timeout, self.memory_limit)
        self.best = math.inf
        self._checks = 0
        self._by_source: dict[str, MeasureResult] = {}

    def run(self, builds: Sequence[BuildResult]) -> Iterator[MeasureResult]:
        for b in builds:
            if not b.ok:
                yield failed_build(b)
                continue
            cand: Candidate = b.artifact
            extra = {"steps": list(cand.steps), "sketch": b.config.get("sketch", ""), "source": cand.source_hash}
            same = self._by_source.get(cand.source_hash)
            if same is not None:
                yield MeasureResult(b.config, same.times, same.error, same.message, b.compile_seconds, 0.0,
                                    {**extra, "same_source_as": same.config.digest})
                continue
            self._checks += 1
            start = time.perf_counter()

            def call(worker: IsolatedWorker, cand: Candidate = cand, seed: int = self.seed * 1_000_003 + self._checks,
                     cutoff: float = max(self.cutoff * self.best, SLOW_SECONDS)) -> Any:
                return worker.call(run_candidate, cand.library, cand.function, self.spec, self.timer, seed,
                                   self.refresh, cutoff)

            measured = self.runs.measure(b.config, call)
            result = measured_result(b, measured, time.perf_counter() - start, extra)
            if result.ok:
                self.best = min(self.best, min(result.times))
            if not result.environment:
                self._by_source[cand.source_hash] = result
            yield result
            yield from self._amended(measured.amendments)
        yield from self._amended(self.runs.finish())

    def remote_runner(self) -> RemoteRunner:
        """Measured in a Ray actor's isolated worker, on seeds of its own."""
        return RemoteRunner(functools.partial(_sketch_runner, self.spec, self.timer, self.timeout, self.seed,
                                              self.refresh, self.cutoff, self.memory_limit),
                            unpack=_unship_candidate, timeout=4 * self.timeout + 120)

    def _amended(self, amendments: Sequence[MeasureResult]) -> Iterator[MeasureResult]:
        for amendment in amendments:
            self._by_source = {k: v for k, v in self._by_source.items() if v.config != amendment.config}
            yield amendment

    @property
    def worker(self) -> IsolatedWorker:
        return self.runs.worker

    def warm_up(self) -> None:
        """Start the worker now rather than at the first candidate."""
        self.runs.warm_up()

    def late_results(self) -> tuple[MeasureResult, ...]:
        """At the end of a run: amendments for a worker that died just after its last
        candidate returned (what that candidate left running)."""
        return tuple(self._amended(self.runs.finish(settle=LATE_SETTLE_SECONDS)))

    def close(self) -> None:
        self.runs.close()


def _sketch_runner(spec: CheckSpec, timer: Timer, timeout: float, seed: int, refresh: int, cutoff: float,
                   memory_limit: int | None, index: int) -> SketchRunner:
    return SketchRunner(spec, timer, timeout, seed + 7919 * (index + 1), refresh, cutoff, memory_limit)


def time_interleaved(libraries: Sequence[str], function: str, spec: CheckSpec, timer: Timer, rounds: int,
                     seed: int) -> list[list[tuple[float, ...]]]:
    """Inside the worker: every time of each library in each round, run in a shuffled order
    every round on the same inputs (so a slow drift of the machine hits all alike)."""
    rng = np.random.default_rng(seed)
    inputs = random_inputs(spec, rng)
    arrays = {a.name: np.empty(a.shape, numpy_dtype(a.dtype)) if a.is_output else inputs[a.name]
              for a in spec.args}
    ptrs = [arrays[a.name].ctypes.data for a in spec.args]
    fns = [load_function(lib, function, [f"{a.dtype}*" for a in spec.args], restype="int") for lib in libraries]
    out: list[list[tuple[float, ...]]] = [[] for _ in libraries]
    for _ in range(rounds):
        for k in rng.permutation(len(fns)):
            out[k].append(tuple(timer.time(lambda: fns[k](*ptrs))))
    return out
