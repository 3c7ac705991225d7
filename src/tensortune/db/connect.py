"""Opening a records store: an SQLite file (WAL, autocommit) or a PostgreSQL server,
checked to be a tensortune store, created or migrated to the current schema.

An SQLite file that is not a tensortune database, or is corrupt or unwritable, is a
clear `DatabaseError` and is never overwritten; one in a folder this process cannot
write is opened read-only. A server that cannot be reached, or a missing driver, is a
one-line `DatabaseError` too.

Example:
    >>> from tensortune.db.url import store_location
    >>> store = open_store(store_location(":memory:"))
    >>> store.conn.dialect.name, store.read_only
    ('sqlite', False)
"""

from __future__ import annotations

import os
import sqlite3
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, create_engine, inspect, select
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.pool import NullPool, StaticPool

from . import schema
from .errors import DatabaseError
from .url import StoreLocation

_ADVISORY_LOCK = 0x7E5E7  # PostgreSQL: one opener at a time creates or migrates a store


@dataclass
class OpenStore:
    conn: Connection
    read_only: bool = False
    version: int = schema.SCHEMA_VERSION


def first_line(exc: BaseException) -> str:
    """The driver's own message of an SQLAlchemy error, on one line."""
    orig = getattr(exc, "orig", None) or exc
    lines = [ln.strip() for ln in str(orig).splitlines() if ln.strip()]
    return lines[0] if lines else type(orig).__name__


def open_store(where: StoreLocation) -> OpenStore:
    if where.is_server:
        return _open_postgres(where)
    return _open_sqlite(where)


@contextmanager
def transaction(conn: Connection) -> Iterator[Connection]:
    """One transaction that takes the write lock at once on SQLite (BEGIN IMMEDIATE, so
    two writers never deadlock upgrading a read lock); committed, or rolled back on error."""
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.commit()
    except BaseException:
        conn.rollback()
        raise


# ---- PostgreSQL -------------------------------------------------------------------------
def _open_postgres(where: StoreLocation) -> OpenStore:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise DatabaseError(f"records store {where.shown}: PostgreSQL needs psycopg; "
                            "pip install 'tensortune[postgres]'") from None
    engine = create_engine(where.url, poolclass=NullPool, connect_args={"connect_timeout": 10})
    try:
        conn = engine.connect()
    except SQLAlchemyError as exc:
        raise DatabaseError(f"cannot connect to records store {where.shown}: {first_line(exc)}") from None
    try:
        with transaction(conn):
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_ADVISORY_LOCK})")
            tables = set(inspect(conn).get_table_names())
            _check_tables(where.shown, tables)
            if not tables:
                schema.create_fresh(conn)
        _upgrade(conn, where.shown)
    except DBAPIError as exc:
        conn.close()
        raise DatabaseError(f"cannot use records store {where.shown}: {first_line(exc)}") from None
    except BaseException:
        conn.close()
        raise
    return OpenStore(conn)


def _check_tables(shown: str, tables: set[str]) -> None:
    if tables and "meta" not in tables:
        raise DatabaseError(f"{shown} is not a tensortune database (tables: {sorted(tables)[:8]}); "
                            "it was left untouched (give tensortune a database of its own)")
    if tables and not schema.V1_TABLES <= tables:
        raise DatabaseError(f"{shown} lacks the table(s) {sorted(schema.V1_TABLES - tables)} of a tensortune "
                            "database (damaged, or made by something else); it was left untouched")


# ---- SQLite ---------------------------------------------------------------------------
def _open_sqlite(where: StoreLocation) -> OpenStore:
    path = where.path
    shown = where.shown
    memory = shown == ":memory:"
    if not memory:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DatabaseError(f"cannot create the folder for database {shown}: {exc}") from exc
        if path.is_dir():
            raise DatabaseError(f"database path {shown} is a directory")
    existed = memory or path.exists()
    try:
        raw = sqlite3.connect(str(path), timeout=60, isolation_level=None, check_same_thread=False)
        raw.execute("PRAGMA busy_timeout = 60000")
        tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        _check_tables(shown, tables)
        if not memory:
            _retry_locked(lambda: raw.execute("PRAGMA journal_mode = WAL"))
        raw.execute("PRAGMA synchronous = NORMAL")
        conn = _wrap(raw)
        if not tables:
            with transaction(conn):
                if not _has_meta(conn):  # unless another process made it meanwhile
                    schema.create_fresh(conn)
        version = _upgrade(conn, shown)
    except DBAPIError as exc:
        return _sqlite_failed(where, existed, exc.orig)
    except sqlite3.DatabaseError as exc:
        return _sqlite_failed(where, existed, exc)
    return OpenStore(conn, read_only=version < schema.SCHEMA_VERSION, version=version)


