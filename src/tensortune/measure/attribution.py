"""Blaming the right candidate when a reused worker process is lost.

A runner measures candidate after candidate in one long-lived worker process. When that
process dies (or garbles its reply, or runs out of memory) during candidate X, X may be
innocent: an earlier candidate A may have left a thread running that crashed the process
once X was loaded. So before anything is recorded as crashed:

1. X is measured again alone, in a fresh worker. If it is lost again, X is to blame.
2. Otherwise X's fresh measurement is its result, and the candidates that ran before X in
   the lost process (the last `suspects` of them, most recent first) are replayed, each
   in a fresh worker followed by X, which is then watched for `settle` seconds. The first
   replay that loses the worker names the culprit: its earlier success is amended by a
   result of the loss's kind with `extra["amends"]`, which the tuner records and which the
   database ranks above that success (the configuration is no longer a winner).
3. If no replay loses the worker, the loss is noted on X's result
   (`extra["worker_lost_unattributed"]`) and nothing is recorded as crashed.

A process found dead between calls (before X starts, at the end of a batch, or a moment
after the run's last candidate: `finish`) is attributed the same way, each suspect
replayed with the candidate that followed it.
A loss in a process that had run nothing before (`WorkerLost.served == 0`) is the
candidate's own at once. Timeouts are not replayed (a replay would cost another timeout).

Example:
    >>> from tensortune.space import Config
    >>> runs = WorkerRuns(lambda: IsolatedWorker(timeout=30))
    >>> runs.measure(Config(a=1), lambda w: w.call(abs, -3))
    Measured(value=3, error=None, amendments=(), note='')
    >>> runs.close()
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..space import Config
from .errors import CandidateError, ErrorKind
from .result import BuildResult, MeasureResult, failed_build
from .worker import IsolatedWorker, WorkerLost, default_memory_limit

REPLAYED_KINDS = (ErrorKind.CRASHED, ErrorKind.OUT_OF_RESOURCES)
LATE_SETTLE_SECONDS = 0.2  # how long the end of a run watches the worker its last candidate left


@dataclass(frozen=True)
class Measured:
    """What `run` returned, or the error that is the candidate's; results correcting
    earlier candidates; a note on a worker loss no replay could pin on anyone."""

    value: Any = None
    error: CandidateError | None = None
    amendments: tuple[MeasureResult, ...] = ()
    note: str = ""


def measured_result(build: BuildResult, measured: Measured, seconds: float,
                    extra: dict[str, Any] | None = None) -> MeasureResult:
    """The result of a built candidate from what `WorkerRuns.measure` returned (the value
    being its times)."""
    extra = dict(extra or {})
    if measured.note:
        extra["worker_lost_unattributed"] = measured.note
    if measured.error is not None:
        return MeasureResult.failed(build.config, measured.error.kind, str(measured.error),
                                    measured.error.environment, compile_seconds=build.compile_seconds,
                                    run_seconds=seconds, extra=extra)
    return MeasureResult(build.config, tuple(measured.value), compile_seconds=build.compile_seconds,
                         run_seconds=seconds, extra=extra)


@dataclass(frozen=True)
class _Ran:
    config: Config
    run: Callable[[IsolatedWorker], Any]


class WorkerRuns:
    """Runs candidates in one reused worker and attributes a lost worker correctly.

    `measure(config, run)` calls `run(worker)` (which may be called again, in other
    workers, to replay it) and returns a `Measured`; `finish()`, at the end of a batch,
    returns the amendments for a worker found dead since its last call.
    """

    def __init__(self, make_worker: Callable[[], IsolatedWorker], suspects: int = 3, settle: float = 0.2) -> None:
        self.make_worker = make_worker
        self.worker = make_worker()
        self.settle = settle
        self._recent: deque[_Ran] = deque(maxlen=suspects)
        self._pid: int | None = None

    @classmethod
    def isolated(cls, timeout: float, memory_limit: int | None = None) -> WorkerRuns:
        """Runs in `IsolatedWorker`s stopped after `timeout` seconds a call; `memory_limit`
        in bytes (None: half the machine's memory; 0: no limit)."""
        limit = default_memory_limit() if memory_limit is None else memory_limit or None
        return cls(lambda: IsolatedWorker(timeout=timeout, memory_limit=limit))

    def warm_up(self) -> None:
        """Start the worker process now and wait until it answers, instead of at the first
        candidate (a Ray actor does this when a run starts). Raises `WorkerLost` where no
        worker could be started; the first candidate then tries again."""
        self.worker.call(os.getpid)

    def measure(self, config: Config, run: Callable[[IsolatedWorker], Any]) -> Measured:
        ran = _Ran(config, run)
        amendments: tuple[MeasureResult, ...] = ()
        if self._recent and not self.worker.alive():  # died after its last call returned
            amendments = self._blame(self._take(), ran, self.worker.exit_description())
        try:
            value = run(self.worker)
        except WorkerLost as lost:
            history = self._take() if lost.served else []
            if lost.kind in REPLAYED_KINDS and history:
                return self._attribute(ran, lost, history, amendments)
            return Measured(error=lost, amendments=amendments)
        except CandidateError as exc:
            self._remember(ran)
            return Measured(error=exc, amendments=amendments)
        self._remember(ran)
        return Measured(value, amendments=amendments)

    def run_all(self, builds: Any, call_for: Callable[[BuildResult], Callable[[IsolatedWorker], Any]]) -> Any:
        """A runner's whole `run`: each build measured by `call_for(build)` in turn (a build
        that failed is its result), each result followed by the amendments it brought,
        and the batch's end looked at."""
        for b in builds:
            if not b.ok:
                yield failed_build(b)
                continue
            start = time.perf_counter()
            measured = self.measure(b.config, call_for(b))
            yield measured_result(b, measured, time.perf_counter() - start)
            yield from measured.amendments
        yield from self.finish()

    def finish(self, settle: float = 0.0) -> tuple[MeasureResult, ...]:
        """Amendments for a worker that died after the last call of a batch returned,
        looked at after `settle` seconds (0 at the end of a batch: the next batch's first
        call looks again; the end of a run waits a little)."""
        if self._recent and not (self.worker.settled(settle) if settle else self.worker.alive()):
            return self._blame(self._take(), None, self.worker.exit_description())
        return ()

    # ---- bookkeeping ---------------------------------------------------------------------
    def _remember(self, ran: _Ran) -> None:
        pid = self.worker.pid
        if pid != self._pid:  # a new process: what ran in the old one cannot harm this one
            self._recent.clear()
            self._pid = pid
        self._recent.append(ran)

    def _take(self) -> list[_Ran]:
        history = list(self._recent)
        self._recent.clear()
        self._pid = None
        return history

    # ---- attribution ---------------------------------------------------------------------
    def _attribute(self, ran: _Ran, lost: WorkerLost, history: list[_Ran],
                   amendments: tuple[MeasureResult, ...]) -> Measured:
        self.worker.close()
        self.worker = self.make_worker()
        try:
            value = ran.run(self.worker)  # alone, in a fresh process
        except WorkerLost as again:
            self._take()
            return Measured(error=WorkerLost(again.kind, f"{again} (it did so again alone in a fresh worker)", 0,
                                             again.environment), amendments=amendments)
        except CandidateError as exc:
            self._remember(ran)
            return Measured(error=exc, amendments=amendments)
        self._remember(ran)
        found = self._blame(history, ran, str(lost))
        note = "" if found else (f"the worker was lost while it ran ({lost}); it measures fine alone and no replay "
                                 f"of the {len(history)} candidate(s) before it lost the worker again")
        return Measured(value, amendments=amendments + found, note=note)

    def _blame(self, history: list[_Ran], follow: _Ran | None, lost: str) -> tuple[MeasureResult, ...]:
        """Replay each suspect, most recent first, in a fresh worker followed by `follow`
        (or by the candidate that followed it), then let the worker settle; the first
        whose replay loses the worker is amended."""
        for i in reversed(range(len(history))):
            suspect = history[i]
            after = follow if follow is not None else history[i + 1] if i + 1 < len(history) else None
            start = time.perf_counter()
            replay = self.make_worker()
            try:
                suspect.run(replay)
                if after is not None:
                    after.run(replay)
                if replay.settled(self.settle):
                    continue
                caught = replay.exit_description()
            except WorkerLost as exc:
                caught = str(exc)
            except Exception:  # noqa: BLE001 - a replay that fails in the ordinary way proves nothing
                continue
            finally:
                replay.close()
            then = f" while {after.config.to_json()} ran next" if after is not None else ""
            message = (f"left the worker broken after it returned: the worker was lost ({lost}){then}; a replay in "
                       f"a fresh worker lost it again ({caught})")
            kind = ErrorKind.OUT_OF_RESOURCES if "memory" in caught else ErrorKind.CRASHED
            extra = {"amends": True, **({"harmed": after.config.to_json()} if after is not None else {})}
            return (MeasureResult.failed(suspect.config, kind, message, run_seconds=time.perf_counter() - start,
                                         extra=extra),)
        return ()

    def close(self) -> None:
        self.worker.close()
