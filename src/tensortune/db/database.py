"""The records database: one committed row per measurement, in an SQLite file or a
PostgreSQL database that many hosts share (through SQLAlchemy Core).

Every result is committed the moment it is added, so a killed run loses nothing and
several processes (on one host for SQLite, on any number for PostgreSQL) can tune into
one store at once. A store that is not a tensortune database, or is corrupt or
unwritable, is a clear `DatabaseError`; nothing is ever overwritten or recreated. An
SQLite database in a folder this process cannot write is opened read-only. A damaged
record is skipped and named (`Database.damaged`, and a warning), never allowed to hide
the other records of its workload.

Example:
    >>> import tempfile, os
    >>> from tensortune.space import Config
    >>> from tensortune.measure import MeasureResult
    >>> db = Database(os.path.join(tempfile.mkdtemp(), "t.db"))
    >>> w, t = Workload.make("k", "src", {"n": 1}), Target.make("cpu", "test")
    >>> _ = db.add(w, t, MeasureResult(Config(a=1), (1e-3,)))
    >>> db.best(w, t).config
    Config(a=1)
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, and_, case, delete, func, insert, or_, select, update
from sqlalchemy.exc import DBAPIError

from ..measure import ErrorKind, MeasureResult
from ..space import Config
from . import schema
from .connect import first_line, open_store, stored_version, transaction
from .errors import DamagedRecords, DatabaseError, StoreURLError
from .records import Record, Target, Workload, check_record
from .schema import SCHEMA_VERSION, records, sessions, targets, workloads
from .url import StoreLocation, store_location

__all__ = ["SCHEMA_VERSION", "DamagedRecords", "Database", "DatabaseError", "StoreURLError", "default_db_path"]

TABLES = schema.TABLES
MIGRATIONS = schema.MIGRATIONS
_T = TypeVar("_T")


def default_db_path() -> Path:
    return Path.home() / ".cache" / "tensortune" / "tuning.db"


def _environment_of(version: int) -> Any:
    """A record's environment cause as SQL: its column, or in a read-only schema-1 SQLite
    file (no column yet) what extra_json says (NULL where that is not JSON)."""
    if version >= 2:
        return records.c.environment
    return case((func.json_valid(records.c.extra_json) == 1,
                 func.json_extract(records.c.extra_json, "$.environment")), else_=None)


class Database:
    """Records of every measurement, queried by workload and target.

    `Database(where)` takes a path, `sqlite:///PATH`, `postgresql://USER@HOST/DB`, or
    None for `default_db_path()`."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.location: StoreLocation = store_location(path if path is not None else default_db_path())
        self.path: Path | None = self.location.path  # the SQLite file; None for a server
        self.where: str = self.location.shown  # for messages: the path or the URL without password
        self._lock = threading.RLock()
        self._ids: dict[Any, int] = {}
        self.damaged: dict[int, str] = {}  # record id -> why it could not be read (skipped)
        store = open_store(self.location)
        self._conn: Connection = store.conn
        self.read_only = store.read_only  # SQLite opened read-only: its folder (or the file) cannot be written
        self._version = store.version  # older than SCHEMA_VERSION only for a read-only SQLite file
        self._environment = _environment_of(store.version)
        # a record's error counts as the environment's (not the candidate's) when it names a cause
        self._candidate_failure = and_(records.c.error.is_not(None), self._environment.is_(None))

    @property
    def dialect(self) -> str:
        """"sqlite" or "postgresql"."""
        return self._conn.dialect.name

    @property
    def schema_version(self) -> int:
        return self._run(lambda c: stored_version(c, self.where))

    # ---- running statements ---------------------------------------------------------------
    def _run(self, work: Callable[[Connection], _T], writes: bool = False) -> _T:
        """`work` on the connection, then committed (each statement on its own on SQLite).
        A server connection that was lost (the server restarted, an idle connection cut)
        is made again and `work` done once more, so a measurement is not lost to it."""
        if writes and self._version < SCHEMA_VERSION:
            raise DatabaseError(f"cannot write to database {self.where} (opened read-only: it or its folder cannot "
                                f"be written, and its schema version {self._version} is read as it is); copy it "
                                "somewhere writable to add to it")
        with self._lock:
            for attempt in (1, 2):
                try:
                    out = work(self._conn)
                    self._conn.commit()
                    return out
                except DBAPIError as exc:
                    self._rollback()
                    if attempt == 1 and exc.connection_invalidated and self.location.is_server:
                        continue
                    raise self._error(exc, writes) from exc
            raise AssertionError("unreachable")

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """Statements that commit together (on SQLite under the write lock from the start)."""
        with self._lock:
            try:
                with transaction(self._conn) as conn:
                    yield conn
            except DBAPIError as exc:
                raise self._error(exc, True) from exc

    def _rollback(self) -> None:
        try:
            self._conn.rollback()
        except DBAPIError:
            pass  # the connection is gone; the error being raised says why

    def _error(self, exc: DBAPIError, writes: bool) -> DatabaseError:
        if writes:
            where = " (opened read-only: it or its folder cannot be written)" if self.read_only else ""
            return DatabaseError(f"cannot write to database {self.where}{where}: {first_line(exc)}")
        return DatabaseError(f"database {self.where}: {first_line(exc)}")

    def query(self, stmt: Any) -> list[Any]:
        """The rows of one SQLAlchemy Core statement (for the store's other tables' modules)."""
        return self._run(lambda c: c.execute(stmt).all())

    def write(self, stmt: Any) -> int:
        """Run one writing statement, committed now; the number of rows it touched."""
        return self._run(lambda c: c.execute(stmt).rowcount, writes=True)

    _query, _write = query, write

    def insert_ignoring_duplicates(self, table: Any) -> Any:
        """An INSERT that skips a row whose unique key is already there."""
        if self.dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert as dialect_insert
        else:
            from sqlalchemy.dialects.sqlite import insert as dialect_insert
        return dialect_insert(table).on_conflict_do_nothing()

    # ---- ids ---------------------------------------------------------------------------
    _ABSENT = -1  # the id a workload or target not yet in the store reads as: no row matches it

    def _id(self, key: Workload | Target, create: bool) -> int:
        """The row id of a workload or target; reading never writes, so a read-only file
        can be read."""
        if key not in self._ids:
            if isinstance(key, Workload):
                table, values = workloads, {"name": key.name, "source_hash": key.source_hash,
                                            "key_json": key.key_json}
            else:
                table, values = targets, {"kind": key.kind, "device": key.device, "arch": key.arch,
                                          "versions_json": key.versions_json}
            find = select(table.c.id).where(*(table.c[k] == v for k, v in values.items()))
            rows = self._query(find)
            if not rows and not create:
                return self._ABSENT
            if not rows:
                self._write(self.insert_ignoring_duplicates(table).values(**values))
                rows = self._query(find)
            self._ids[key] = rows[0][0]
        return self._ids[key]

    def ids(self, workload: Workload, target: Target) -> tuple[int, int]:
        """The row ids of a workload and a target, made if new."""
        return self._id(workload, True), self._id(target, True)

    def keys_of(self, workload_id: int, target_id: int) -> tuple[Workload, Target] | None:
        """The workload and target of row ids; None if either is absent."""
        w = self.query(select(workloads.c.name, workloads.c.source_hash, workloads.c.key_json)
                       .where(workloads.c.id == workload_id))
        t = self.query(select(targets.c.kind, targets.c.device, targets.c.arch, targets.c.versions_json)
                       .where(targets.c.id == target_id))
        return (Workload(*w[0]), Target(*t[0])) if w and t else None

    def _workload_id(self, w: Workload, create: bool = True) -> int:
        return self._id(w, create)

    def _target_id(self, t: Target, create: bool = True) -> int:
        return self._id(t, create)

    # ---- writing -------------------------------------------------------------------------
    def add(self, workload: Workload, target: Target, result: MeasureResult,
            strategy: str = "", session: str = "", created_at: float | None = None) -> Record:
        """Commit one measurement now and return it as a record."""
        rec = self.record_of(workload, target, result, strategy, session, created_at)
        self.add_records([rec])
        return rec

    def add_many(self, workload: Workload, target: Target, results: Iterable[MeasureResult],
                 strategy: str = "", session: str = "") -> list[Record]:
        """Commit several measurements in one transaction (all or none), as records."""
        recs = [self.record_of(workload, target, r, strategy, session) for r in results]
        self.add_records(recs)
        return recs

    @staticmethod
    def record_of(workload: Workload, target: Target, result: MeasureResult, strategy: str = "",
                  session: str = "", created_at: float | None = None) -> Record:
        return Record(workload, target, result.config, tuple(result.times), result.error,
                      result.message, result.compile_seconds, result.run_seconds, strategy, session,
                      created_at if created_at is not None else time.time(), dict(result.extra))

    _INSERT_RECORD = insert(records)  # one statement, compiled once; the values are its parameters

    def add_record(self, rec: Record) -> None:
        self.add_records([rec])

    def add_records(self, recs: list[Record]) -> None:
        """Commit records in one transaction: one statement for all of them, one commit."""
        if not recs:
            return
        rows = [self._row_of(rec) for rec in recs]

        def insert_all(c: Connection) -> int:
            if len(rows) > 1 and self.dialect == "sqlite":  # one commit for all (autocommit otherwise)
                c.exec_driver_sql("BEGIN IMMEDIATE")
            return c.execute(self._INSERT_RECORD, rows if len(rows) > 1 else rows[0]).rowcount

        self._run(insert_all, writes=True)

    def _row_of(self, rec: Record) -> dict[str, Any]:
        return dict(
            workload_id=self._workload_id(rec.workload), target_id=self._target_id(rec.target),
            config_json=rec.config.to_json(), config_hash=rec.config.digest,
            times_json=json.dumps(list(rec.times)), time=rec.time if rec.ok else None,
            error=rec.error.value if rec.error else None, message=rec.message,
            compile_seconds=rec.compile_seconds, run_seconds=rec.run_seconds, strategy=rec.strategy,
            session=rec.session, created_at=rec.created_at, extra_json=json.dumps(rec.extra, default=str),
            environment=rec.to_result().environment or None)

    def start_session(self, workload: Workload, target: Target, strategy: str,
                      budget: dict[str, Any]) -> str:
        sid = uuid.uuid4().hex[:12]
        self._write(insert(sessions).values(
            id=sid, workload_id=self._workload_id(workload), target_id=self._target_id(target),
            strategy=strategy, budget_json=json.dumps(budget), started_at=time.time(), finished_at=None,
            status="running"))
        return sid

    def finish_session(self, session: str, status: str = "finished") -> None:
        self._write(update(sessions).where(sessions.c.id == session).values(finished_at=time.time(), status=status))

    def finished_sessions(self, workload: Workload, target: Target) -> int:
        return self._query(select(func.count()).select_from(sessions).where(
            sessions.c.workload_id == self._workload_id(workload, create=False),
            sessions.c.target_id == self._target_id(target, create=False),
            sessions.c.status == "finished"))[0][0]

    # ---- reading -------------------------------------------------------------------------
    _COLUMNS = (workloads.c.name, workloads.c.source_hash, workloads.c.key_json, targets.c.kind, targets.c.device,
                targets.c.arch, targets.c.versions_json, records.c.config_json, records.c.times_json,
                records.c.error, records.c.message, records.c.compile_seconds, records.c.run_seconds,
                records.c.strategy, records.c.session, records.c.created_at, records.c.extra_json, records.c.id)
    _FROM = records.join(workloads, records.c.workload_id == workloads.c.id).join(
        targets, records.c.target_id == targets.c.id)

    def _row(self, r: tuple[Any, ...]) -> Record | None:
        """The record of a row; None (and the row named in `damaged`) if it is damaged."""
        try:
            rec = Record(Workload(r[0], r[1], r[2]), Target(r[3], r[4], r[5], r[6]),
                         Config.from_json(r[7]), tuple(json.loads(r[8])),
                         ErrorKind(r[9]) if r[9] else None, r[10], r[11], r[12], r[13], r[14], r[15],
                         json.loads(r[16]))
            check_record(rec)
            return rec
        except (ValueError, TypeError, RecursionError) as exc:
            reason = f"{type(exc).__name__}: {str(exc)[:200]}"
            if self.damaged.get(r[17]) != reason:
                self.damaged[r[17]] = reason
                warnings.warn(f"database {self.where}: record {r[17]} is damaged ({reason}); skipped, the store "
                              "was left untouched", DamagedRecords, stacklevel=4)
            return None

    def _select(self, where: list[Any], order: Any = records.c.id) -> list[Record]:
        rows = self._query(select(*self._COLUMNS).select_from(self._FROM).where(*where).order_by(order, records.c.id))
        return [rec for rec in map(self._row, rows) if rec is not None]

    def _scope(self, workload: Workload, target: Target | None) -> list[Any]:
        scope = [records.c.workload_id == self._workload_id(workload, create=False)]
        if target is not None:
            scope.append(records.c.target_id == self._target_id(target, create=False))
        return scope

    def records(self, workload: Workload, target: Target | None = None) -> list[Record]:
        """Every record of a workload (on one target, or all), oldest first."""
        return self._select(self._scope(workload, target))

    def top_k(self, workload: Workload, target: Target | None = None, k: int = 5) -> list[Record]:
        """The k fastest successful configurations, one record per configuration.

        A configuration whose latest record about the candidate is a failure (a crash
        found after it had returned, a wrong result on a later check) is not among them,
        whatever it measured before; the environment's failures do not count."""
        scope = self._scope(workload, target)
        rows = self._select(scope + [records.c.time.is_not(None)], records.c.time)
        condemned = self._condemned(scope)
        seen: set[str] = set()
        out = []
        for rec in rows:
            if rec.config.digest not in seen and (rec.target, rec.config.digest) not in condemned:
                seen.add(rec.config.digest)
                out.append(rec)
            if len(out) == k:
                break
        return out

    def _condemned(self, scope: list[Any]) -> set[tuple[Target, str]]:
        """(target, config digest) of configurations failed by the candidate after their
        latest success."""
        last_ok = func.max(case((records.c.time.is_not(None), records.c.id)))
        last_failed = func.max(case((self._candidate_failure, records.c.id)))
        rows = self._query(
            select(targets.c.kind, targets.c.device, targets.c.arch, targets.c.versions_json, records.c.config_hash,
                   last_ok, last_failed)
            .select_from(records.join(targets, records.c.target_id == targets.c.id)).where(*scope)
            .group_by(targets.c.id, records.c.config_hash))
        return {(Target(a, b, c, d), digest) for a, b, c, d, digest, ok, failed in rows
                if ok is not None and failed is not None and failed > ok}

    def best(self, workload: Workload, target: Target | None = None) -> Record | None:
        top = self.top_k(workload, target, 1)
        return top[0] if top else None

    def measured_configs(self, workload: Workload, target: Target) -> dict[str, Record]:
        """The latest record of every configuration measured, by config digest; failures of
        the environment (a full disk, a missing compiler) say nothing about a candidate and
        are left out, so such a candidate counts as not measured."""
        return {r.config.digest: r for r in self.records(workload, target) if not r.to_result().environment}

    def standing_of(self, workload: Workload, target: Target, digest: str) -> Record | None:
        """The latest record of one configuration that is not a failure of the environment."""
        scope = self._scope(workload, target) + [records.c.config_hash == digest, self._environment.is_(None)]
        found = self._select(scope)
        return found[-1] if found else None

    def workloads(self) -> list[tuple[Workload, int, float | None]]:
        """Every workload with its number of records and best time."""
        rows = self._query(
            select(workloads.c.name, workloads.c.source_hash, workloads.c.key_json, func.count(records.c.id),
                   func.min(records.c.time))
            .select_from(workloads.outerjoin(records, records.c.workload_id == workloads.c.id))
            .group_by(workloads.c.id).order_by(workloads.c.id))
        return [(Workload(a, b, c), n, best) for a, b, c, n, best in rows]

    def find_workloads(self, text: str) -> list[Workload]:
        """Workloads whose displayed id, name or source hash starts with `text`, or whose
        position in `workloads()` is `text` (1-based)."""
        all_w = [w for w, _, _ in self.workloads()]
        if text.isdigit() and 1 <= int(text) <= len(all_w):
            return [all_w[int(text) - 1]]
        exact = [w for w in all_w if w.id_text == text]
        if exact:
            return exact
        return [w for w in all_w if w.id_text.startswith(text) or w.name == text
                or w.source_hash.startswith(text)]

    def all_records(self) -> Iterator[Record]:
        for r in self._query(select(*self._COLUMNS).select_from(self._FROM).order_by(records.c.id)):
            rec = self._row(r)
            if rec is not None:
                yield rec

    # ---- deleting --------------------------------------------------------------------------
    def delete_records(self, workload: Workload | None = None, target: Target | None = None, *,
                       kinds: Iterable[str] = (), failed: bool = False, environment: bool = False) -> int:
        """Delete records, returning how many: of `workload` (all workloads if None), on
        `target`, with an error in `kinds` (error kind names, "ok" for successes), or any
        failure (`failed`), or failures of the environment (`environment`). With no filter
        every record of the workload goes; a workload's records of every kind with it."""
        clauses: list[Any] = []
        if workload is not None:
            clauses.append(records.c.workload_id == self._workload_id(workload, create=False))
        if target is not None:
            clauses.append(records.c.target_id == self._target_id(target, create=False))
        names = list(kinds)
        valid = {k.value for k in ErrorKind} | {"ok"}
        unknown = sorted(set(names) - valid)
        if unknown:
            raise ValueError(f"unknown record kind(s) {unknown}; known: {sorted(valid)}")
        chosen: list[Any] = []
        errors = [k for k in names if k != "ok"]
        if errors:
            chosen.append(records.c.error.in_(errors))
        if "ok" in names:
            chosen.append(records.c.error.is_(None))
        if failed:
            chosen.append(records.c.error.is_not(None))
        if environment:
            chosen.append(and_(records.c.error.is_not(None), self._environment.is_not(None)))
        if chosen:
            clauses.append(or_(*chosen))
        return self._write(delete(records).where(*clauses))

    def import_records(self, records_in: Iterable[Record]) -> int:
        """Add records not already present (same workload, target, config and time stamp)."""
        n = 0
        for rec in records_in:
            dup = self._query(select(records.c.id).where(
                *self._scope(rec.workload, rec.target), records.c.config_hash == rec.config.digest,
                records.c.created_at == rec.created_at).limit(1))
            if not dup:
                self.add_record(rec)
                n += 1
        return n

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            self._conn.engine.dispose()

    def __enter__(self) -> "Database":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