def _retry_locked(statement: Callable[[], Any], seconds: float = 30.0) -> Any:
    """Run `statement`, again while SQLite says the database is locked: a change of journal
    mode fails at once, past the busy timeout, while another process is opening a new
    store (ranks of one job starting together)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return statement()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _has_meta(conn: Connection) -> bool:
    return conn.exec_driver_sql("SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'").first() is not None


def _wrap(raw: sqlite3.Connection) -> Connection:
    """An SQLAlchemy connection over an opened sqlite3 connection (autocommit at the
    driver: every statement outside `transaction` commits at once)."""
    engine = create_engine("sqlite://", creator=lambda: raw, poolclass=StaticPool)
    return engine.connect()


def _sqlite_failed(where: StoreLocation, existed: bool, exc: BaseException) -> OpenStore:
    path, shown = where.path, where.shown
    if not existed:
        raise DatabaseError(f"cannot create database {shown}: {exc} (is its folder writable?)") from None
    if isinstance(exc, sqlite3.OperationalError) and not os.access(path.parent, os.W_OK | os.X_OK) \
            or "unable to open" in str(exc) and os.access(path, os.R_OK):
        return _open_sqlite_read_only(where, exc)
    raise DatabaseError(f"cannot use database {shown}: {exc} (is it corrupt, or it or its folder "
                        f"unwritable? it was left untouched)") from None


def _open_sqlite_read_only(where: StoreLocation, cause: BaseException) -> OpenStore:
    """A database whose folder cannot be written (shipped records): SQLite cannot make
    its lock files there, so it is read without them. Records still in a write-ahead
    log cannot be read that way, which is an error rather than a silent omission."""
    path: Path = where.path
    wal = Path(f"{path}-wal")
    quoted = urllib.parse.quote(str(path.resolve()))
    modes = ["mode=ro"] + ([] if wal.exists() and wal.stat().st_size else ["immutable=1"])
    last: BaseException = cause
    for mode in modes:
        try:
            raw = sqlite3.connect(f"file:{quoted}?{mode}", uri=True, timeout=60, isolation_level=None,
                                  check_same_thread=False)
            tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if not schema.V1_TABLES <= tables:
                raise DatabaseError(f"{where.shown} is not a tensortune database (tables: {sorted(tables)}); "
                                    "it was left untouched")
            conn = _wrap(raw)
            version = _upgrade(conn, where.shown, read_only=True)
            return OpenStore(conn, read_only=True, version=version)
        except DBAPIError as exc:
            last = exc.orig
        except sqlite3.DatabaseError as exc:
            last = exc
    hint = " (its write-ahead log holds records that need a writable folder)" if wal.exists() else ""
    raise DatabaseError(f"cannot use database {where.shown}: {last}{hint}; it was left untouched") from None


# ---- versions -----------------------------------------------------------------------------
def stored_version(conn: Connection, shown: str) -> int:
    row = conn.execute(select(schema.meta.c.value).where(schema.meta.c.key == "schema_version")).first()
    try:
        return int(row[0])
    except (TypeError, ValueError):
        found = "no schema version" if row is None else f"schema version {row[0]!r}"
        raise DatabaseError(f"{shown} has {found}: damaged, or not a tensortune database; "
                            "it was left untouched") from None


def _upgrade(conn: Connection, shown: str, read_only: bool = False) -> int:
    """Migrate an older store to `schema.SCHEMA_VERSION`, one version per transaction;
    the version is read again under the write lock, so concurrent openers migrate once.
    Returns the version the store is at: an older one (readable as it is, from
    `schema.READABLE_FROM` on) when it cannot be written, such as shipped records."""
    version = stored_version(conn, shown)
    conn.commit()
    if version > schema.SCHEMA_VERSION:
        raise DatabaseError(f"{shown} has schema version {version}, newer than this "
                            f"tensortune understands ({schema.SCHEMA_VERSION}); upgrade tensortune")
    if version < schema.SCHEMA_VERSION and read_only:
        return _readable(version, shown)
    try:
        return _migrate(conn, shown, version)
    except DBAPIError as exc:
        if conn.dialect.name == "sqlite" and "readonly" in str(exc.orig):
            return _readable(version, shown)  # the file itself cannot be written
        raise


def _readable(version: int, shown: str) -> int:
    if version < schema.READABLE_FROM:
        raise DatabaseError(f"{shown} has schema version {version} and needs an upgrade, which a "
                            "read-only file or folder does not allow; copy it somewhere writable")
    return version


def _migrate(conn: Connection, shown: str, version: int) -> int:
    while version < schema.SCHEMA_VERSION:
        with transaction(conn):
            if conn.dialect.name == "postgresql":
                conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_ADVISORY_LOCK})")
            version = stored_version(conn, shown)
            if version >= schema.SCHEMA_VERSION:
                break
            if version not in schema.MIGRATIONS:
                raise DatabaseError(f"{shown}: no migration from schema version {version}")
            schema.MIGRATIONS[version](conn)
            conn.execute(schema.meta.update().where(schema.meta.c.key == "schema_version")
                         .values(value=str(version + 1)))
    return version
