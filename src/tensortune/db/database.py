"""The records database: SQLite in WAL mode, one committed row per measurement.

Every result is committed the moment it is added, so a killed run loses nothing and
several processes can tune into one file at once. A file that is not a tensortune
database, or is corrupt or unwritable, is a clear `DatabaseError`; nothing is ever
overwritten or recreated.

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
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..measure import ErrorKind, MeasureResult
from ..space import Config
from .records import Record, Target, Workload

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


def default_db_path() -> Path:
    return Path.home() / ".cache" / "tensortune" / "tuning.db"


class Database:
    """Records of every measurement, queried by workload and target."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else default_db_path()
        self._lock = threading.RLock()
        self._ids: dict[Any, int] = {}
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
            raise DatabaseError(f"cannot use database {where}: {exc} (is it corrupt, or it or its folder "
                                f"unwritable? it was left untouched)") from exc
        return conn

    def _init_schema(self, conn: sqlite3.Connection, fresh: bool) -> None:
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
                raise DatabaseError(f"cannot write to database {self.path}: {exc}") from exc

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

    def _row(self, r: tuple[Any, ...]) -> Record:
        try:
            return Record(Workload(r[0], r[1], r[2]), Target(r[3], r[4], r[5], r[6]),
                          Config.from_json(r[7]), tuple(json.loads(r[8])),
                          ErrorKind(r[9]) if r[9] else None, r[10], r[11], r[12], r[13], r[14], r[15],
                          json.loads(r[16]))
        except (ValueError, TypeError) as exc:
            raise DatabaseError(f"database {self.path}: record {r[17]} is damaged ({type(exc).__name__}: "
                                f"{exc}); the file was left untouched") from exc

    def _select(self, where: str, args: tuple[Any, ...], tail: str = "") -> list[Record]:
        rows = self._query(f"SELECT {self._COLUMNS}{self._FROM} WHERE {where} {tail}", args)
        return [self._row(r) for r in rows]

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
        """The k fastest successful configurations, one record per configuration."""
        where, args = self._scope(workload, target)
        rows = self._select(where + " AND r.time IS NOT NULL", args, "ORDER BY r.time")
        seen: set[str] = set()
        out = []
        for rec in rows:
            if rec.config.digest not in seen:
                seen.add(rec.config.digest)
                out.append(rec)
            if len(out) == k:
                break
        return out

    def best(self, workload: Workload, target: Target | None = None) -> Record | None:
        top = self.top_k(workload, target, 1)
        return top[0] if top else None

    def measured_configs(self, workload: Workload, target: Target) -> dict[str, Record]:
        """The latest record of every configuration measured, by config digest."""
        return {r.config.digest: r for r in self.records(workload, target)}

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
            yield self._row(r)

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
