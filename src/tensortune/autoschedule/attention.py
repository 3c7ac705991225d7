"""Fused attention on the CPU, tuned: block sizes searched, every candidate checked.

A te graph whose pattern is attention (`backends.triton.patterns.analyze` gives an
`AttentionPlan`: scores, an optional causal or given mask, a softmax over the keys and
the weighted sum of values) is compiled to one C kernel (`backends.c_attention`) instead
of a kernel per stage. Its space: queries per task (BLOCK_M), keys per block (BLOCK_N,
up to the whole row) and query rows per register block (ROWS). Candidates are built by
`AttentionBuilder` (C source per configuration, compiled in parallel) and measured by the
auto-scheduler's `SketchRunner`: each is checked on fresh random inputs against the
NumPy interpreter of the graph's stages before it is timed, and a wrong one is that
candidate's `wrong_result`. The finalists are re-timed interleaved; the records database
keeps every measurement, so a later compile builds the winner without searching.

Example:
    >>> from tensortune.te import workloads
    >>> p = AttentionProblem.of(workloads.attention(1, 2, 16, 16, 8, "float32", causal=True).output)
    >>> p.space.size > 4, p.plan.causal
    (True, 0)
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..backends.c_attention import (DEFAULTS, LOCAL_BYTES, ROW_CHOICES, VEC, AttentionCodegenError,
                                    generate_attention_c, supports)
from ..backends.c_codegen import FLAGS
from ..db import Database, Target, Workload
from ..measure import LocalExecutor, MeasureResult, Timer, check_close
from ..search import create_strategy
from ..space import Config, Ordinal, Space
from ..te.build import reference_outputs
from ..te.dtype import numpy_dtype
from ..te.tensor import Tensor, graph
from ..tuner import Budget, Tuner
from .measure import CheckSpec, SketchBuilder, SketchRunner, random_inputs
from .rounds import TunerRounds

ATTENTION_VERSION = 3  # part of the workload key: records of another generator are not rebuilt


def attention_plan(output: Tensor) -> Any:
    """The attention plan of a te graph when the C kernel takes it, else None."""
    from ..backends.triton.patterns import analyze
    try:
        plan = analyze(output)
    except Exception:  # noqa: BLE001 - a graph the analysis refuses is no attention
        return None
    if plan.kind != "attention" or supports(plan) is not None:
        return None
    return plan


def _blocks(extent: int, sizes: Sequence[int], whole_up_to: int) -> list[int]:
    """Block sizes below `extent`, and `extent` itself when one block of it fits."""
    out = [s for s in sizes if s < extent]
    if extent <= whole_up_to:
        out.append(extent)
    return out or [min(sizes)]


def attention_space(plan: Any) -> Space:
    """BLOCK_M, BLOCK_N and ROWS, with the tiles of one task within `LOCAL_BYTES`."""
    _, sq, skv, d, dv = plan.sizes
    bms = _blocks(sq, (4, 8, 16, 32, 64, 128), 128)
    bns = _blocks(skv, (16, 32, 64, 128, 256, 512), 1024)
    rows = [r for r in ROW_CHOICES if r <= max(bms)]
    dvp, widest = -(-dv // VEC) * VEC, -(-max(bns) // VEC) * VEC + VEC
    tiles = (f"4 * ((BLOCK_M + ROWS) * {d + dvp + 2} + {widest} * {d + dvp} + (BLOCK_M + ROWS) * {widest}) "
             f"<= {LOCAL_BYTES}")
    return Space([Ordinal("BLOCK_M", bms), Ordinal("BLOCK_N", bns), Ordinal("ROWS", rows)],
                 constraints=[tiles, "ROWS <= BLOCK_M"])


def seed_configs(space: Space, plan: Any) -> list[Config]:
    """Configurations tried first: large query blocks (each key tile loaded for many
    queries), the whole row or 64-128 keys per block, eight rows per register block."""
    _, sq, skv, _, _ = plan.sizes
    out = []
    for bm, bn, rows in ((128, skv, 8), (32, 64, 8), (64, 128, 8), (128, 128, 8), (32, 128, 4), (16, 64, 4),
                         (8, 64, 4), (4, 64, 4)):
        cfg = {"BLOCK_M": min(bm, sq), "BLOCK_N": min(bn, skv), "ROWS": min(rows, sq)}
        while cfg["ROWS"] not in ROW_CHOICES:
            cfg["ROWS"] -= 1
        if space.is_valid(cfg):
            c = space.config(cfg)
            if c not in out:
                out.append(c)
    return out[:6]


@dataclass(frozen=True)
class AttentionProblem:
    """A te attention graph to tune: its plan, kernel arguments, space and workload."""

    name: str
    plan: Any
    outputs: tuple[Tensor, ...]
    args: tuple[Tensor, ...]
    space: Space
    workload: Workload

    @staticmethod
    def of(output: Tensor, args: Sequence[Tensor] | None = None, name: str | None = None) -> AttentionProblem:
        plan = attention_plan(output)
        if plan is None:
            from ..backends.triton.patterns import PatternError, analyze
            try:
                found = analyze(output)
            except PatternError as exc:
                raise AttentionCodegenError(f"{output.name!r} has no fused C attention kernel: {exc}") from exc
            why = supports(found) if found.kind == "attention" else f"its pattern is {found.kind}, not attention"
            raise AttentionCodegenError(f"{output.name!r} has no fused C attention kernel: {why}")
        kargs = tuple(args) if args is not None else tuple(t for t in graph([output]) if t.op is None) + (output,)
        from .api import graph_text
        name = name or output.name
        key = {"args": [[t.name, list(t.shape), t.dtype] for t in kargs], "attention": ATTENTION_VERSION}
        workload = Workload.make(f"te-attention:{name}", graph_text([output]), key)
        return AttentionProblem(name, plan, (output,), kargs, attention_space(plan), workload)

    @property
    def flops(self) -> float:
        return float(self.plan.flops)


class _Steps:
    """What a candidate records as its steps: the configuration it was generated from."""

    def __init__(self, config: Config) -> None:
        self.config = config

    def to_json(self) -> list[dict[str, Any]]:
        return [{"attention": dict(self.config)}]


class AttentionBuilder(SketchBuilder):
    """Configurations -> C sources of the fused kernel -> compiled libraries, in parallel."""

    def __init__(self, problem: AttentionProblem, compiler: Any = None, jobs: int = 2) -> None:
        super().__init__(None, problem.args, compiler, jobs)  # type: ignore[arg-type]
        self.problem = problem

    def schedule_source(self, config: Config) -> tuple[Any, str]:
        src = generate_attention_c(self.problem.plan, dict(config), self.problem.args, self.function)
        return _Steps(config), src

    def remote_build(self) -> Any:
        raise NotImplementedError("the fused CPU attention kernel is tuned on this machine (no Ray executor)")


@dataclass(frozen=True)
class AttentionKernel:
    """The tuned, verified kernel; call it with the inputs (NumPy arrays), or with every
    argument to write the output in place. `time` is seconds per call."""

    problem: AttentionProblem = field(repr=False)
    config: Config
    source: str = field(repr=False)
    library: Path
    time: float
    trials: int
    tuning_seconds: float
    from_db: bool
    _fn: Any = field(repr=False, compare=False)

    @property
    def flops(self) -> float:
        return self.problem.flops

    @property
    def gflops(self) -> float:
        return self.flops / self.time / 1e9 if self.time > 0 and self.time == self.time else 0.0

    @property
    def sketch(self) -> str:
        return "fused-attention"

    @property
    def workload(self) -> Workload:
        return self.problem.workload

    def __call__(self, *arrays: np.ndarray) -> np.ndarray:
        args = self.problem.args
        out = self.problem.outputs[0]
        inputs = [t for t in args if t is not out]
        if len(arrays) not in (len(inputs), len(args)):
            raise ValueError(f"the kernel takes its {len(inputs)} inputs or all {len(args)} arguments, "
                             f"got {len(arrays)}")
        given = dict(zip([t.name for t in (args if len(arrays) == len(args) else inputs)], arrays))
        if out.name not in given:
            given[out.name] = np.empty(out.shape, numpy_dtype(out.dtype))
        ptrs = []
        for t in args:
            a = given[t.name]
            if a.shape != t.shape or a.dtype != numpy_dtype(t.dtype) or not a.flags.c_contiguous:
                raise ValueError(f"argument {t.name!r} must be a contiguous {t.dtype}{list(t.shape)} array, "
                                 f"got {a.dtype}{list(a.shape)}")
            ptrs.append(a.ctypes.data)
        self._fn(*ptrs)
        return given[out.name]


def build_attention(problem: AttentionProblem, config: Config, best_time: float, trials: int, seconds: float,
                    from_db: bool) -> AttentionKernel:
    """Compile `config` and verify it on fresh random inputs against the interpreter."""
    from ..backends.c_compiler import CCompiler, load_function
    source = generate_attention_c(problem.plan, dict(config), problem.args)
    library = CCompiler().compile(source, {}, FLAGS)
    fn = load_function(library, "kernel", [f"{t.dtype}*" for t in problem.args], restype="int")
    kernel = AttentionKernel(problem, config, source, Path(library), best_time, trials, seconds, from_db, fn)
    spec = CheckSpec.of(problem.outputs, problem.args, "")
    inputs = random_inputs(spec, np.random.default_rng(int.from_bytes(os.urandom(4), "little")))
    got = kernel(*[inputs[t.name] for t in problem.args if t.name in inputs])
    want = reference_outputs(problem.outputs, **inputs)[problem.outputs[0].name]
    check_close(got, want, spec.rtol, spec.atol)
    return kernel


class AttentionSession(TunerRounds[AttentionKernel]):
    """One attention kernel's search, resumable round by round (as `autoschedule.api._Session`);
    its finalists are ranked by their fastest run only, and its confirm record has no margin."""

    finalist_ranks = ("fastest",)
    records_margin = False

    def __init__(self, problem: AttentionProblem, db: Database, target: Target, seed: int = 0, jobs: int = 2,
                 progress: bool = False, timer: Timer | None = None, expected_trials: int | None = None) -> None:
        from ..backends.triton.tune import SeededStrategy
        self.problem, self.db, self.target = problem, db, target
        self.spec = CheckSpec.of(problem.outputs, problem.args, problem.workload.source_hash)
        self.runner = SketchRunner(self.spec, seed=seed) if timer is None else \
            SketchRunner(self.spec, timer=timer, seed=seed)
        self.builder = AttentionBuilder(problem, jobs=jobs)
        strategy = SeededStrategy(create_strategy("random", problem.space, seed=seed, budget=expected_trials),
                                  seed_configs(problem.space, problem.plan))
        self.tuner = Tuner(problem.space, self.runner, workload=problem.workload, target=target, db=db,
                           builder=self.builder, strategy=strategy, budget=expected_trials, seed=seed,
                           batch_size=8, progress=progress, description=problem.name, executor=LocalExecutor())
        self.results: list[MeasureResult] = []
        self.seconds = 0.0

    def build_kernel(self, config: Config, best_time: float, trials: int, seconds: float) -> AttentionKernel:
        return build_attention(self.problem, config, best_time, trials, seconds, False)

    def rebuild_kernel(self, trials: int, seconds: float) -> AttentionKernel | None:
        return rebuild_attention(self.problem, self.db, self.target, trials, seconds)

    def failure_message(self) -> str:
        return (f"tuning the fused attention {self.problem.name!r} measured no working kernel "
                f"({len(self.results)} trials); see the records database")

    def close(self) -> None:
        self.runner.close()


def rebuild_attention(problem: AttentionProblem, db: Database, target: Target, trials: int = 0,
                      seconds: float = 0.0) -> AttentionKernel | None:
    """The best recorded configuration built and verified (a record that no longer builds
    or checks is skipped with a warning), or None."""
    from .api import REBUILD_TRIES, recorded_candidates
    for record in recorded_candidates(db, problem.workload, target, problem.space)[:REBUILD_TRIES]:
        try:
            return build_attention(problem, record.config, record.time, trials, seconds, trials == 0)
        except Exception as exc:  # noqa: BLE001 - a record that cannot be rebuilt is skipped, not fatal
            warnings.warn(f"{problem.name}: the recorded attention kernel {record.config.to_json()[:200]} could "
                          f"not be rebuilt ({type(exc).__name__}: {str(exc)[:200]}); skipped", stacklevel=3)
    return None


def fused_attention_problem(outputs_or_function: Any, args: Sequence[Tensor] | None = None,
                            name: str | None = None) -> AttentionProblem | None:
    """What `te.autoschedule` was given, as an attention problem when it is one attention
    graph the fused kernel takes (a te function is called, a computation's inputs and
    output become the arguments), else None."""
    obj = outputs_or_function
    if callable(obj) and not isinstance(obj, Tensor):
        obj = obj()
    if hasattr(obj, "outputs") and hasattr(obj, "inputs") and not isinstance(obj, Tensor):
        name = name or getattr(obj, "name", None)
        args = list(args) if args is not None else list(obj.inputs) + list(obj.outputs)
        obj = obj.outputs
    if isinstance(obj, (list, tuple)) and len(obj) == 1:
        obj = obj[0]
    if not isinstance(obj, Tensor) or obj.op is None or attention_plan(obj) is None:
        return None
    if args is not None and [t for t in args if t.op is not None] != [obj]:
        return None  # other outputs among the arguments: not one kernel's
    return AttentionProblem.of(obj, args, name)


def autoschedule_attention(problem: AttentionProblem, db: Database, budget: Budget | int | float | None = None,
                           *, seed: int = 0, jobs: int = 2, retune: bool = False, confirm: int = 4,
                           confirm_rounds: int = 7, progress: bool = False,
                           timer: Timer | None = None) -> AttentionKernel:
    """The fused kernel of `problem`: rebuilt from the records, or searched under `budget`
    (default 32 trials) with the finalists re-timed interleaved when `confirm` > 1."""
    target = Target.cpu()
    if not retune:
        kernel = rebuild_attention(problem, db, target)
        if kernel is not None:
            return kernel
    limit = Budget.of(budget, default_trials=32)
    session = AttentionSession(problem, db, target, seed, jobs, progress, timer, limit.trials)
    session.run(limit)
    return session.finish(confirm, confirm_rounds)


__all__ = ["ATTENTION_VERSION", "DEFAULTS", "AttentionBuilder", "AttentionKernel", "AttentionProblem",
           "AttentionSession", "attention_plan", "attention_space", "autoschedule_attention", "build_attention",
           "fused_attention_problem", "rebuild_attention"]
