"""Records written in groups: `Database.add_many` (one transaction) and the tuning run's
`RecordWriter` (a thread that commits whatever arrived while the previous commit ran)."""

import threading
import time

import pytest

from tensortune.db import Database, DatabaseError, Target, Workload
from tensortune.db.writer import RecordWriter
from tensortune.measure import CallableRunner, ErrorKind, MeasureResult, Timer
from tensortune.search.random_search import RandomSearch
from tensortune.space import Config, Space
from tensortune.tuner import Tuner

W = Workload.make("kernel", "source v1", {"M": 64})
T = Target.make("cpu", "test-cpu", "x86_64", {"cc": "gcc 12"})


def _results(n: int) -> list[MeasureResult]:
    out = [MeasureResult(Config(a=i), ((i + 1) * 1e-3,)) for i in range(n)]
    out.append(MeasureResult.failed(Config(a=n), ErrorKind.COMPILE_ERROR, "boom"))
    return out


def _fields(rec) -> tuple:
    return (rec.config, rec.times, rec.error, rec.message, rec.strategy, rec.session, rec.extra)


def test_add_many_commits_the_same_records_as_add_one_by_one(store):
    db = Database(store)
    one_by_one = [db.add(W, T, r, strategy="random", session="s1") for r in _results(4)]
    grouped = db.add_many(W, T, _results(4), strategy="random", session="s1")
    stored = db.records(W, T)
    assert [_fields(r) for r in stored] == [_fields(r) for r in one_by_one + grouped]
    assert db.best(W, T).config == Config(a=0) and db.add_many(W, T, []) == []


class SlowStore(Database):
    """A real store whose commits take `delay` seconds longer, and whose next `fail`
    commits fail (as a store that went away for a moment)."""

    delay, fail, calls = 0.0, 0, 0

    def add_records(self, recs):
        self.calls += 1
        time.sleep(self.delay)
        if self.fail:
            self.fail -= 1
            raise DatabaseError("cannot write to database (test): gone for a moment")
        super().add_records(recs)


def test_the_writer_groups_what_arrives_during_a_commit_and_keeps_order(store):
    db = SlowStore(store)
    db.delay = 0.05
    with RecordWriter(db, W, T, "random", "s1") as writer:
        for r in _results(20):
            writer.add(r)
        writer.flush()
        assert writer.committed == 21
        assert writer.commits < 21  # what arrived during the first commit went in one group
    assert [r.config["a"] for r in db.records(W, T)] == list(range(21))


def test_a_failed_commit_is_raised_and_its_records_kept_for_the_next(store):
    db = SlowStore(store)
    db.fail = 1
    writer = RecordWriter(db, W, T)
    for r in _results(5):
        writer.add(r)
    with pytest.raises(DatabaseError, match="gone for a moment"):
        writer.flush()
    writer.close()  # tries again: nothing lost
    assert sorted(r.config["a"] for r in db.records(W, T)) == list(range(6))


def test_a_store_that_cannot_be_written_stops_the_writer_with_its_error(tmp_path):
    db = SlowStore(tmp_path / "t.db")
    db.fail = 10**6
    writer = RecordWriter(db, W, T)
    writer.add(_results(0)[0])
    with pytest.raises(DatabaseError):
        writer.flush()
    with pytest.raises(DatabaseError):
        writer.close()
    assert not writer._thread.is_alive()


class CheckedTell(RandomSearch):
    """Random search that checks, whenever it is told results, that they are committed."""

    db: Database | None = None
    told = 0

    def tell(self, results):
        results = list(results)
        self.told += len(results)
        stored = {r.config for r in self.db.records(W, T)}
        missing = [r.config for r in results if r.config not in stored]
        assert not missing, f"told before committed: {missing}"
        super().tell(results)


def test_the_tuner_commits_every_result_before_the_strategy_hears_of_it(store):
    db = SlowStore(store)
    db.delay = 0.01
    strategy = CheckedTell(Space({"a": list(range(40))}), seed=1)
    strategy.db = db
    runner = CallableRunner(lambda a: a, Timer(warmup_seconds=0, min_repeats=1, max_repeats=1, budget_seconds=0))
    result = Tuner(Space({"a": list(range(40))}), runner, workload=W, target=T, db=db, strategy=strategy,
                   budget=24, batch_size=8, progress=False).run()
    assert result.trials == 24 and strategy.told == 24
    assert len(db.records(W, T)) == 24
    assert not [t for t in threading.enumerate() if t.name == "tensortune-record-writer"]
