"""The records store's tables (SQLAlchemy Core), its schema version and migrations.

One schema serves SQLite and PostgreSQL. `meta` holds `schema_version`; opening an
older store runs `MIGRATIONS[k]` (version k to k + 1) in order, each in one transaction
(on PostgreSQL under an advisory lock, so hosts opening one store at once migrate it
once).

Example:
    >>> sorted(TABLES)
    ['claims', 'jobs', 'meta', 'records', 'sessions', 'targets', 'workloads']
"""

from __future__ import annotations

import json
from collections.abc import Callable

from sqlalchemy import (BigInteger, Column, Connection, Float, ForeignKey, Index, Integer, MetaData, PrimaryKeyConstraint,
                        Table, Text, UniqueConstraint, select, text, update)

SCHEMA_VERSION = 2

metadata = MetaData()
# SQLite keeps `INTEGER PRIMARY KEY` (the row id); PostgreSQL gets a 64-bit identity
_ID = BigInteger().with_variant(Integer(), "sqlite")

meta = Table("meta", metadata, Column("key", Text, primary_key=True), Column("value", Text, nullable=False))

workloads = Table(
    "workloads", metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("name", Text, nullable=False), Column("source_hash", Text, nullable=False),
    Column("key_json", Text, nullable=False),
    UniqueConstraint("name", "source_hash", "key_json"))

targets = Table(
    "targets", metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("kind", Text, nullable=False), Column("device", Text, nullable=False),
    Column("arch", Text, nullable=False), Column("versions_json", Text, nullable=False),
    UniqueConstraint("kind", "device", "arch", "versions_json"))

records = Table(
    "records", metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("workload_id", _ID, ForeignKey("workloads.id"), nullable=False),
    Column("target_id", _ID, ForeignKey("targets.id"), nullable=False),
    Column("config_json", Text, nullable=False), Column("config_hash", Text, nullable=False),
    Column("times_json", Text, nullable=False), Column("time", Float), Column("error", Text),
    Column("message", Text, nullable=False, server_default=""),
    Column("compile_seconds", Float, nullable=False, server_default="0"),
    Column("run_seconds", Float, nullable=False, server_default="0"),
    Column("strategy", Text, nullable=False, server_default=""),
    Column("session", Text, nullable=False, server_default=""),
    Column("created_at", Float, nullable=False),
    Column("extra_json", Text, nullable=False, server_default="{}"),
    # why the environment (not the candidate) failed it; a copy of extra["environment"] (v2)
    Column("environment", Text),
    Index("records_by_time", "workload_id", "target_id", "time"),
    Index("records_by_config", "workload_id", "target_id", "config_hash"))

sessions = Table(
    "sessions", metadata,
    Column("id", Text, primary_key=True),
    Column("workload_id", _ID, nullable=False), Column("target_id", _ID, nullable=False),
    Column("strategy", Text, nullable=False), Column("budget_json", Text, nullable=False),
    Column("started_at", Float, nullable=False), Column("finished_at", Float),
    Column("status", Text, nullable=False))

# fleet mode (v2): tuning jobs that workers take, and candidates claimed before measuring
jobs = Table(
    "jobs", metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("kind", Text, nullable=False), Column("spec_json", Text, nullable=False),
    Column("spec_digest", Text, nullable=False), Column("budget_json", Text, nullable=False),
    Column("strategy", Text, nullable=False), Column("status", Text, nullable=False),
    Column("owner", Text, nullable=False, server_default=""), Column("lease_expires", Float),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("trials_done", Integer, nullable=False, server_default="0"),
    Column("created_at", Float, nullable=False), Column("started_at", Float), Column("finished_at", Float),
    Column("workload_id", _ID), Column("target_id", _ID),
    Column("message", Text, nullable=False, server_default=""),
    Index("jobs_by_status", "status", "id"))

claims = Table(
    "claims", metadata,
    Column("workload_id", _ID, nullable=False), Column("target_id", _ID, nullable=False),
    Column("config_hash", Text, nullable=False), Column("owner", Text, nullable=False),
    Column("expires_at", Float, nullable=False),
    PrimaryKeyConstraint("workload_id", "target_id", "config_hash"))

TABLES = frozenset(metadata.tables)
V1_TABLES = frozenset({"meta", "workloads", "targets", "records", "sessions"})


def create_fresh(conn: Connection) -> None:
    """Every table of the current version, in an empty store (inside the caller's transaction)."""
    metadata.create_all(conn)
    conn.execute(meta.insert().values(key="schema_version", value=str(SCHEMA_VERSION)))


def _v1_to_v2(conn: Connection) -> None:
    """v2: records say whether the environment failed them in a column (so both backends
    can query it without JSON functions); the fleet's jobs and claims tables."""
    conn.execute(text("ALTER TABLE records ADD COLUMN environment TEXT"))
    rows = conn.execute(select(records.c.id, records.c.extra_json).where(records.c.error.is_not(None))).all()
    for rid, extra in rows:
        try:
            cause = json.loads(extra).get("environment")
        except (ValueError, TypeError, AttributeError, RecursionError):
            continue  # a damaged row stays damaged; reading it skips it
        if cause:
            conn.execute(update(records).where(records.c.id == rid).values(environment=str(cause)))
    metadata.create_all(conn, tables=[jobs, claims])


# The oldest version read as it is where it cannot be migrated (a read-only file of shipped
# records): the environment column of v2 is then taken from extra_json, as v1 did.
READABLE_FROM = 1

# Each entry upgrades a store from version k to k + 1, inside one transaction.
MIGRATIONS: dict[int, Callable[[Connection], None]] = {1: _v1_to_v2}
