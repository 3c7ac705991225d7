"""Tuning a model's tasks under one budget, and rebuilding them from the records.

Each task's kernel is searched by the target (`CpuTarget.search`, `CudaTarget.search`);
the task scheduler (`tensortune.tasks`, Ansor's gradient policy by default) decides
which task gets the next round of trials. A task with a recorded winner in the database
is built from it without measuring, unless `retune`. A task whose every candidate
failed is evaluated by torch instead, and the report says so.

Example:
    >>> split_budget(100, 3), split_budget(None, 3), split_budget(2, 3)
    (100, 96, 3)
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .progress import ModelProgress
from .tasks import GraphTask

TRIALS_PER_TASK = 32  # the default budget: this many trials for each task that needs tuning


@dataclass
class TuneOutcome:
    """What tuning gave each task: a built kernel, or why there is none."""

    built: dict[str, Any] = field(default_factory=dict)  # task key -> built kernel
    searches: dict[str, Any] = field(default_factory=dict)
    from_db: set[str] = field(default_factory=set)
    failed: dict[str, str] = field(default_factory=dict)  # task key -> reason
    trials: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def covers(self, key: str) -> bool:
        return key in self.searches

    def joined(self, other: "TuneOutcome") -> "TuneOutcome":
        """This outcome with `other`'s tasks added (the seconds are `other`'s: this one's
        were spent and reported before)."""
        return TuneOutcome({**self.built, **other.built}, {**self.searches, **other.searches},
                           self.from_db | other.from_db, {**self.failed, **other.failed},
                           {**self.trials, **other.trials}, other.seconds)


def best_time(built: Any) -> float:
    """A built kernel's measured seconds (nan when it has none)."""
    t = getattr(built, "time", None)
    if t is None:
        t = getattr(getattr(built, "tuning", None), "best_time", None)
    return float("nan") if t is None else float(t)


def split_budget(budget: int | None, tasks: int) -> int:
    """The trials for `tasks` tasks: the budget, at least one trial each (default 32 each)."""
    if budget is None:
        return TRIALS_PER_TASK * tasks
    return max(int(budget), tasks)


def tune_tasks(tasks: Sequence[GraphTask], target: Any, *, db: Any, budget: int | float | None = None,
               seed: int = 0, retune: bool = False, progress: bool = True, policy: str = "gradient",
               trials_per_round: int = 8, title: str = "model") -> TuneOutcome:
    """Build every task's kernel: from the records, or by tuning under one `budget`
    (trials in total, or seconds as a float)."""
    from ..tasks import Task, TaskScheduler
    from ..tuner import Budget

    start = time.perf_counter()
    out = TuneOutcome()
    todo: list[GraphTask] = []
    for k, t in enumerate(tasks):
        search = target.search(t.kernel, db=db, seed=seed + k, budget_hint=None)
        out.searches[t.key] = search
        recorded = None if retune else _try(search.recorded)
        if recorded is not None:
            out.built[t.key] = recorded
            out.from_db.add(t.key)
        else:
            todo.append(t)
    if todo:
        names = _unique([t.label for t in todo])
        if isinstance(budget, float):
            limit = Budget(seconds=budget)
            per_round = trials_per_round
        else:
            trials = split_budget(budget, len(todo))
            limit = Budget(trials=trials)
            per_round = max(1, min(trials_per_round, trials // len(todo)))
        show = ModelProgress(names, [t.weight for t in todo], limit.trials, enabled=progress, title=title)
        scheduler_tasks = [Task(name, out.searches[t.key].tune, weight=t.weight, flops=out.searches[t.key].flops,
                                group=_group(t)) for name, t in zip(names, todo)]
        at_once = target.rounds_at_once(per_round, len(todo)) if hasattr(target, "rounds_at_once") else 1
        with show:
            result = TaskScheduler(scheduler_tasks, budget=limit, policy=policy, trials_per_round=per_round,
                                   seed=seed, callbacks=[lambda r: show.round(r.task, r.trials, r.best)],
                                   concurrency=at_once).run()
        for name, t in zip(names, todo):
            out.trials[t.key] = result.trials.get(name, 0)
            try:
                built = out.searches[t.key].finish()
            except Exception as exc:  # noqa: BLE001 - the task's failure, reported; the model still runs
                out.failed[t.key] = f"{type(exc).__name__}: {exc}"
                continue
            if built is None:
                out.failed[t.key] = "no candidate was measured"
            else:
                out.built[t.key] = built
    for search in out.searches.values():
        search.close()
    out.seconds = time.perf_counter() - start
    return out


def _try(fn: Any) -> Any:
    try:
        return fn()
    except Exception:  # noqa: BLE001 - a record that no longer builds is tuned again
        return None


def _unique(labels: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label} #{seen[label]}")
    return out


def _group(task: GraphTask) -> str:
    """Tasks that differ only in shapes share a group (the scheduler compares their throughput)."""
    text = re.sub(r"\d+", "#", task.kernel.text)
    return hashlib.sha256(text.encode()).hexdigest()[:12]
