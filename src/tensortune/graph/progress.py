"""Progress of a whole model's tuning: one bar for the model, one line per task (rich, stderr).

The model's line shows trials spent of the budget and the estimated latency of the
whole model (the weighted sum of every task's best kernel); each task's line shows its
weight, trials and best time. Without a terminal (CI, logs) a plain line is printed per
round of the task scheduler instead.

Example:
    >>> p = ModelProgress(["mm 4x8"], [2], total=8, enabled=False)
    >>> with p:
    ...     p.round("mm 4x8", 4, 1e-6)
    >>> p.trials["mm 4x8"], p.best["mm 4x8"]
    (4, 1e-06)
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence

from ..progress import format_time


class ModelProgress:
    """Tracks and shows the task scheduler's rounds (see the module docstring)."""

    def __init__(self, labels: Sequence[str], weights: Sequence[float], total: int | None, enabled: bool = True,
                 title: str = "model") -> None:
        self.labels = list(labels)
        self.weights = dict(zip(labels, weights))
        self.total = total
        self.title = title
        self.trials = {label: 0 for label in labels}
        self.best = {label: math.inf for label in labels}
        self.enabled = enabled and sys.stderr is not None
        self.live = self.enabled and sys.stderr.isatty()
        self._progress = None
        self._ids: dict[str, int] = {}

    @property
    def estimate(self) -> float:
        """The model's latency if every task ran its best kernel so far (inf until all ran)."""
        return sum(self.weights[k] * self.best[k] for k in self.labels)

    def __enter__(self) -> "ModelProgress":
        if self.live:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TextColumn("{task.fields[info]}"), TimeElapsedColumn(),
                                      console=Console(stderr=True))
            self._progress.__enter__()
            self._ids["model"] = self._progress.add_task(f"[bold]{self.title}", total=self.total, info="")
            for label in self.labels:
                self._ids[label] = self._progress.add_task(f"  x{self.weights[label]:g} {label}", total=None,
                                                           info="")
        return self

    def round(self, label: str, trials: int, best: float) -> None:
        self.trials[label] += trials
        self.best[label] = min(self.best[label], best)
        done = sum(self.trials.values())
        estimate = format_time(self.estimate)
        if self._progress is not None:
            self._progress.update(self._ids["model"], completed=done, info=f"model ~{estimate}")
            self._progress.update(self._ids[label], completed=self.trials[label],
                                  info=f"best {format_time(self.best[label])}")
        elif self.enabled:
            total = f"/{self.total}" if self.total else ""
            print(f"[{done}{total}] {label}: +{trials} trials, best {format_time(self.best[label])}; "
                  f"model ~{estimate}", file=sys.stderr, flush=True)

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.__exit__(None, None, None)
