"""A progress bar with trials done, best so far and elapsed time (rich, on stderr).

With a number of trials to run it shows `done/total`; with only a time budget it shows
the trials done and the elapsed time, never a total it cannot know. `finish()` ends the
bar at the trials actually run (a space smaller than the budget ends early, full).

Example:
    >>> with TuneProgress(total=3, enabled=False) as p:
    ...     p.update(best=1e-3)
    ...     p.finish()
"""

from __future__ import annotations

import math
import sys

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn


def format_time(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3f} {unit}"
    return f"{seconds * 1e9:.1f} ns"


class TuneProgress:
    def __init__(self, total: int | None, description: str = "tuning", enabled: bool = True,
                 console: Console | None = None) -> None:
        self.enabled = enabled and sys.stderr is not None
        self.console = console
        self.description = description
        self.total = total
        self._progress: Progress | None = None
        self._task = None
        self.failed = 0

    def __enter__(self) -> "TuneProgress":
        if self.enabled:
            count: ProgressColumn = (MofNCompleteColumn() if self.total is not None
                                     else TextColumn("{task.completed:.0f} trials"))
            self._progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), count,
                TextColumn("best median {task.fields[best]}"), TextColumn("failed {task.fields[failed]}"),
                TimeElapsedColumn(), console=self.console or Console(stderr=True), transient=False,
            )
            self._progress.__enter__()
            self._task = self._progress.add_task(escape(self.description), total=self.total, best="-", failed=0)
        return self

    def update(self, best: float, failed: bool = False, advance: int = 1) -> None:
        self.failed += int(failed)
        if self._progress is not None:
            self._progress.update(self._task, advance=advance, best=format_time(best), failed=self.failed)

    def finish(self) -> None:
        """The run ended normally: the bar ends full, at the trials run."""
        if self._progress is not None:
            done = self._progress.tasks[0].completed
            self._progress.update(self._task, total=done, completed=done)

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.__exit__(None, None, None)
