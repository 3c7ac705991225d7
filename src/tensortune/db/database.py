"""The records database: SQLite in WAL mode, one committed row per measurement.

Every result is committed the moment it is added, so a killed run loses nothing and
several processes can tune into one file at once. A file that is not a tensortune
database, or is corrupt or unwritable, is a clear `DatabaseError`; nothing is ever
overwritten or recreated. A database in a folder this process cannot write is opened
read-only. A damaged record is skipped and named (`Database.damaged`, and a warning),
never allowed to hide the other records of its workload.

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
import sqlite3
import threading
import time
import urllib.parse
import uuid
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..measure import ErrorKind, MeasureResult
from ..space import Config
from .records import Record, Target, Workload, check_record

SCHEMA_VERSION = 1

_SCHEMA_V1 = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS workloads (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL, source_hash TEXT NOT NULL,
    key_json TEXT NOT NULL, UNIQUE (name, source_hash, key_json));
CREATE TABLE IF NOT EXISTS targets (
    id INTEGER PRIMARY KEY, kind TEXT NOT NULL, device TEXT NOT NULL, arch TEXT NOT NULL,
    versions_json TEXT NOT NULL, UNIQUE (kind, device, arch, versions_json));
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY, workload_id INTEGER NOT NULL REFERENCES workloads(id),
    target_id INTEGER NOT NULL REFERENCES targets(id), config_json TEXT NOT NULL,
    config_hash TEXT NOT NULL, times_json TEXT NOT NULL, time REAL, error TEXT,
    message TEXT NOT NULL DEFAULT '', compile_seconds REAL NOT NULL DEFAULT 0,
    run_seconds REAL NOT NULL DEFAULT 0, strategy TEXT NOT NULL DEFAULT '',
    session TEXT NOT NULL DEFAULT '', created_at REAL NOT NULL, extra_json TEXT NOT NULL DEFAULT '{}');
CREATE INDEX IF NOT EXISTS records_by_time ON records (workload_id, target_id, time);
CREATE INDEX IF NOT EXISTS records_by_config ON records (workload_id, target_id, config_hash);
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY, workload_id INTEGER NOT NULL, target_id INTEGER NOT NULL,
    strategy TEXT NOT NULL, budget_json TEXT NOT NULL, started_at REAL NOT NULL,
    finished_at REAL, status TEXT NOT NULL);
"""

TABLES = frozenset({"meta", "workloads", "targets", "records", "sessions"})

# Each entry upgrades a database from version k to k + 1.
MIGRATIONS: dict[int, str] = {}


class DatabaseError(RuntimeError):
    """The database file cannot be used; the message names the file and the reason."""


class DamagedRecords(UserWarning):
    """Some records could not be read and were skipped; the message names them."""


# a record's error counts as the environment's (not the candidate's) when its extra says so
_CANDIDATE_FAILURE = ("r.error IS NOT NULL AND (NOT json_valid(r.extra_json) OR "
                      "json_extract(r.extra_json, '$.environment') IS NULL)")


def default_db_path() -> Path:
    return Path.home() / ".cache" / "tensortune" / "tuning.db"


