"""Group commit: a tuning run's records written by a thread, each commit taking every
record that arrived while the previous one ran.

The tuning loop hands each result over the moment it arrives and goes back to the
cluster at once; the writer commits at once when idle, so a lone result is committed as
soon as it would have been, and results that arrive faster than commits share one
transaction (one statement, one commit: what a store whose commits wait for the disk,
such as PostgreSQL's, gains most from). `flush()` waits until everything handed over is
committed, and raises the writer's error if a commit failed (the records it held are
kept for the next attempt, never dropped).

Example:
    >>> import tempfile, os
    >>> from tensortune.db import Database, Target, Workload
    >>> from tensortune.measure import MeasureResult
    >>> from tensortune.space import Config
    >>> db = Database(os.path.join(tempfile.mkdtemp(), "t.db"))
    >>> w, t = Workload.make("k", "src", {"n": 1}), Target.make("cpu", "test")
    >>> with RecordWriter(db, w, t) as writer:
    ...     for a in range(3):
    ...         writer.add(MeasureResult(Config(a=a), (1e-3,)))
    ...     writer.flush()
    >>> len(db.records(w, t))
    3
"""

from __future__ import annotations

import threading
import time

from ..measure import MeasureResult
from .database import Database
from .records import Record, Target, Workload

MAX_GROUP = 256  # records in one transaction at most


class RecordWriter:
    """Commits one run's results on a thread of its own, in groups (see the module)."""

    def __init__(self, db: Database, workload: Workload, target: Target, strategy: str = "",
                 session: str = "") -> None:
        self.db, self.workload, self.target = db, workload, target
        self.strategy, self.session = strategy, session
        self._pending: list[Record] = []
        self._writing = 0  # records in the commit under way
        self._error: BaseException | None = None
        self._closed = False
        self._cond = threading.Condition()
        self.commits = 0  # transactions made (for benchmarks: records / commits is the grouping)
        self.committed = 0
        self._thread = threading.Thread(target=self._loop, name="tensortune-record-writer", daemon=True)
        self._thread.start()

    def add(self, result: MeasureResult) -> None:
        """Hand one result over; its record's time stamp is its arrival."""
        rec = self.db.record_of(self.workload, self.target, result, self.strategy, self.session, time.time())
        with self._cond:
            self._raise_error()
            if self._closed:
                raise RuntimeError("the record writer is closed")
            self._pending.append(rec)
            self._cond.notify_all()

    def flush(self) -> None:
        """Wait until every record handed over is committed; raises a failed commit's error."""
        with self._cond:
            while (self._pending or self._writing) and self._error is None:
                self._cond.wait()
            self._raise_error()

    def close(self) -> None:
        """Commit what is left (raising a failed commit's error), then end the thread."""
        try:
            self.flush()
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()
            self._thread.join()

    def _raise_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            self._cond.notify_all()  # the thread tries the kept records again
            raise error

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if not self._pending:  # closed, nothing left
                    return
                if self._error is not None:  # not retried until the loop has heard of it
                    if self._closed:
                        return
                    self._cond.wait()
                    continue
                group = self._pending[:MAX_GROUP]
                del self._pending[:MAX_GROUP]
                self._writing = len(group)
            try:
                self.db.add_records(group)
            except BaseException as exc:  # noqa: BLE001 - handed to the loop, which raises it
                with self._cond:
                    self._pending[:0] = group  # kept, in order, for the next attempt
                    self._writing = 0
                    self._error = exc
                    self._cond.notify_all()
                continue
            with self._cond:
                self._writing = 0
                self.commits += 1
                self.committed += len(group)
                self._cond.notify_all()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
