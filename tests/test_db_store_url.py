"""Records stores named by URL: what each URL means, the errors of those the tool cannot
use, an SQLite file made by the previous schema migrated, and every `db` command on both
backends."""

import json
import shutil
import sqlite3
import sys
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from tensortune.cli.main import cli
from tensortune.db import SCHEMA_VERSION, Database, DatabaseError, StoreURLError, Target, Workload, store_location
from tensortune.measure import ErrorKind, MeasureResult
from tensortune.settings import Settings
from tensortune.space import Config

W = Workload.make("kernel", "source v1", {"M": 64, "dtype": "float32"})
T = Target.make("cpu", "test-cpu", "x86_64", {"cc": "gcc 12"})
V1_FILE = Path(__file__).parent / "data" / "records_v1.db"  # written by the schema-1 Database, 5 records


def test_paths_and_sqlite_urls_name_the_same_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Database("sqlite:///rel/t.db").add(W, T, MeasureResult(Config(a=1), (1e-3,)))
    assert len(Database(tmp_path / "rel" / "t.db").records(W, T)) == 1
    assert len(Database("rel/t.db").records(W, T)) == 1
    absolute = tmp_path / "abs.db"
    Database(f"sqlite:///{absolute}").add(W, T, MeasureResult(Config(a=2), (1e-3,)))
    assert Database(str(absolute)).best(W, T).config == Config(a=2)
    assert store_location("sqlite://").path == Path(":memory:")
    assert Settings.from_env({"TENSORTUNE_DB": "sqlite:///rel/t.db"}).db_path == "sqlite:///rel/t.db"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["abs.db", "abs.db-shm", "abs.db-wal", "rel"]


@pytest.mark.parametrize("url, message", [
    ("sqlite:t.db", "sqlite:t.db: not a valid URL"),
    ("sqlite://host/t.db", "an SQLite URL names a file, not a host"),
    ("sqlite+other:///t.db", "driver 'other' is not supported"),
    ("mysql://db.lan/records", "unknown scheme 'mysql'; use a path, sqlite:///PATH or postgresql://"),
    ("postgresql://tt:secret@db.lan", "names no database"),
    ("postgresql+asyncpg://tt@db.lan/x", "driver 'asyncpg' is not supported"),
    ("postgresql://tt:secret@127.0.0.1:1/records", "cannot connect to records store "
                                                   "postgresql://tt:***@127.0.0.1:1/records: "),
])
def test_a_url_the_tool_cannot_use_is_a_one_line_error_and_makes_nothing(tmp_path, monkeypatch, url, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreURLError if "connect" not in message else DatabaseError) as caught:
        Database(url)
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert "secret" not in str(caught.value)
    out = CliRunner().invoke(cli, ["--db", url, "db", "list"])
    assert out.exit_code == 1 and message in out.output and "Traceback" not in out.output, out.output
    monkeypatch.setenv("TENSORTUNE_DB", url)
    out = CliRunner().invoke(cli, ["db", "list"])
    assert out.exit_code == 1 and message in out.output, out.output
    assert list(tmp_path.iterdir()) == []  # never a folder named sqlite: or postgresql:


def test_postgresql_without_its_driver_is_a_one_line_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(DatabaseError, match=r"PostgreSQL needs psycopg; pip install 'tensortune\[postgres\]'"):
        Database("postgresql://tt@127.0.0.1/records")


def test_a_file_made_by_schema_1_is_migrated_and_keeps_every_record(tmp_path):
    path = tmp_path / "v1.db"
    shutil.copy(V1_FILE, path)
    raw = sqlite3.connect(path)
    assert raw.execute("SELECT value FROM meta").fetchone() == ("1",)
    assert "environment" not in {r[1] for r in raw.execute("PRAGMA table_info(records)")}
    raw.close()
    db = Database(path)
    assert db.schema_version == SCHEMA_VERSION == 2
    records = db.records(W, T)
    assert [r.config["a"] for r in records] == [1, 2, 3, 4, 2] and records[0].created_at == 1.7e9
    # the crash recorded after a=2's success still takes it out; the full disk is the environment's
    assert [r.config["a"] for r in db.top_k(W, T)] == [1]
    assert set(db.measured_configs(W, T)) == {Config(a=a).digest for a in (1, 2, 3)}
    assert db.finished_sessions(W, T) == 1
    db.add(W, T, MeasureResult(Config(a=5), (1e-4,)))
    assert db.best(W, T).config == Config(a=5)
    assert db.delete_records(environment=True) == 1
    db.close()
    again = Database(path)  # opening a migrated file migrates nothing
    assert again.schema_version == 2 and len(again.records(W, T)) == 5


