"""Job kinds: how a worker rebuilds what a job tunes from its spec (plain JSON).

A kind maps a spec to a `Tuning`: the space, the builder and runner, the workload and
target its records go under, and the default configuration whose time the savings are
measured against. A spec is read from the shared store, so it is checked before
anything is built from it.

Example:
    >>> check_spec("c_matmul", {"m": 64, "n": 32, "k": 16})
    {'m': 64, 'n': 32, 'k': 16}
    >>> check_spec("c_matmul", {"m": 64})
    Traceback (most recent call last):
    ...
    ValueError: c_matmul job spec: needs m, n and k (whole numbers 1..8192), got {'m': 64}
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..db import Target, Workload
from ..measure import Builder, Runner
from ..space import Config, Space
from .model_job import check_model_budget, check_model_spec, describe_model, tune_model
from .triton_job import check_triton_budget, check_triton_spec, describe_triton, triton_identity, tune_triton


@dataclass
class Tuning:
    """What one job tunes; `close()` ends its builder's and runner's processes."""

    space: Space
    runner: Runner
    builder: Builder | None
    workload: Workload
    target: Target
    default: Config | None
    description: str
    closers: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        for close in self.closers:
            close()


@dataclass(frozen=True)
class JobKind:
    """A kind is either tuned by the ordinary loop (`make` gives its `Tuning`), or is one
    unit of work that tunes itself (`run`: checked spec, budget, store, build processes ->
    a result with `trials` and `summary()`, as the `model` kind's compile)."""

    check: Callable[[dict[str, Any]], dict[str, Any]]
    make: Callable[[dict[str, Any], int | None], Tuning] | None  # (checked spec, build processes)
    describe: Callable[[dict[str, Any]], str]
    run: Callable[[dict[str, Any], dict[str, Any], Any, int | None], Any] | None = None
    check_budget: Callable[[dict[str, Any]], Any] | None = None  # a kind's own rules for a job's budget
    identity: Callable[[dict[str, Any]], Any] | None = None  # what two same jobs share (default: the spec)
    default_budget: dict[str, Any] = field(default_factory=lambda: {"trials": 32})  # `queue add` without one


JOB_KINDS: dict[str, JobKind] = {}


def register_job_kind(name: str, kind: JobKind) -> None:
    JOB_KINDS[name] = kind


def check_spec(kind: str, spec: Any) -> dict[str, Any]:
    """The spec of a job of `kind`, checked; a ValueError saying what is wrong."""
    if kind not in JOB_KINDS:
        raise ValueError(f"unknown job kind {kind!r}; known: {', '.join(sorted(JOB_KINDS))}")
    if not isinstance(spec, dict):
        raise ValueError(f"{kind} job spec: a JSON object, got {spec!r}")
    return JOB_KINDS[kind].check(spec)


def make_tuning(kind: str, spec: Any, jobs: int | None = None) -> Tuning:
    checked = check_spec(kind, spec)
    make = JOB_KINDS[kind].make
    if make is None:
        raise ValueError(f"a {kind} job is not tuned by the ordinary loop")
    return make(checked, jobs)


def check_budget(kind: str, budget: dict[str, Any]) -> None:
    """A ValueError when `budget` does not suit jobs of `kind` (beyond what `Budget` checks)."""
    rule = JOB_KINDS[kind].check_budget if kind in JOB_KINDS else None
    if rule is not None:
        rule(budget)


def identity(kind: str, spec: dict[str, Any]) -> Any:
    """What the queue dedupes jobs of `kind` by (the spec, unless the kind says otherwise)."""
    same = JOB_KINDS[kind].identity if kind in JOB_KINDS else None
    return same(spec) if same is not None else spec


def describe(kind: str, spec: dict[str, Any]) -> str:
    try:
        return JOB_KINDS[kind].describe(check_spec(kind, spec))
    except (KeyError, ValueError):
        return f"{kind} {spec}"


# ---- the C matmul template (the demo's kernel) ----------------------------------------------
def _check_c_matmul(spec: dict[str, Any]) -> dict[str, Any]:
    dims = {d: spec.get(d) for d in "mnk"}
    if set(spec) != set("mnk") or not all(type(v) is int and 1 <= v <= 8192 for v in dims.values()):
        raise ValueError(f"c_matmul job spec: needs m, n and k (whole numbers 1..8192), got {spec!r}")
    return dims


def _make_c_matmul(spec: dict[str, Any], jobs: int | None) -> Tuning:
    from ..backends import CBuilder, CRunner
    from ..demo.matmul import default_config, matmul_problem, matmul_space
    from ..measure import Timer

    m, n, k = spec["m"], spec["n"], spec["k"]
    problem = matmul_problem(m, n, k)
    # the workload `tensortune demo` records under, so the two share their measurements
    workload = Workload.make("demo.matmul_c", problem.source, {"M": m, "N": n, "K": k, "dtype": "float32"})
    runner = CRunner(problem, Timer(warmup_seconds=0.02, min_repeats=5, budget_seconds=0.15))
    builder = CBuilder(problem, jobs=jobs)
    return Tuning(matmul_space(), runner, builder, workload, Target.cpu(), default_config(),
                  f"matmul {m}x{n}x{k}", [runner.close, builder.close])


register_job_kind("c_matmul", JobKind(_check_c_matmul, _make_c_matmul,
                                      lambda s: f"C matmul {s['m']}x{s['n']}x{s['k']}"))


# ---- tensor expressions auto-scheduled on the CPU -----------------------------------------
TE_WORKLOADS = ("matmul", "batch_matmul", "matmul_bias_relu", "conv2d_nchw", "depthwise_conv2d_nchw", "softmax",
                "layer_norm", "transpose")  # functions of tensortune.te.workloads a job may name


def _check_te_cpu(spec: dict[str, Any]) -> dict[str, Any]:
    usage = (f"te_cpu job spec: {{\"workload\": one of {', '.join(TE_WORKLOADS)}, \"args\": [whole numbers], "
             f"\"kwargs\": {{name: number or string}} (optional)}}")
    name, args, kwargs = spec.get("workload"), spec.get("args"), spec.get("kwargs", {})
    if set(spec) - {"workload", "args", "kwargs"} or name not in TE_WORKLOADS or not isinstance(args, list) \
            or not all(type(a) is int and 1 <= a <= 8192 for a in args) or not isinstance(kwargs, dict) \
            or not all(isinstance(k, str) and type(v) in (int, float, str) for k, v in kwargs.items()):
        raise ValueError(f"{usage}, got {spec!r}")
    return {"workload": name, "args": list(args), "kwargs": dict(kwargs)}


def _make_te_cpu(spec: dict[str, Any], jobs: int | None) -> Tuning:
    from ..autoschedule.api import Problem
    from ..autoschedule.measure import CheckSpec, SketchBuilder, SketchRunner
    from ..te import workloads

    try:
        problem = Problem.of(getattr(workloads, spec["workload"])(*spec["args"], **spec["kwargs"]))
    except Exception as exc:  # noqa: BLE001 - a spec te cannot build is the job's failure, said why
        raise ValueError(f"te_cpu job spec {spec}: {type(exc).__name__}: {exc}") from exc
    check = CheckSpec.of(problem.outputs, problem.args, problem.workload.source_hash)
    runner = SketchRunner(check)
    builder = SketchBuilder(problem.sketch_space, problem.args, jobs=jobs or 2)
    # the workload and target `te.autoschedule(..., target="cpu")` records under
    return Tuning(problem.sketch_space.space, runner, builder, problem.workload, Target.cpu(), None,
                  f"te {problem.name}", [runner.close])


register_job_kind("te_cpu", JobKind(_check_te_cpu, _make_te_cpu,
                                    lambda s: f"te {s['workload']}{tuple(s['args'])} on the CPU"))


# ---- whole PyTorch models, compiled by `tensortune.compile` (model_job.py) -----------------
def _run_model(spec: dict[str, Any], budget: dict[str, Any], db: Any, jobs: int | None) -> Any:
    return tune_model(spec, check_model_budget(budget), db, jobs)


register_job_kind("model", JobKind(check_model_spec, None, describe_model, run=_run_model,
                                   check_budget=check_model_budget))


# ---- one shape of an autotuned Triton kernel (triton_job.py) -------------------------------
def _run_triton(spec: dict[str, Any], budget: dict[str, Any], db: Any, jobs: int | None) -> Any:
    check_triton_budget(budget)
    return tune_triton(spec, budget, db, jobs)


register_job_kind("triton", JobKind(check_triton_spec, None, describe_triton, run=_run_triton,
                                    check_budget=check_triton_budget, identity=triton_identity, default_budget={}))
