"""The `model` job kind: a whole PyTorch model, compiled and tuned by a worker.

Its spec is what `tensortune model tune` takes: a factory (`MODULE:NAME`, importable on
every worker's host) that returns a model or (model, example_inputs), input specs such
as `1x1024:int64:0-50257`, and the target. The worker runs `tensortune.compile` with the
job's trials (or seconds) as its budget and its own store as the records database, so
every kernel's measurements are recorded under the workload a user's later compile of
the same architecture reads. A model job is not one space driven by one `Tuner`: it is
one unit of work, held by one worker under the job's lease.

Example:
    >>> check_model_spec({"factory": "mypkg.models:small_mlp", "inputs": ["4x64"], "target": "cpu"})
    {'factory': 'mypkg.models:small_mlp', 'inputs': ['4x64'], 'target': 'cpu', 'prologues': 'measure'}
    >>> check_model_spec({"factory": "small_mlp", "target": "cpu"})
    Traceback (most recent call last):
    ...
    ValueError: model job spec: "factory" must be MODULE:NAME (or FILE.py:NAME), got 'small_mlp'
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..model_inputs import load_model, parse_input, tensors_device

if TYPE_CHECKING:
    from ..graph.report import CompileReport

TARGETS = ("cpu", "cuda")
PROLOGUES = ("fuse", "materialize", "measure")
DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool")
_FACTORY = re.compile(r"^(?:[A-Za-z_][\w.]*|[^:]+\.py):[A-Za-z_][\w.]*$")
USAGE = ('model job spec: {"factory": "MODULE:NAME", "inputs": ["SHAPE[:DTYPE[:LOW-HIGH]]", ...], '
         '"target": "cpu" or "cuda", "prologues": "fuse", "materialize" or "measure" (optional)}')


def check_model_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec, checked without importing anything; a ValueError naming what is wrong."""
    unknown = sorted(set(spec) - {"factory", "inputs", "target", "prologues"})
    if unknown:
        raise ValueError(f"{USAGE}; unknown key(s) {unknown}")
    factory, inputs = spec.get("factory"), spec.get("inputs", [])
    target, prologues = spec.get("target"), spec.get("prologues", "measure")
    if not isinstance(factory, str) or not _FACTORY.match(factory):
        raise ValueError(f'model job spec: "factory" must be MODULE:NAME (or FILE.py:NAME), got {factory!r}')
    if not isinstance(inputs, list) or not all(isinstance(i, str) for i in inputs):
        raise ValueError(f'model job spec: "inputs" must be a list of strings such as "4x64:float32", got {inputs!r}')
    for text in inputs:
        dtype = parse_input(text)[1]  # a ValueError naming the input
        if dtype not in DTYPES:
            raise ValueError(f"model job spec: input {text!r}: unknown dtype {dtype!r}; known: {', '.join(DTYPES)}")
    if target not in TARGETS:
        raise ValueError(f'model job spec: "target" must be "cpu" or "cuda", got {target!r}')
    if prologues not in PROLOGUES:
        raise ValueError(f'model job spec: "prologues" must be one of {", ".join(PROLOGUES)}, got {prologues!r}')
    return {"factory": factory, "inputs": list(inputs), "target": target, "prologues": prologues}


def check_model_budget(budget: dict[str, Any]) -> int | float:
    """The compile budget of a model job: its trials (a whole number) or its seconds."""
    trials, seconds = budget.get("trials"), budget.get("seconds")
    if set(budget) - {"trials", "seconds"} or (trials is None) == (seconds is None):
        raise ValueError(f'a model job\'s budget is {{"trials": N}} or {{"seconds": S}} (not both), got {budget!r}')
    if trials is not None:
        if type(trials) is not int or trials < 1:
            raise ValueError(f"a model job's trials must be a whole number of at least 1, got {trials!r}")
        return trials
    if type(seconds) not in (int, float) or not seconds > 0:
        raise ValueError(f"a model job's seconds must be a positive number, got {seconds!r}")
    return float(seconds)


def describe_model(spec: dict[str, Any]) -> str:
    inputs = ", ".join(spec["inputs"]) or "its factory's inputs"
    return f"model {spec['factory']}({inputs}) on {spec['target']}"


@dataclass(frozen=True)
class ModelTuned:
    """What a model job's compile did."""

    trials: int  # candidates measured, over every task tuned
    tasks: int
    tuned: int  # tasks searched here
    from_records: int  # tasks built from the store's records
    fallbacks: int  # tasks whose every candidate failed (run by torch)

    def summary(self) -> str:
        return (f"{self.tasks} kernel task(s): {self.tuned} tuned, {self.from_records} from records"
                + (f", {self.fallbacks} run by torch" if self.fallbacks else ""))


def tune_model(spec: dict[str, Any], budget: int | float, db: Any, jobs: int | None = None) -> ModelTuned:
    """Build the model of `spec` and compile it with `budget` into the records store `db`.
    Raises what the factory or the compile raises (the job's failure)."""
    import torch

    from ..graph import compile as compile_model

    model, examples = load_model(spec["factory"], spec["inputs"], tensors_device(spec["target"]))
    torch._dynamo.reset()  # a worker compiles many models: dynamo's recompile limit is per process
    compiled = compile_model(model, examples, target=spec["target"], budget=budget, db=db, progress=False,
                             prologues=spec["prologues"], jobs=jobs)
    return model_tuned(compiled.reports)


def model_tuned(reports: "Sequence[CompileReport]") -> ModelTuned:
    """What the compile of a model did, from the reports of its graphs. A kernel that
    several graphs share is one task, tuned once for them all: each graph's report shows
    that tuning's trials, or 0 when a graph compiled later built it from the records the
    tuning left. So a task counts its most trials, and it was tuned if any graph tuned
    it, else built from records if any graph was, else run by torch.

    Example:
        >>> from tensortune.graph.report import CompileReport, TaskReport
        >>> first = CompileReport("cpu", tasks=[TaskReport("mm 4x8", 1, 6, 1e-6, "tuned", key="mm")])
        >>> later = CompileReport("cpu", tasks=[TaskReport("mm 4x8", 1, 0, 1e-6, "records", key="mm")])
        >>> model_tuned([first, later])
        ModelTuned(trials=6, tasks=1, tuned=1, from_records=0, fallbacks=0)
    """
    trials: dict[str, int] = {}
    source: dict[str, str] = {}
    for task in (t for r in reports for t in r.tasks):
        key = task.key or task.label
        trials[key] = max(trials.get(key, 0), task.trials)
        if key not in source or _rank(task.source) < _rank(source[key]):
            source[key] = task.source
    return ModelTuned(trials=sum(trials.values()), tasks=len(source),
                      tuned=sum(1 for s in source.values() if s == "tuned"),
                      from_records=sum(1 for s in source.values() if s == "records"),
                      fallbacks=sum(1 for s in source.values() if s.startswith("torch")))


def _rank(source: str) -> int:
    """Which of a kernel's pieces says how the job got it: tuned, then records, then torch."""
    return {"tuned": 0, "records": 1}.get(source, 2)
