"""A worker: takes jobs from the queue, tunes each with the tuning loop, records results.

While a job runs, a heartbeat thread renews its lease and the worker's candidate
claims; a worker that finds its job taken by another (its lease ran out) stops tuning
it. `interrupt()` (SIGTERM, Ctrl-C) ends the search after the candidates in flight and
queues the job again. A worker that dies leaves its job and claims to expire: another worker takes the
job again and resumes from the store (every measurement is recorded the moment it
exists, and the budget counts what earlier attempts measured). A job of a kind that
tunes itself (a whole model's compile, a Triton kernel's shape: `JobKind.run`) is one
unit of work under the job's lease: the heartbeat renews it, and an interrupt lets it
finish. Every Tuner it makes (one per kernel) claims its candidates all the same
(`TunerClaims` through `tuner_scope`), and counts what it measures as the job's trials.

Example:
    >>> from tensortune.db import Database
    >>> Worker(Database(":memory:"), owner="w1").run(exit_when_idle=True)
    []
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from ..db import Database, DatabaseError
from ..measure import MeasureResult, NullBuilder
from ..search import create_strategy
from ..tuner import Budget, Tuner
from ..tuner_scope import outside_tuner_scopes, tuner_scope
from .claims import CandidateClaims, ClaimingStrategy, TunerClaims
from .kinds import JOB_KINDS, JobKind, Tuning, check_budget, check_spec, make_tuning
from .queue import Job, JobQueue


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class JobOutcome:
    job_id: int
    status: str  # done, failed, lost (another worker took it over) or interrupted (queued again)
    trials: int  # candidates this worker measured for it
    message: str = ""


class Worker:
    """Takes jobs from the queue in `db` until told to stop (or, with `exit_when_idle`,
    until none is left). `jobs`: build processes per job (the builder's default if None)."""

    def __init__(self, db: Database, owner: str | None = None, lease_seconds: float = 60.0,
                 jobs: int | None = None, poll_seconds: float = 2.0,
                 log: Callable[[str], None] = lambda line: None) -> None:
        if lease_seconds <= 0:
            raise ValueError(f"a lease is a positive number of seconds, got {lease_seconds}")
        self.db, self.queue = db, JobQueue(db)
        self.owner = owner or worker_name()
        self.lease_seconds, self.jobs, self.poll_seconds = lease_seconds, jobs, poll_seconds
        self.log = log
        self.stopping = threading.Event()
        self._halt = threading.Event()  # ends the current job's search (lost, or interrupted)

    def interrupt(self) -> None:
        """Stop after the candidates in flight: the current job is queued again at once,
        with everything measured recorded (what SIGTERM and Ctrl-C do)."""
        self.stopping.set()
        self._halt.set()

    def run(self, max_jobs: int | None = None, exit_when_idle: bool = False) -> list[JobOutcome]:
        outcomes: list[JobOutcome] = []
        while not self.stopping.is_set() and (max_jobs is None or len(outcomes) < max_jobs):
            job = self.queue.claim(self.owner, self.lease_seconds)
            if job is None:
                if exit_when_idle:
                    break
                self.stopping.wait(self.poll_seconds)
                continue
            self.log(f"job {job.id}: {job.kind} {job.spec} (attempt {job.attempts})")
            outcome = self.run_job(job)
            self.log(f"job {job.id}: {outcome.status}, {outcome.trials} measured here. {outcome.message}")
            outcomes.append(outcome)
        return outcomes

    def run_job(self, job: Job) -> JobOutcome:
        if self.stopping.is_set():
            self.queue.give_back(job.id, self.owner)
            return JobOutcome(job.id, "interrupted", 0, "the worker was stopped; queued again")
        kind = JOB_KINDS.get(job.kind)
        if kind is not None and kind.run is not None:
            return self._run_whole(job, kind)
        try:
            tuning = make_tuning(job.kind, job.spec, self.jobs)
            budget = Budget.of(job.budget)
        except (ValueError, TypeError) as exc:
            self.queue.finish(job.id, self.owner, "failed", str(exc))
            return JobOutcome(job.id, "failed", 0, str(exc))
        lost = threading.Event()
        self._halt.clear()
        if self.stopping.is_set():
            self._halt.set()
        claims = CandidateClaims(self.db, tuning.workload, tuning.target, self.owner, self.lease_seconds)
        self.queue.attach(job.id, self.owner, claims.workload_id, claims.target_id)
        done = [job.trials_done]
        finished = threading.Event()
        beat = threading.Thread(target=self._heartbeat, args=(job, claims, lost, done, finished), daemon=True)
        beat.start()
        try:
            measured, learned, left = self._tune(job, tuning, budget, claims, lost, done)
            if lost.is_set():
                return JobOutcome(job.id, "lost", measured, "its lease expired and another worker took it")
            if self.stopping.is_set():
                self.queue.give_back(job.id, self.owner)
                return JobOutcome(job.id, "interrupted", measured, "the worker was stopped; queued again")
            message = f"{measured} measured by {self.owner}" + (
                f", {learned} measured meanwhile by other workers" if learned else "") + (
                f", {left} left to the other workers that held them" if left else "")
            self.queue.finish(job.id, self.owner, "done", message)
            return JobOutcome(job.id, "done", measured, message)
        except Exception as exc:  # noqa: BLE001 - the job fails with why; the worker goes on
            message = f"{type(exc).__name__}: {exc}"
            self.queue.finish(job.id, self.owner, "failed", message)
            return JobOutcome(job.id, "failed", done[0] - job.trials_done, message)
        except BaseException:
            self.queue.give_back(job.id, self.owner)  # interrupted: queued again at once
            raise
        finally:
            finished.set()
            beat.join()
            tuning.close()
            claims.release()

    def _run_whole(self, job: Job, kind: JobKind) -> JobOutcome:
        """A job that tunes itself (a whole model's compile): one unit of work under the
        job's lease, which the heartbeat renews; its measurements are recorded as it goes,
        each of its tuners claims its candidates and counts them as the job's trials, and
        the job's lost lease stops their searches."""
        try:
            spec = check_spec(job.kind, job.spec)
            check_budget(job.kind, job.budget)
            if kind.check_budget is None:
                Budget.of(job.budget)
            if job.strategy != "auto":
                raise ValueError(f"a {job.kind} job's kernels are searched by their own strategies (a compile's or "
                                 f"a kernel's); its strategy must be auto, not {job.strategy!r}")
        except (ValueError, TypeError) as exc:
            self.queue.finish(job.id, self.owner, "failed", str(exc))
            return JobOutcome(job.id, "failed", 0, str(exc))
        assert kind.run is not None
        lost, finished = threading.Event(), threading.Event()
        done = [job.trials_done]
        claims = TunerClaims(self.db, self.owner, self.lease_seconds, stop=lost)
        beat = threading.Thread(target=self._heartbeat, args=(job, claims, lost, done, finished), daemon=True)
        beat.start()
        try:
            with tuner_scope(self._adopt(job, claims, done)):
                result = kind.run(spec, job.budget, self.db, self.jobs)
            if lost.is_set():
                return JobOutcome(job.id, "lost", result.trials, "its lease expired and another worker took it")
            done[0] = job.trials_done + result.trials
            self.queue.renew(job.id, self.owner, self.lease_seconds, done[0])
            if getattr(result, "workload", None) is not None:  # one kernel key: `queue list` shows its savings
                self.queue.attach(job.id, self.owner, *self.db.ids(result.workload, result.target))
            message = f"{result.trials} measured by {self.owner}; {result.summary()}"
            self.queue.finish(job.id, self.owner, "done", message)
            return JobOutcome(job.id, "done", result.trials, message)
        except Exception as exc:  # noqa: BLE001 - the job fails with why; the worker goes on
            message = f"{type(exc).__name__}: {exc}"
            self.queue.finish(job.id, self.owner, "failed", message)
            return JobOutcome(job.id, "failed", 0, message)
        except BaseException:
            self.queue.give_back(job.id, self.owner)  # interrupted: queued again at once
            raise
        finally:
            finished.set()
            beat.join()
            claims.release()

    def _adopt(self, job: Job, claims: TunerClaims, done: list[int]) -> Callable[[Tuner], None]:
        """The hook for every Tuner a job that tunes itself makes: its search claims its
        candidates, and each candidate it measures counts towards the job's trials (which
        `queue list` shows while the job runs)."""
        lock = threading.Lock()  # the tuners of a compile's task scheduler run in threads of their own

        def count(result: MeasureResult) -> None:
            if not result.environment and not result.amends:
                with lock:
                    done[0] += 1
                    trials = done[0]
                try:
                    self.queue.renew(job.id, self.owner, self.lease_seconds, trials)
                except DatabaseError:
                    pass  # the heartbeat writes the count again, and deals with a store out of reach

        def adopt(tuner: Tuner) -> None:
            if claims.wrap(tuner):
                tuner.callbacks.append(count)
        return adopt

    def _tune(self, job: Job, tuning: Tuning, budget: Budget, claims: CandidateClaims, lost: threading.Event,
              done: list[int]) -> tuple[int, int, int]:
        """Measure the default first (what savings are measured against), then tune with the
        trials earlier attempts left. Returns how many candidates were measured here, how
        many the search learned from other workers' records instead, and how many it gave
        up waiting for (other workers held them)."""
        first = done[0]
        remaining = None if budget.trials is None else budget.trials - done[0]
        if remaining is not None and remaining <= 0:
            return 0, 0, 0
        default = tuning.default
        if default is not None and tuning.space.is_valid(default) and claims.recorded(default) is None \
                and claims.take(default):
            for result in tuning.runner.run((tuning.builder or NullBuilder()).build([default])):
                self.db.add(tuning.workload, tuning.target, result, strategy="baseline")

        def count(result: MeasureResult) -> None:
            if not result.environment and not result.amends:
                done[0] += 1
                self.queue.renew(job.id, self.owner, self.lease_seconds, done[0])

        inner = create_strategy(job.strategy, tuning.space, budget=remaining)
        strategy = ClaimingStrategy(inner, claims, self._halt)
        with outside_tuner_scopes():  # claims already; not another worker's job that tunes itself
            tuner = Tuner(tuning.space, tuning.runner, builder=tuning.builder, workload=tuning.workload,
                          target=tuning.target, db=self.db, strategy=strategy, progress=False,
                          description=tuning.description, callbacks=[count],
                          budget=Budget(trials=remaining, seconds=budget.seconds,
                                        free_rejections=budget.free_rejections))
        tuner.run()
        return done[0] - first, strategy.told_from_others, strategy.gave_up

    def _heartbeat(self, job: Job, claims: CandidateClaims | TunerClaims, lost: threading.Event, done: list[int],
                   finished: threading.Event) -> None:
        """Renew the job's lease and the claims every third of a lease; a store that cannot
        be reached for a whole lease means the job may be another's by now: stop."""
        last = time.monotonic()
        while not finished.wait(self.lease_seconds / 3):
            try:
                if not self.queue.renew(job.id, self.owner, self.lease_seconds, done[0]):
                    lost.set()
                    self._halt.set()
                    return
                claims.renew()
                last = time.monotonic()
            except DatabaseError as exc:
                self.log(f"job {job.id}: cannot renew its lease ({exc})")
                if time.monotonic() - last > self.lease_seconds:
                    lost.set()
                    self._halt.set()
                    return
