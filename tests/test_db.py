import json
import multiprocessing as mp
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from tensortune.db import (SCHEMA_VERSION, DamagedRecords, Database, DatabaseError, Target, Workload, export_jsonl,
                           import_jsonl)
from tensortune.measure import ErrorKind, MeasureResult
from tensortune.space import Config

W = Workload.make("kernel", "source v1", {"M": 64, "dtype": "float32"})
T = Target.make("cpu", "test-cpu", "x86_64", {"cc": "gcc 12"})


def test_add_best_top_k_and_failures(store):
    db = Database(store)
    db.add(W, T, MeasureResult(Config(a=1), (3e-3, 3.1e-3)))
    db.add(W, T, MeasureResult(Config(a=2), (1e-3,)), strategy="random", session="s1")
    db.add(W, T, MeasureResult.failed(Config(a=3), ErrorKind.COMPILE_ERROR, "boom"))
    db.add(W, T, MeasureResult(Config(a=2), (1.1e-3,)))
    assert db.best(W, T).config == Config(a=2)
    assert [r.config["a"] for r in db.top_k(W, T, 5)] == [2, 1]
    failed = [r for r in db.records(W, T) if not r.ok]
    assert failed[0].error is ErrorKind.COMPILE_ERROR and failed[0].message == "boom"
    other_target = Target.make("cpu", "other")
    assert db.best(W, other_target) is None
    assert db.best(W) is not None  # any target
    assert db.schema_version == SCHEMA_VERSION


def test_standing_and_deleting_by_kind_agree_on_both_backends(store):
    """A later failure of the candidate takes a success out of the best; a failure of the
    environment does not, and is what `environment=True` deletes."""
    db = Database(store)
    db.add(W, T, MeasureResult(Config(a=1), (1e-3,)))
    db.add(W, T, MeasureResult(Config(a=2), (2e-3,)))
    db.add(W, T, MeasureResult(Config(a=3), (3e-3,)))
    db.add(W, T, MeasureResult.failed(Config(a=1), ErrorKind.CRASHED, "crashed on a later run"))
    db.add(W, T, MeasureResult.failed(Config(a=2), ErrorKind.COMPILE_ERROR, "no space", "disk_full"))
    assert [r.config["a"] for r in db.top_k(W, T, 5)] == [2, 3]
    assert db.measured_configs(W, T)[Config(a=1).digest].error is ErrorKind.CRASHED
    assert db.standing_of(W, T, Config(a=2).digest).ok
    assert db.delete_records(W, environment=True) == 1
    assert db.delete_records(W, kinds=["ok"]) == 3
    assert [r.error for r in db.records(W, T)] == [ErrorKind.CRASHED]
    assert db.finished_sessions(W, T) == 0
    sid = db.start_session(W, T, "random", {"trials": 3})
    db.finish_session(sid)
    assert db.finished_sessions(W, T) == 1


def test_records_survive_reopen_and_export_import(store, tmp_path):
    path = store
    with Database(path) as db:
        for i in range(5):
            db.add(W, T, MeasureResult(Config(a=i), (1e-3 * (i + 1),)))
    db = Database(path)
    assert len(db.records(W, T)) == 5
    out = tmp_path / "records.jsonl"
    assert export_jsonl(db, out) == 5
    first = json.loads(out.read_text().splitlines()[0])
    assert first["workload"]["key"] == {"M": 64, "dtype": "float32"}
    fresh = Database(tmp_path / "fresh.db")
    assert import_jsonl(fresh, out) == 5
    assert import_jsonl(db, out) == 0  # every record is already there
    assert import_jsonl(fresh, out) == 0  # idempotent
    assert fresh.best(W, T).config == Config(a=0)


def test_corrupt_file_is_a_clear_error_and_untouched(tmp_path):
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not sqlite at all" * 100)
    before = path.read_bytes()
    with pytest.raises(DatabaseError, match="garbage.db"):
        Database(path)
    assert path.read_bytes() == before


def test_foreign_sqlite_file_is_refused(tmp_path):
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER)")
    conn.commit()
    conn.close()
    with pytest.raises(DatabaseError, match="not a tensortune database"):
        Database(path)


def test_unusable_path_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(DatabaseError, match="cannot create the folder"):
        Database(blocker / "sub" / "t.db")
    with pytest.raises(DatabaseError, match="is a directory"):
        Database(tmp_path)


def _filled(path, n=200):
    with Database(path) as db:
        for i in range(n):
            db.add(W, T, MeasureResult(Config(a=i, pad="x" * 200), (1e-3 + i * 1e-6,)))
    return path


def test_truncated_file_is_a_clear_error_and_untouched(tmp_path):
    path = _filled(tmp_path / "t.db")
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2)
    before = path.read_bytes()
    with pytest.raises(DatabaseError, match="t.db"):
        Database(path).records(W, T)
    assert path.read_bytes() == before


@pytest.mark.parametrize("column, value", [("config_json", "not json"), ("times_json", "[1,"),
                                           ("error", "no_such_kind"), ("extra_json", "{")])
def test_a_damaged_record_is_named_and_skipped_not_hiding_the_others(tmp_path, column, value):
    path = _filled(tmp_path / "t.db", 5)
    conn = sqlite3.connect(path)
    conn.execute(f"UPDATE records SET {column}=? WHERE id=3", (value,))
    conn.commit()
    conn.close()
    before = path.read_bytes()
    db = Database(path)
    with pytest.warns(DamagedRecords, match=r"t.db: record 3 is damaged"):
        records = db.records(W, T)
    assert [r.config["a"] for r in records] == [0, 1, 3, 4] and list(db.damaged) == [3]
    assert db.best(W, T).config["a"] == 0
    with pytest.warns(DamagedRecords, match="record 3"):
        assert len(list(Database(path).all_records())) == 4
    assert path.read_bytes() == before


