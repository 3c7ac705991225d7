"""A task: one kernel to tune, how much it matters, and how to give it more trials.

The task scheduler only needs each task to measure some more candidates when asked
(`tune(trials)`) and to report what it measured; everything else (spaces, builders,
runners, the database) stays inside the task's own tuner.

Example:
    >>> from tensortune.measure import MeasureResult
    >>> from tensortune.space import Config
    >>> t = Task("add", lambda n: [MeasureResult(Config(i=i), (1.0 / (i + 1),)) for i in range(n)])
    >>> [r.time for r in t.tune(2)]
    [1.0, 0.5]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..measure import MeasureResult
from ..tuner import Budget, Tuner


@runtime_checkable
class TaskTuner(Protocol):
    """Anything that can measure up to `trials` more candidates of one kernel."""

    def tune(self, trials: int) -> Sequence[MeasureResult]:
        """The results of the candidates measured now; an empty list means nothing is left."""


@dataclass(frozen=True)
class Task:
    """One kernel among many tuned under one budget.

    `weight` is how often the kernel runs in the whole program (the scheduler minimises
    the weighted sum of latencies), `flops` its work per call and `group` a tag shared
    by similar kernels (same operator, other shapes): a task's expected latency is
    bounded by the best throughput reached in its group.
    """

    name: str
    tuner: "TaskTuner | Callable[[int], Sequence[MeasureResult]]"
    weight: float = 1.0
    flops: float = 0.0
    group: str = ""

    def __post_init__(self) -> None:
        if not self.weight > 0:
            raise ValueError(f"task {self.name!r}: weight must be positive, got {self.weight}")
        if self.flops < 0:
            raise ValueError(f"task {self.name!r}: flops must not be negative, got {self.flops}")

    def tune(self, trials: int) -> list[MeasureResult]:
        tuner = self.tuner
        results = tuner.tune(trials) if isinstance(tuner, TaskTuner) else tuner(trials)
        return list(results)


class TunerTask:
    """Adapts a `Tuner` to `TaskTuner`: each call runs it for `trials` more measurements.

    The tuner keeps its strategy (and cost model) between calls, so the search goes on
    where it stopped; with a database, each call is one session in it.
    """

    def __init__(self, tuner: Tuner, seconds_per_call: float | None = None) -> None:
        self.tuner = tuner
        self.seconds_per_call = seconds_per_call
        self.results: list[MeasureResult] = []

    def tune(self, trials: int) -> list[MeasureResult]:
        self.tuner.budget = Budget(trials=trials, seconds=self.seconds_per_call)
        result = self.tuner.run()
        new = list(result.history[result.reused:])
        self.results.extend(new)
        return new
