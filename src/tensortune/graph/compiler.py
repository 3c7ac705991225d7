"""Compiling one captured graph: lower, cut, tune, plan, check, report.

    captured graph --lower--> te stages --sink_views--> --partition--> kernels --tasks-->
        tune (task scheduler, records) --> plan (kernels in order, buffers once) --> check vs eager

The check runs every compile: a model whose outputs differ from eager torch beyond the
tolerance is not returned as is. A kernel that disagrees with its own expressions on the
model's data is that task's error: its kernel is replaced by torch's evaluation of the
same expressions and the report says so; an op whose lowering disagrees with ATen runs
as its ATen call. A graph that still fails raises `CompileError`.

Example:
    >>> import torch
    >>> from tensortune.graph.capture import capture
    >>> [cap] = capture(lambda x: torch.relu(x) * 2, [torch.randn(4, 8)])
    >>> g = compile_graph(cap, CompileOptions(budget=1, db=":memory:", progress=False))   # doctest: +SKIP
    >>> g.report.kernels                                                                 # doctest: +SKIP
    1
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .capture import Captured
from .check import CheckResult, check, wrong_kernels, wrong_op
from .ir import Graph
from .kernel import KernelGraph
from .lower import Lowerer
from .partition import Partition, default_partition
from .report import CompileReport, FallbackReport, TaskReport, profile
from .runtime import KernelStep, Plan
from .simplify import sink_views
from .targets import make_target, reference_step
from .tasks import GraphTask, collect_tasks
from .tune import TuneOutcome, best_time, tune_tasks


PROLOGUES = ("fuse", "materialize", "measure")


class CompileError(RuntimeError):
    """A model that could not be compiled correctly; the message says what failed."""


@dataclass(frozen=True)
class CompileOptions:
    """How to compile: target ("cpu", "cuda" or None for the inputs' device), `budget`
    (trials for the whole graph, default 32 per task to tune; a float is seconds), the
    records database, whether to `retune` recorded tasks, `check` against eager torch,
    and CUDA graphs for the GPU (replayed when the inputs stay where they were).
    `prologues`: cheap work that several contractions read (a norm's scaling) is
    recomputed in their loads ("fuse"), written once by a kernel of its own
    ("materialize"), or both cuts are tuned and the one whose kernels' measured times
    add up to less is kept ("measure", the default).

    `executor`/`ray_address`: where the kernels are built and measured (CPU or GPU)
    ("local", or "ray": docs/distributed.md)."""

    target: str | None = None
    budget: int | float | None = None
    db: Any = None
    seed: int = 0
    jobs: int | None = None
    retune: bool = False
    check: bool = True
    progress: bool | None = None
    cuda_graphs: bool = True
    policy: str = "gradient"
    trials_per_round: int = 8
    force_fallback: frozenset[str] = field(default_factory=frozenset)
    prologues: str = "measure"

    def __post_init__(self) -> None:
        if self.prologues not in PROLOGUES:
            raise ValueError(f"prologues must be one of {list(PROLOGUES)}, not {self.prologues!r}")
    executor: Any = None
    ray_address: str | None = None

    @staticmethod
    def of(options: dict[str, Any] | None) -> "CompileOptions":
        opts = dict(options or {})
        unknown = set(opts) - set(CompileOptions.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown tensortune option(s) {sorted(unknown)}; known: "
                             f"{sorted(CompileOptions.__dataclass_fields__)}")
        return CompileOptions(**opts)


class CompiledGraph:
    """A compiled graph: call it like the graph (a tuple of outputs); `.report` says how it was made."""

    def __init__(self, plan: Plan, report: CompileReport, graph_runner: Any = None,
                 workloads: Sequence[Any] = ()) -> None:
        self.plan = plan
        self.report = report
        self._runner = graph_runner
        self.workloads = list(workloads)  # the records database's workloads of its tasks

    def __call__(self, *args: Any) -> Any:
        if self._runner is not None:
            return self._runner(args)
        return self.plan.run(args)


@dataclass
class _Build:
    graph: Graph
    partition: Partition
    tasks: list[GraphTask]
    kernels: list[KernelGraph]
    outcome: TuneOutcome
    plan: Plan
    by_root: dict[int, GraphTask]
    decision: str = ""


def _open_db(db: Any) -> Any:
    from ..frontends.callable import open_db
    return open_db(db)


def _progress(progress: bool | None) -> bool:
    if progress is not None:
        return progress
    from ..settings import Settings
    return Settings.from_env().progress


def lower_graph(captured: Captured, force_fallback: frozenset[str] = frozenset()) -> Graph:
    lowerer = Lowerer(captured.gm, captured.example_inputs, captured.device_type)
    lowerer.force_fallback = set(force_fallback)
    return sink_views(lowerer.run().pruned())


@dataclass
class _Variant:
    """One cut of the graph and its kernels' tasks."""

    name: str
    partition: Partition
    legal: list[Any]
    illegal: list[Any]
    tasks: list[GraphTask]

    def estimate(self, outcome: TuneOutcome) -> float:
        """Seconds per call of its kernels by their measured times (nan when one is unknown)."""
        return sum(t.weight * best_time(outcome.built.get(t.key)) for t in self.tasks)


def _variants(graph: Graph, options: CompileOptions, target: Any) -> list[_Variant]:
    out: list[_Variant] = []
    for fuse in {"fuse": (True,), "materialize": (False,), "measure": (True, False)}[options.prologues]:
        partition = default_partition(graph, target.legal, multi_anchor=target.multi_anchor, prologues=fuse)
        if out and partition == out[0].partition:
            continue  # nothing to decide
        specs = partition.kernels(graph)
        legal = [s for s in specs if target.legal(graph, frozenset(s.nodes))]
        out.append(_Variant("prologues fused" if fuse else "prologues materialized", partition, legal,
                            [s for s in specs if s not in legal], collect_tasks(graph, legal)))
    return out


def _union(variants: Sequence[_Variant]) -> list[GraphTask]:
    tasks: dict[str, GraphTask] = {}
    for v in variants:
        for t in v.tasks:
            tasks.setdefault(t.key, t)
    return list(tasks.values())


def _choose(variants: Sequence[_Variant], outcome: TuneOutcome) -> tuple[_Variant, str]:
    """The variant whose kernels take least by their measured times, and what was decided."""
    if len(variants) == 1:
        return variants[0], ""
    from ..progress import format_time
    costs = [v.estimate(outcome) for v in variants]
    known = [(c, i) for i, c in enumerate(costs) if c == c]
    pick = min(known)[1] if known else 0
    said = ", ".join(f"{v.name} {format_time(c)}" for v, c in zip(variants, costs))
    return variants[pick], f"{variants[pick].name} (kernel time per call: {said})"


def _make_target(options: CompileOptions, device_type: str) -> Any:
    extra: dict[str, Any] = {"jobs": options.jobs} if options.jobs else {}
    if options.executor not in (None, "local") or options.ray_address is not None:
        extra.update(executor=options.executor, ray_address=options.ray_address)
    return make_target(options.target or device_type, **extra)


def _tune(tasks: Sequence[GraphTask], options: CompileOptions, target: Any, db: Any) -> TuneOutcome:
    return tune_tasks(tasks, target, db=db, budget=options.budget, seed=options.seed, retune=options.retune,
                      progress=_progress(options.progress), policy=options.policy,
                      trials_per_round=options.trials_per_round)


def tune_graphs(captures: Sequence[Captured], options: CompileOptions) -> TuneOutcome:
    """Tune the kernels of several graphs of one model under one budget: a kernel that
    occurs in several graphs is one task, weighted by all its occurrences, and the task
    scheduler spends `options.budget` where the whole model gains most. `compile_graph`
    then builds each graph from the outcome (`tuned=`)."""
    target = _make_target(options, captures[0].device_type)
    try:
        tasks: dict[str, GraphTask] = {}
        for captured in captures:
            for task in _union(_variants(lower_graph(captured, options.force_fallback), options, target)):
                if task.key in tasks:
                    tasks[task.key].occurrences.extend(task.occurrences)
                else:
                    tasks[task.key] = task
        return _tune(list(tasks.values()), options, target, _open_db(options.db))
    finally:
        target.close()


def _build(captured: Captured, options: CompileOptions, target: Any, db: Any,
           reference_tasks: set[str], tuned: TuneOutcome | None = None) -> _Build:
    graph = lower_graph(captured, options.force_fallback)
    variants = _variants(graph, options, target)
    tasks = _union(variants)
    if tuned is None:
        outcome = _tune(tasks, options, target, db)
    else:  # tuned with the model's other graphs; what that did not cover (a changed graph) is tuned here
        outcome = tuned.joined(_tune([t for t in tasks if not tuned.covers(t.key)], options, target, db))
    chosen, decision = _choose(variants, outcome)
    partition, illegal, tasks = chosen.partition, chosen.illegal, chosen.tasks
    steps: list[KernelStep] = []
    kernels: list[KernelGraph] = []
    by_root: dict[int, GraphTask] = {}
    for task in tasks:
        built = outcome.built.get(task.key)
        for k in task.occurrences:
            kernels.append(k)
            by_root[k.spec.root] = task
            name = f"{task.label} @{k.spec.root}"
            if built is None or task.key in reference_tasks:
                steps.append(reference_step(k, name))
            else:
                step = outcome.searches[task.key].step(built, k.spec.root, k.spec.inputs, name)
                step.task = task.key
                steps.append(step)
    for s in illegal:
        from .kernel import build_kernel
        k = build_kernel(graph, s)
        kernels.append(k)
        steps.append(reference_step(k, f"no kernel pattern @{s.root}"))
    plan = Plan.of(graph, steps, target.device, aliases=partition.aliases(graph))
    return _Build(graph, partition, tasks, kernels, outcome, plan, by_root, decision)


def compile_graph(captured: Captured, options: CompileOptions, tuned: TuneOutcome | None = None) -> CompiledGraph:
    """Compile one captured graph (see the module docstring); `tuned`: the outcome of
    `tune_graphs` over this graph and the model's others."""
    start = time.perf_counter()
    target = _make_target(options, captured.device_type)
    if (target.name == "cuda") != (captured.device_type == "cuda") and target.device != captured.device_type:
        raise CompileError(f"the inputs are on {captured.device_type} but the target is {target.name}; "
                           "move the model and inputs, or pass target=")
    db = _open_db(options.db)
    reference_tasks: set[str] = set()
    opts = options
    try:
        for _attempt in range(8):
            b = _build(captured, opts, target, db, reference_tasks, tuned)
            result = _check(b, captured) if opts.check else CheckResult(())
            if result.ok:
                break
            bad = wrong_kernels(b.plan, b.kernels, captured.example_inputs)
            bad_tasks = {s.task for s in bad if s.task} - reference_tasks
            if bad_tasks:
                reference_tasks |= bad_tasks
                continue
            op = wrong_op(b.graph, captured, captured.example_inputs)
            if op is None or op in opts.force_fallback:
                raise CompileError(f"the compiled graph differs from eager torch ({result.describe()}) and no "
                                   "kernel or op could be blamed")
            opts = replace(opts, force_fallback=opts.force_fallback | {op})
        else:
            raise CompileError(f"the compiled graph still differs from eager torch: {result.describe()}")
    finally:
        target.close()
    report = _report(b, target.name, captured, result, reference_tasks, time.perf_counter() - start)
    runner = None
    if options.cuda_graphs and b.plan.device == "cuda":
        from .cudagraphs import CudaGraphRunner
        runner = CudaGraphRunner(b.plan)
    return CompiledGraph(b.plan, report, runner, workloads=[s.workload for s in b.outcome.searches.values()])


def _check(b: _Build, captured: Captured) -> CheckResult:
    import torch
    with torch.no_grad():
        return check(lambda *xs: b.plan.run(xs), captured.gm, captured)


def _report(b: _Build, target: str, captured: Captured, result: CheckResult, reference_tasks: set[str],
            seconds: float) -> CompileReport:
    import torch
    with torch.no_grad():
        times = profile(b.plan, captured.example_inputs, b.plan.device)
    per_task: dict[str, float] = {}
    per_op: dict[tuple[str, str], list[float]] = {}
    other = 0.0
    for pos, step in enumerate(b.plan.steps):
        t = times.get(pos, 0.0)
        if isinstance(step, KernelStep):
            task = b.by_root.get(step.root)
            if task is None:
                per_op.setdefault(("te graph without a kernel pattern", "evaluated by torch"), []).append(t)
            else:
                per_task[task.key] = per_task.get(task.key, 0.0) + t
        elif step[0] == "torch":
            n = b.graph.nodes[step[1]]
            per_op.setdefault((n.op, n.reason), []).append(t)
        else:
            other += t
    tasks = []
    for task in b.tasks:
        out = b.outcome
        if task.key in reference_tasks:
            source = "torch (the kernel was wrong on the model's data)"
        elif task.key in out.failed:
            source = f"torch ({out.failed[task.key][:80]})"
        elif task.key in out.from_db:
            source = "records"
        else:
            source = "tuned"
        tasks.append(TaskReport(task.label, task.weight, out.trials.get(task.key, 0),
                                best_time(out.built.get(task.key)), source, per_task.get(task.key, 0.0), task.key))
    fallbacks = [FallbackReport(op, reason, len(ts), sum(ts)) for (op, reason), ts in per_op.items()]
    return CompileReport(target, tasks, fallbacks, other, b.outcome.seconds, seconds, len(b.kernels),
                         sum(n.kind == "te" for n in b.graph), result.describe(),
                         decisions=[b.decision] if b.decision else [])