@pytest.mark.parametrize("damage, message", [
    ("UPDATE meta SET value='abc' WHERE key='schema_version'", "schema version 'abc'"),
    ("DELETE FROM meta", "no schema version"),
    ("DROP TABLE sessions", r"lacks the table\(s\) \['sessions'\]"),
])
def test_a_damaged_schema_is_named_and_left_untouched(tmp_path, damage, message):
    path = tmp_path / "t.db"
    Database(path).close()
    conn = sqlite3.connect(path)
    conn.execute(damage)
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(DatabaseError, match=message):
        Database(path)
    assert path.read_bytes() == before


@pytest.fixture
def read_only(tmp_path):
    """Makes files read-only, for root too (chattr +i) where the file system allows."""
    made = []

    def make(path):
        path.chmod(0o444)
        if os.geteuid() == 0:
            if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(path)], check=False).returncode:
                pytest.skip("running as root without chattr +i: files cannot be made read-only")
            made.append(path)
        return path

    yield make
    for path in made:
        subprocess.run(["chattr", "-i", str(path)], check=False)


def test_a_read_only_database_can_be_read_and_a_write_is_a_clear_error(tmp_path, read_only):
    path = _filled(tmp_path / "t.db", 3)
    read_only(path)
    db = Database(path)
    assert len(db.records(W, T)) == 3 and db.best(W, T).config["a"] == 0
    assert db.records(Workload.make("never", "seen"), T) == []
    assert db.finished_sessions(W, T) == 0
    with pytest.raises(DatabaseError, match="t.db.*readonly"):
        db.add(W, T, MeasureResult(Config(a=9), (1.0,)))


def test_a_read_only_schema_1_file_is_read_as_it_is(tmp_path, read_only):
    """Shipped records written by the schema-1 code cannot be migrated in place; they are
    read as they are, with the same standing, and a write is the error."""
    path = tmp_path / "v1.db"
    shutil.copy(os.path.join(os.path.dirname(__file__), "data", "records_v1.db"), path)
    read_only(path)
    before = path.read_bytes()
    db = Database(path)
    assert db.read_only and db.schema_version == 1
    assert [r.config["a"] for r in db.records(W, T)] == [1, 2, 3, 4, 2]
    assert [r.config["a"] for r in db.top_k(W, T)] == [1]  # a=2 crashed later; a=4's disk was full
    assert set(db.measured_configs(W, T)) == {Config(a=a).digest for a in (1, 2, 3)}
    assert db.standing_of(W, T, Config(a=4).digest) is None
    with pytest.raises(DatabaseError, match="v1.db .opened read-only.*schema version 1 is read as it is"):
        db.add(W, T, MeasureResult(Config(a=9), (1.0,)))
    assert path.read_bytes() == before


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "t.db"
    Database(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(DatabaseError, match="newer"):
        Database(path)


def test_bad_import_file_names_the_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"nope": 1}\n')
    with pytest.raises(DatabaseError, match="bad.jsonl:1"):
        import_jsonl(Database(tmp_path / "t.db"), bad)


def _writer(path: str, proc: int, count: int) -> None:
    db = Database(path)
    for i in range(count):
        db.add(W, T, MeasureResult(Config(proc=proc, i=i), (1e-3 + proc * 1e-6 + i * 1e-9,)))


def test_several_processes_write_at_once_and_nothing_is_lost(store):
    path = store
    Database(path).close()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, p, 60)) for p in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    records = Database(path).records(W, T)
    assert len(records) == 240
    assert len({r.config for r in records}) == 240


RESUMABLE = textwrap.dedent("""
    import sys, time
    import tensortune as tt
    calls = open(sys.argv[2], "a")
    def slow(x):
        return x
    def counted(x):
        calls.write(f"{x}\\n"); calls.flush()
        time.sleep(float(sys.argv[3]))
        return x
    space = tt.Space({"x": list(range(12))})
    r = tt.tune(counted, space, strategy="exhaustive", budget=100, db=sys.argv[1], name="resumable",
                timer=tt.Timer(warmup_seconds=0, min_repeats=1, max_repeats=1, budget_seconds=0), progress=False)
    print("TRIALS", r.trials, "REUSED", r.reused)
""")


def test_killed_run_resumes_without_remeasuring(store, tmp_path):
    script = tmp_path / "resumable.py"
    script.write_text(RESUMABLE)
    db_path, calls = store, tmp_path / "calls.txt"
    proc = subprocess.Popen([sys.executable, str(script), str(db_path), str(calls), "0.15"])
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            n = sum(1 for _ in Database(db_path).all_records())
        except DatabaseError:
            n = 0
        if n >= 4:
            break
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    recorded = {r.config["x"] for r in Database(db_path).all_records()}
    assert 4 <= len(recorded) < 12
    calls.write_text("")
    out = subprocess.run([sys.executable, str(script), str(db_path), str(calls), "0"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    remeasured = {int(x) for x in calls.read_text().split()}
    assert remeasured.isdisjoint(recorded)
    assert remeasured | recorded == set(range(12))
    assert f"REUSED {len(recorded)}" in out.stdout