def test_a_postgresql_database_of_another_program_or_a_newer_schema_is_refused(postgres_store):
    url = postgres_store
    with psycopg.connect(url.split("?")[0], options=f"-csearch_path={url.rsplit('%3D', 1)[1]}",
                         autocommit=True) as conn:
        conn.execute("CREATE TABLE users (id INTEGER)")
        with pytest.raises(DatabaseError, match=r"is not a tensortune database \(tables: \['users'\]\)"):
            Database(url)
        conn.execute("DROP TABLE users")
        Database(url).close()
        conn.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    with pytest.raises(DatabaseError, match="schema version 99, newer than this tensortune understands"):
        Database(url)


def _seed(url):
    db = Database(url)
    for i, t in enumerate((4e-3, 2e-3, 3e-3)):
        db.add(W, T, MeasureResult(Config(BLOCK=16 * (i + 1)), (t,)), strategy="random")
    db.add(W, T, MeasureResult.failed(Config(BLOCK=64), ErrorKind.COMPILE_ERROR, "no"))
    db.close()


def test_every_db_command_works_on_both_backends(store, tmp_path):
    _seed(store)
    run = CliRunner()

    def ok(*args):
        out = run.invoke(cli, ["--db", store, *args])
        assert out.exit_code == 0, (args, out.output)
        return out.output

    assert json.loads(ok("db", "list", "--json"))[0]["records"] == 4
    assert "BLOCK" in ok("db", "show", "1")
    assert [r["config"]["BLOCK"] for r in json.loads(ok("db", "best", "1", "-k", "3", "--json"))] == [32, 48, 16]
    export = tmp_path / "r.jsonl"
    assert "exported 4 records" in ok("db", "export", str(export))
    assert "deleted 1 record(s)" in ok("db", "delete", "--failed", "--yes")
    assert "imported 1 new records" in ok("db", "import", str(export))
    assert "deleted 4 record(s)" in ok("db", "delete", "1", "--yes")
    assert "secret" not in ok("db", "list")


def test_a_lost_server_connection_is_made_again_and_the_record_kept(postgres_store):
    db = Database(postgres_store)
    db.add(W, T, MeasureResult(Config(a=1), (1e-3,)))
    pid = db.query(__import__("sqlalchemy").text("SELECT pg_backend_pid()"))[0][0]
    with psycopg.connect(postgres_store.split("?")[0], autocommit=True) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0]
    db.add(W, T, MeasureResult(Config(a=2), (2e-3,)))  # on a new connection
    assert [r.config["a"] for r in Database(postgres_store).records(W, T)] == [1, 2]


def test_the_store_writes_benchmark_runs_on_both_backends_and_writes_its_json(tmp_path):
    """benchmarks/store_writes.py at a tiny size, so that an API change cannot break it unseen."""
    import os
    import subprocess

    from conftest import postgres_url

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "writes.json"
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    done = subprocess.run([sys.executable, str(root / "benchmarks" / "store_writes.py"), "--processes", "1", "2",
                           "--records", "5", "--rounds", "1", "--postgres", postgres_url(), "--json", str(out)],
                          env=env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    rates = json.loads(out.read_text())["median_records_per_second"]
    assert set(rates) == {"1", "2"} and all(r["sqlite"] > 0 and r["postgresql"] > 0 for r in rates.values())


def _open_and_count(path, out):
    db = Database(path)
    out.put((db.schema_version, len(db.records(W, T))))


def test_processes_opening_a_schema_1_file_at_once_migrate_it_once(tmp_path):
    import multiprocessing as mp

    path = tmp_path / "v1.db"
    shutil.copy(V1_FILE, path)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_open_and_count, args=(str(path), out)) for _ in range(3)]
    for p in procs:
        p.start()
    seen = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert seen == [(SCHEMA_VERSION, 5)] * 3
    columns = [r[1] for r in sqlite3.connect(path).execute("PRAGMA table_info(records)")]
    assert columns.count("environment") == 1
