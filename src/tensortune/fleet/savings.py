"""What tuning a job found: its best time against its default (or first) configuration.

Example:
    >>> Savings(2e-3, 5e-4).speedup
    4.0
"""

from __future__ import annotations

from dataclasses import dataclass

from ..db import Database
from .queue import Job


@dataclass(frozen=True)
class Savings:
    baseline: float | None  # seconds of the default configuration (else the first measured)
    best: float | None  # seconds of the fastest configuration whose standing is a success

    @property
    def speedup(self) -> float | None:
        return self.baseline / self.best if self.baseline and self.best else None

    @property
    def saved(self) -> float | None:
        """The fraction of the baseline's time saved."""
        return 1 - self.best / self.baseline if self.baseline and self.best else None


def job_savings(db: Database, job: Job) -> Savings:
    if job.workload_id is None or job.target_id is None:
        return Savings(None, None)
    keys = db.keys_of(job.workload_id, job.target_id)
    if keys is None:
        return Savings(None, None)
    workload, target = keys
    best = db.best(workload, target)
    ok = [r for r in db.records(workload, target) if r.ok]
    baselines = [r for r in ok if r.strategy == "baseline"] or ok[:1]
    return Savings(baselines[-1].time if baselines else None, best.time if best else None)
