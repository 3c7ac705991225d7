"""Blaming the right candidate when a reused worker process is lost.

A runner measures candidate after candidate in one long-lived worker process. When that
process dies (or garbles its reply, or runs out of memory) during candidate B, B may be
innocent: an earlier candidate A may have left a thread running that crashed once B
was loaded. So, before anything is recorded as crashed:

1. B is measured again alone, in a fresh worker. If it is lost again, B is to blame.
2. Otherwise B's fresh measurement is its result, and the candidates that ran before B in
   the lost process (the last `suspects` of them, most recent first) are replayed each
   in a fresh worker, followed by B. The first whose replay loses the worker is the
   culprit: its earlier success is amended by a `crashed` result (`extra["amends"]`),
   which the tuner records and the database ranks above that success.
3. If no replay loses the worker, the loss is noted on B's result
   (`extra["worker_lost_unattributed"]`) and nothing is recorded as crashed.

A loss in a process that had run nothing before (`WorkerLost.served == 0`) is the
candidate's own at once. Timeouts are not replayed (a replay costs another timeout).

Example:
    >>> from tensortune.space import Config
    >>> runs = WorkerRuns(lambda: IsolatedWorker(timeout=30))
    >>> runs.measure(Config(a=1), lambda w: w.call(abs, -3))
    Measured(value=3, amendments=(), note='')
    >>> runs.close()
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..space import Config
from .errors import ErrorKind
from .result import MeasureResult
from .worker import IsolatedWorker, WorkerLost

REPLAYED_KINDS = (ErrorKind.CRASHED, ErrorKind.OUT_OF_RESOURCES)


@dataclass(frozen=True)
class Measured:
    """What `run` returned; results correcting earlier candidates; a note on a worker loss
    no replay could pin on anyone ("" if there was none)."""

    value: Any
    amendments: tuple[MeasureResult, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class _Ran:
    config: Config
    run: Callable[[IsolatedWorker], Any]


class WorkerRuns:
    """Runs candidates in one reused worker and attributes a lost worker correctly.

    `measure(config, run)` calls `run(worker)` and returns a `Measured`. It raises what
    `run` raises: a `WorkerLost` only once the candidate is known to be the one to blame.
    """

    def __init__(self, make_worker: Callable[[], IsolatedWorker], suspects: int = 3) -> None:
        self.make_worker = make_worker
        self.worker = make_worker()
        self._recent: deque[_Ran] = deque(maxlen=suspects)
        self._pid: int | None = None

    def measure(self, config: Config, run: Callable[[IsolatedWorker], Any]) -> Measured:
        try:
            value = run(self.worker)
        except WorkerLost as lost:
            suspects = list(self._recent) if self._pid is not None and lost.served else []
            self._forget()
            if lost.kind not in REPLAYED_KINDS or not suspects:
                raise
            return self._attribute(config, run, lost, suspects)
        self._remember(config, run)
        return Measured(value)

    def _remember(self, config: Config, run: Callable[[IsolatedWorker], Any]) -> None:
        pid = self.worker.pid
        if pid != self._pid:  # a new process: what ran in the old one cannot harm this one
            self._recent.clear()
            self._pid = pid
        self._recent.append(_Ran(config, run))

    def _forget(self) -> None:
        self._recent.clear()
        self._pid = None

    def _attribute(self, config: Config, run: Callable[[IsolatedWorker], Any], lost: WorkerLost,
                   suspects: list[_Ran]) -> Measured:
        self.worker.close()
        self.worker = self.make_worker()
        try:
            value = run(self.worker)  # alone, in a fresh process
        except WorkerLost as again:
            self._forget()
            raise WorkerLost(again.kind, f"{again} (it did so again alone in a fresh worker)", 0) from None
        self._remember(config, run)
        for suspect in reversed(suspects):
            start = time.perf_counter()
            replay = self.make_worker()
            try:
                suspect.run(replay)
                run(replay)
            except WorkerLost as caught:
                message = (f"left the worker broken after it returned: the worker was lost ({lost}) while "
                           f"{config.to_json()} ran next, which measures fine alone; replaying the two in a "
                           f"fresh worker lost it again ({caught})")
                amendment = MeasureResult.failed(suspect.config, lost.kind, message,
                                                 run_seconds=time.perf_counter() - start,
                                                 extra={"amends": True, "harmed": config.to_json()})
                return Measured(value, (amendment,))
            except Exception:  # noqa: BLE001 - a replay that fails in the ordinary way proves nothing
                pass
            finally:
                replay.close()
        return Measured(value, (), f"the worker was lost while it ran ({lost}); it measures fine alone and "
                        f"no replay of the {len(suspects)} candidate(s) before it lost the worker again")

    def close(self) -> None:
        self.worker.close()