class Database:
    """Records of every measurement, queried by workload and target."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else default_db_path()
        self._lock = threading.RLock()
        self._ids: dict[Any, int] = {}
        self.read_only = False  # opened read-only: its folder (or the file) cannot be written
        self.damaged: dict[int, str] = {}  # record id -> why it could not be read (skipped)
        self._conn = self._open()

    # ---- opening, schema, migration ---------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        where = str(self.path)
        if where != ":memory:":
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise DatabaseError(f"cannot create the folder for database {where}: {exc}") from exc
            if self.path.is_dir():
                raise DatabaseError(f"database path {where} is a directory")
        existed = where == ":memory:" or self.path.exists()
        try:
            conn = sqlite3.connect(where, timeout=60, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout = 60000")
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if tables and "meta" not in tables:
                raise DatabaseError(f"{where} is an SQLite file but not a tensortune database "
                                    f"(tables: {sorted(tables)}); it was left untouched")
            if tables and not TABLES <= tables:
                raise DatabaseError(f"{where} lacks the table(s) {sorted(TABLES - tables)} of a tensortune "
                                    "database (damaged, or made by something else); it was left untouched")
            if where != ":memory:":
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            self._init_schema(conn, fresh=not tables)
        except sqlite3.DatabaseError as exc:
            if not existed:
                raise DatabaseError(f"cannot create database {where}: {exc} (is its folder writable?)") from exc
            if isinstance(exc, sqlite3.OperationalError) and not os.access(self.path.parent, os.W_OK | os.X_OK) \
                    or "unable to open" in str(exc) and os.access(self.path, os.R_OK):
                return self._open_read_only(exc)
            raise DatabaseError(f"cannot use database {where}: {exc} (is it corrupt, or it or its folder "
                                f"unwritable? it was left untouched)") from exc
        return conn

    def _open_read_only(self, cause: Exception) -> sqlite3.Connection:
        """A database whose folder cannot be written (shipped records): SQLite cannot make
        its lock files there, so it is read without them. Records still in a write-ahead
        log cannot be read that way, which is an error rather than a silent omission."""
        wal = Path(f"{self.path}-wal")
        quoted = urllib.parse.quote(str(self.path.resolve()))
        modes = ["mode=ro"] + ([] if wal.exists() and wal.stat().st_size else ["immutable=1"])
        last: Exception = cause
        for mode in modes:
            try:
                conn = sqlite3.connect(f"file:{quoted}?{mode}", uri=True, timeout=60, isolation_level=None,
                                       check_same_thread=False)
                tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
                if not TABLES <= tables:
                    raise DatabaseError(f"{self.path} is not a tensortune database (tables: {sorted(tables)}); "
                                        "it was left untouched")
                self._init_schema(conn, fresh=False, read_only=True)
                self.read_only = True
                return conn
            except sqlite3.DatabaseError as exc:
                last = exc
        hint = " (its write-ahead log holds records that need a writable folder)" if wal.exists() else ""
        raise DatabaseError(f"cannot use database {self.path}: {last}{hint}; it was left untouched") from last

    def _init_schema(self, conn: sqlite3.Connection, fresh: bool, read_only: bool = False) -> None:
        if fresh:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for stmt in filter(str.strip, _SCHEMA_V1.split(";")):
                    conn.execute(stmt)
                conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        try:
            version = int(row[0])
        except (TypeError, ValueError):
            found = "no schema version" if row is None else f"schema version {row[0]!r}"
            raise DatabaseError(f"{self.path} has {found}: damaged, or not a tensortune database; "
                                "it was left untouched") from None
        if version > SCHEMA_VERSION:
            raise DatabaseError(f"{self.path} has schema version {version}, newer than this "
                                f"tensortune understands ({SCHEMA_VERSION}); upgrade tensortune")
        if read_only and version < SCHEMA_VERSION:
            raise DatabaseError(f"{self.path} has schema version {version} and needs an upgrade, which a "
                                "read-only folder does not allow; copy it somewhere writable")
        while version < SCHEMA_VERSION:
            if version not in MIGRATIONS:
                raise DatabaseError(f"{self.path}: no migration from schema version {version}")
            conn.execute("BEGIN IMMEDIATE")
            conn.executescript(MIGRATIONS[version])
            version += 1
            conn.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(version),))
            conn.execute("COMMIT")

    @property
    def schema_version(self) -> int:
        return int(self._query("SELECT value FROM meta WHERE key='schema_version'")[0][0])

    def _query(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            try:
                return self._conn.execute(sql, args).fetchall()
            except sqlite3.DatabaseError as exc:
                raise DatabaseError(f"database {self.path}: {exc}") from exc

    def _write(self, sql: str, args: tuple[Any, ...] = ()) -> int:
        with self._lock:
            try:
                cur = self._conn.execute(sql, args)
                return cur.lastrowid or 0
            except sqlite3.DatabaseError as exc:
                where = " (opened read-only: its folder cannot be written)" if self.read_only else ""
                raise DatabaseError(f"cannot write to database {self.path}{where}: {exc}") from exc

    # ---- ids ---------------------------------------------------------------------------
    _ABSENT = -1  # the id a workload or target not yet in the file reads as: no row matches it

    def _id(self, key: Workload | Target, create: bool) -> int:
        """The row id of a workload or target; reading never writes, so a read-only file
        can be read."""
        if key not in self._ids:
            if isinstance(key, Workload):
                table, cols, vals = "workloads", ("name", "source_hash", "key_json"), \
                    (key.name, key.source_hash, key.key_json)
            else:
                table, cols, vals = "targets", ("kind", "device", "arch", "versions_json"), \
                    (key.kind, key.device, key.arch, key.versions_json)
            select = f"SELECT id FROM {table} WHERE " + " AND ".join(f"{c}=?" for c in cols)
            rows = self._query(select, vals)
            if not rows and not create:
                return self._ABSENT
            if not rows:
                self._write(f"INSERT OR IGNORE INTO {table} ({', '.join(cols)}) VALUES "
                            f"({','.join('?' * len(cols))})", vals)
                rows = self._query(select, vals)
            self._ids[key] = rows[0][0]
        return self._ids[key]

    def _workload_id(self, w: Workload, create: bool = True) -> int:
        return self._id(w, create)

    def _target_id(self, t: Target, create: bool = True) -> int:
        return self._id(t, create)

    # ---- writing -------------------------------------------------------------------------
    def add(self, workload: Workload, target: Target, result: MeasureResult,
            strategy: str = "", session: str = "", created_at: float | None = None) -> Record:
        """Commit one measurement now and return it as a record."""
        rec = Record(workload, target, result.config, tuple(result.times), result.error,
                     result.message, result.compile_seconds, result.run_seconds, strategy, session,
                     created_at if created_at is not None else time.time(), dict(result.extra))
        self.add_record(rec)
        return rec

    def add_record(self, rec: Record) -> None:
        self._write(
            "INSERT INTO records (workload_id, target_id, config_json, config_hash, times_json, time, "
            "error, message, compile_seconds, run_seconds, strategy, session, created_at, extra_json) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (self._workload_id(rec.workload), self._target_id(rec.target), rec.config.to_json(),
             rec.config.digest, json.dumps(list(rec.times)), rec.time if rec.ok else None,
             rec.error.value if rec.error else None, rec.message, rec.compile_seconds,
             rec.run_seconds, rec.strategy, rec.session, rec.created_at,
             json.dumps(rec.extra, default=str)))

    def start_session(self, workload: Workload, target: Target, strategy: str,
                      budget: dict[str, Any]) -> str:
        sid = uuid.uuid4().hex[:12]
        self._write("INSERT INTO sessions VALUES (?,?,?,?,?,?,NULL,'running')",
                    (sid, self._workload_id(workload), self._target_id(target), strategy,
                     json.dumps(budget), time.time()))
        return sid

    def finish_session(self, session: str, status: str = "finished") -> None:
        self._write("UPDATE sessions SET finished_at=?, status=? WHERE id=?", (time.time(), status, session))

    def finished_sessions(self, workload: Workload, target: Target) -> int:
        return self._query(
            "SELECT COUNT(*) FROM sessions WHERE workload_id=? AND target_id=? AND status='finished'",
            (self._workload_id(workload, create=False), self._target_id(target, create=False)))[0][0]

    # ---- reading -------------------------------------------------------------------------
    _COLUMNS = ("w.name, w.source_hash, w.key_json, t.kind, t.device, t.arch, t.versions_json, "
                "r.config_json, r.times_json, r.error, r.message, r.compile_seconds, r.run_seconds, "
                "r.strategy, r.session, r.created_at, r.extra_json, r.id")
    _FROM = " FROM records r JOIN workloads w ON r.workload_id=w.id JOIN targets t ON r.target_id=t.id"

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
                warnings.warn(f"database {self.path}: record {r[17]} is damaged ({reason}); skipped, the file "
                              "was left untouched", DamagedRecords, stacklevel=4)
            return None

    def _select(self, where: str, args: tuple[Any, ...], tail: str = "") -> list[Record]:
        rows = self._query(f"SELECT {self._COLUMNS}{self._FROM} WHERE {where} {tail}", args)
        return [rec for rec in map(self._row, rows) if rec is not None]

    def _scope(self, workload: Workload, target: Target | None) -> tuple[str, tuple[Any, ...]]:
        if target is None:
            return "r.workload_id=?", (self._workload_id(workload, create=False),)
        return "r.workload_id=? AND r.target_id=?", (self._workload_id(workload, create=False),
                                                     self._target_id(target, create=False))

    def records(self, workload: Workload, target: Target | None = None) -> list[Record]:
        """Every record of a workload (on one target, or all), oldest first."""
        where, args = self._scope(workload, target)
        return self._select(where, args, "ORDER BY r.id")

    def top_k(self, workload: Workload, target: Target | None = None, k: int = 5) -> list[Record]:
        """The k fastest successful configurations, one record per configuration.

        A configuration whose latest record about the candidate is a failure (a crash
        found after it had returned, a wrong result on a later check) is not among them,
        whatever it measured before; the environment's failures do not count."""
        where, args = self._scope(workload, target)
        rows = self._select(where + " AND r.time IS NOT NULL", args, "ORDER BY r.time")
        condemned = self._condemned(where, args)
        seen: set[str] = set()
        out = []
        for rec in rows:
            if rec.config.digest not in seen and (rec.target, rec.config.digest) not in condemned:
                seen.add(rec.config.digest)
                out.append(rec)
            if len(out) == k:
                break
        return out

    def _condemned(self, where: str, args: tuple[Any, ...]) -> set[tuple[Target, str]]:
        """(target, config digest) of configurations failed by the candidate after their
        latest success."""
        rows = self._query(
            "SELECT t.kind, t.device, t.arch, t.versions_json, r.config_hash, "
            "MAX(CASE WHEN r.time IS NOT NULL THEN r.id END), "
            f"MAX(CASE WHEN {_CANDIDATE_FAILURE} THEN r.id END) "
            f"FROM records r JOIN targets t ON r.target_id=t.id WHERE {where} "
            "GROUP BY r.target_id, r.config_hash", args)
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

    def workloads(self) -> list[tuple[Workload, int, float | None]]:
        """Every workload with its number of records and best time."""
        rows = self._query(
            "SELECT w.name, w.source_hash, w.key_json, COUNT(r.id), MIN(r.time) FROM workloads w "
            "LEFT JOIN records r ON r.workload_id=w.id GROUP BY w.id ORDER BY w.id")
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
        for r in self._query(f"SELECT {self._COLUMNS}{self._FROM} ORDER BY r.id"):
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
        clauses, args = ["1=1"], []
        if workload is not None:
            clauses.append("workload_id=?")
            args.append(self._workload_id(workload, create=False))
        if target is not None:
            clauses.append("target_id=?")
            args.append(self._target_id(target, create=False))
        chosen = []
        names = list(kinds)
        valid = {k.value for k in ErrorKind} | {"ok"}
        unknown = sorted(set(names) - valid)
        if unknown:
            raise ValueError(f"unknown record kind(s) {unknown}; known: {sorted(valid)}")
        errors = [k for k in names if k != "ok"]
        if errors:
            chosen.append(f"error IN ({','.join('?' * len(errors))})")
            args.extend(errors)
        if "ok" in names:
            chosen.append("error IS NULL")
        if failed:
            chosen.append("error IS NOT NULL")
        if environment:
            chosen.append("(error IS NOT NULL AND json_valid(extra_json) AND "
                          "json_extract(extra_json, '$.environment') IS NOT NULL)")
        if chosen:
            clauses.append("(" + " OR ".join(chosen) + ")")
        sql = f"DELETE FROM records WHERE {' AND '.join(clauses)}"
        with self._lock:
            try:
                return self._conn.execute(sql, tuple(args)).rowcount
            except sqlite3.DatabaseError as exc:
                where = " (opened read-only: its folder cannot be written)" if self.read_only else ""
                raise DatabaseError(f"cannot write to database {self.path}{where}: {exc}") from exc

    def import_records(self, records: Iterable[Record]) -> int:
        """Add records not already present (same workload, target, config and time stamp)."""
        n = 0
        for rec in records:
            where, args = self._scope(rec.workload, rec.target)
            dup = self._query(f"SELECT 1 FROM records r WHERE {where} AND r.config_hash=? AND r.created_at=?",
                              args + (rec.config.digest, rec.created_at))
            if not dup:
                self.add_record(rec)
                n += 1
        return n

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> "Database":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
