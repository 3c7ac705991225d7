"""The queue of tuning jobs kept in the shared records store.

A job says what to tune (a kind and a spec a worker can rebuild it from), with a budget
and a strategy. A worker takes the oldest job that is queued, or running under a lease
that expired (its worker died), in one atomic claim: `SELECT ... FOR UPDATE SKIP LOCKED`
on PostgreSQL, a write transaction on SQLite. While it tunes, it renews the lease; a job
taken again resumes from what the store holds. A job whose workers died `max_attempts`
times is marked failed rather than taken forever.

Example:
    >>> from tensortune.db import Database
    >>> q = JobQueue(Database(":memory:"))
    >>> q.enqueue("c_matmul", {"m": 64, "n": 64, "k": 64}, {"trials": 8})
    1
    >>> job = q.claim("worker-a", lease_seconds=60)
    >>> job.id, job.status, q.claim("worker-b", lease_seconds=60)
    (1, 'running', None)
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, or_, select, text, update

from ..db import Database
from ..db.schema import jobs
from .kinds import identity

STATUSES = ("queued", "running", "done", "failed")
MAX_ATTEMPTS = 3


@dataclass(frozen=True)
class Job:
    """One row of the queue (as read; the store holds the truth)."""

    id: int
    kind: str
    spec: dict[str, Any]
    budget: dict[str, Any]
    strategy: str
    status: str
    owner: str
    attempts: int
    trials_done: int
    lease_expires: float | None
    created_at: float
    started_at: float | None
    finished_at: float | None
    workload_id: int | None
    target_id: int | None
    message: str


def spec_digest(kind: str, spec: dict[str, Any], budget: dict[str, Any], strategy: str) -> str:
    """What the same job has in common: its kind's identity of the spec (the spec itself,
    or for a triton job of a production key the kernel and the key), budget and strategy."""
    text = json.dumps([kind, identity(kind, spec), budget, strategy], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class JobQueue:
    """Jobs in `db` (SQLite or PostgreSQL); every method is one transaction."""

    def __init__(self, db: Database, max_attempts: int = MAX_ATTEMPTS) -> None:
        self.db = db
        self.max_attempts = max_attempts

    def enqueue(self, kind: str, spec: dict[str, Any], budget: dict[str, Any], strategy: str = "auto") -> int:
        """Add a job and return its id; the same job (kind, spec, budget, strategy) already
        queued or running is not added twice (its id is returned), also when many processes
        add it at once."""
        digest = spec_digest(kind, spec, budget, strategy)
        with self.db.transaction() as conn:
            if conn.dialect.name == "postgresql":  # SQLite's write lock serializes enqueues already
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": int(digest[:15], 16)})
            same = conn.execute(select(jobs.c.id).where(jobs.c.spec_digest == digest,
                                                        jobs.c.status.in_(("queued", "running")))).first()
            if same:
                return int(same[0])
            row = conn.execute(jobs.insert().values(
                kind=kind, spec_json=json.dumps(spec, sort_keys=True), spec_digest=digest,
                budget_json=json.dumps(budget, sort_keys=True), strategy=strategy, status="queued",
                owner="", attempts=0, trials_done=0, created_at=time.time(), message="").returning(jobs.c.id)).first()
            return int(row[0])

    def claim(self, owner: str, lease_seconds: float) -> Job | None:
        """Take the oldest job that is queued or whose lease expired, for `lease_seconds`;
        None when there is none. Two workers never take the same job."""
        while True:
            now = time.time()
            with self.db.transaction() as conn:
                takeable = or_(jobs.c.status == "queued",
                               and_(jobs.c.status == "running", jobs.c.lease_expires < now))
                row = conn.execute(select(jobs.c.id, jobs.c.attempts, jobs.c.status).where(takeable)
                                   .order_by(jobs.c.id).limit(1).with_for_update(skip_locked=True)).first()
                if row is None:
                    return None
                job_id, attempts, status = row
                if status == "running" and attempts >= self.max_attempts:
                    conn.execute(update(jobs).where(jobs.c.id == job_id).values(
                        status="failed", finished_at=now, owner="",
                        message=f"its worker was lost {attempts} times (lease expired); not taken again"))
                    continue  # committed by leaving the block; look for the next job
                conn.execute(update(jobs).where(jobs.c.id == job_id).values(
                    status="running", owner=owner, lease_expires=now + lease_seconds, attempts=attempts + 1,
                    started_at=now))
            return self.get(job_id)

    def renew(self, job_id: int, owner: str, lease_seconds: float, trials_done: int | None = None) -> bool:
        """Extend the lease; False when the job is no longer this owner's (its lease
        expired and another worker took it)."""
        values: dict[str, Any] = {"lease_expires": time.time() + lease_seconds}
        if trials_done is not None:
            values["trials_done"] = trials_done
        return self.db.write(update(jobs).where(jobs.c.id == job_id, jobs.c.owner == owner,
                                                jobs.c.status == "running").values(**values)) == 1

    def attach(self, job_id: int, owner: str, workload_id: int, target_id: int) -> None:
        """Say which workload and target the job tunes (for `queue list`'s savings)."""
        self.db.write(update(jobs).where(jobs.c.id == job_id, jobs.c.owner == owner)
                      .values(workload_id=workload_id, target_id=target_id))

    def finish(self, job_id: int, owner: str, status: str = "done", message: str = "") -> bool:
        """Mark the job done (or failed, with why) if it is still this owner's."""
        if status not in ("done", "failed"):
            raise ValueError(f"a job finishes as done or failed, not {status!r}")
        return self.db.write(update(jobs).where(jobs.c.id == job_id, jobs.c.owner == owner,
                                                jobs.c.status == "running")
                             .values(status=status, finished_at=time.time(), message=message[:2000],
                                     lease_expires=None)) == 1

    def give_back(self, job_id: int, owner: str) -> bool:
        """Queue a job again at once (its worker was interrupted), keeping what it measured."""
        return self.db.write(update(jobs).where(jobs.c.id == job_id, jobs.c.owner == owner,
                                                jobs.c.status == "running")
                             .values(status="queued", owner="", lease_expires=None)) == 1

    def get(self, job_id: int) -> Job:
        rows = self._jobs(jobs.c.id == job_id)
        if not rows:
            raise KeyError(f"no job {job_id} in {self.db.where}")
        return rows[0]

    def list(self, status: str | None = None) -> list[Job]:
        return self._jobs(jobs.c.status == status) if status else self._jobs()

    def _jobs(self, *where: Any) -> list[Job]:
        cols = (jobs.c.id, jobs.c.kind, jobs.c.spec_json, jobs.c.budget_json, jobs.c.strategy, jobs.c.status,
                jobs.c.owner, jobs.c.attempts, jobs.c.trials_done, jobs.c.lease_expires, jobs.c.created_at,
                jobs.c.started_at, jobs.c.finished_at, jobs.c.workload_id, jobs.c.target_id, jobs.c.message)
        out = []
        for r in self.db.query(select(*cols).where(*where).order_by(jobs.c.id)):
            spec, budget = _json_object(r[2], r[0], "spec"), _json_object(r[3], r[0], "budget")
            out.append(Job(int(r[0]), str(r[1]), spec, budget, *r[4:]))
        return out


def _json_object(text: str, job_id: int, what: str) -> dict[str, Any]:
    """A job's spec or budget, which must be a JSON object (a damaged row is not trusted)."""
    try:
        value = json.loads(text)
    except (ValueError, TypeError, RecursionError):
        value = None
    if not isinstance(value, dict):
        return {"damaged": f"job {job_id}: its {what} is not a JSON object"}
    return value
