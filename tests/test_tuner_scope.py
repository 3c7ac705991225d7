"""The hook on every Tuner made inside a scope (`tuner_scope`), and the fleet's use of it
(`TunerClaims`): which tuners a scope adopts, across the task scheduler's threads and
plain thread pools, and that an adopted tuner claims its candidates in the store."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import select

from tensortune.db import Database, Target, Workload
from tensortune.db.schema import claims as claims_table
from tensortune.fleet.claims import ClaimingStrategy, TunerClaims
from tensortune.measure import CallableRunner, Timer
from tensortune.space import Space
from tensortune.tasks import Task, TaskScheduler
from tensortune.tuner import Tuner
from tensortune.tuner_scope import AmbiguousTunerScope, outside_tuner_scopes, tuner_scope

SPACE = Space({"n": [1, 10, 100, 1000, 10000, 100000]})
TARGET = Target.make("cpu", "scope-test")


def _tuner(name: str = "k", db: Database | None = None, **options) -> Tuner:
    runner = CallableRunner(lambda n: sum(range(n)), Timer(warmup_seconds=0, min_repeats=2, budget_seconds=0))
    return Tuner(SPACE, runner, workload=Workload.make(name), target=TARGET, db=db, strategy="random", seed=0,
                 progress=False, **options)


def test_a_tuner_made_inside_the_scope_is_adopted_and_one_made_outside_is_not():
    adopted: list[str] = []
    before = _tuner("before")
    with tuner_scope(lambda t: adopted.append(t.workload.name)):
        inside = _tuner("inside")
        with ThreadPoolExecutor(2) as pool:  # a thread pool's threads carry no context: the process's only scope
            pooled = list(pool.map(lambda k: _tuner(f"pooled-{k}").workload.name, range(3)))
    after = _tuner("after")
    assert sorted(adopted) == sorted(["inside", *pooled])
    assert before.workload.name not in adopted and after.workload.name not in adopted and inside is not None


def test_each_scope_adopts_the_tuners_of_its_own_task_scheduler_rounds_in_their_threads():
    adopted: dict[str, list[str]] = {"a": [], "b": []}
    both_open = threading.Barrier(2)

    def compile_like(owner: str) -> None:
        """A task scheduler running rounds of two tasks at once, each making its tuner in its round's thread."""
        with tuner_scope(lambda t: adopted[owner].append(t.workload.name)):
            both_open.wait(timeout=30)

            def tune_made_here(name: str):
                def tune(n: int):
                    return _tuner(f"{owner}-{name}").run().history[:n]
                return tune
            tasks = [Task(name, tune_made_here(name)) for name in ("x", "y")]
            TaskScheduler(tasks, budget=8, trials_per_round=2, concurrency=2).run()
            both_open.wait(timeout=30)

    threads = [threading.Thread(target=compile_like, args=(owner,)) for owner in adopted]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for owner, names in adopted.items():
        assert names and {n.split("-")[0] for n in names} == {owner}, adopted
        assert {n.split("-")[1] for n in names} == {"x", "y"}


def test_a_tuner_of_a_thread_of_no_scope_while_two_are_open_is_refused_unless_said_to_be_outside():
    opened, close = threading.Barrier(3), threading.Event()

    def hold_a_scope() -> None:
        with tuner_scope(lambda t: None):
            opened.wait(timeout=30)
            close.wait(30)

    holders = [threading.Thread(target=hold_a_scope) for _ in range(2)]
    for t in holders:
        t.start()
    try:
        opened.wait(timeout=30)
        with pytest.raises(AmbiguousTunerScope, match="2 scopes are open"):
            _tuner()
        with outside_tuner_scopes():  # said to belong to none (a worker's ordinary job)
            _tuner()
    finally:
        close.set()
        for t in holders:
            t.join(30)
    _tuner()  # none open: no hook, no error


def test_tuner_claims_wrap_the_tuners_of_its_store_and_claim_what_they_measure(tmp_path):
    db = Database(tmp_path / "store.db")
    held = TunerClaims(db, "worker-a", lease_seconds=60)
    with tuner_scope(held.wrap):
        ours = _tuner("ours", db, budget=3)
        same_file = _tuner("same-file", Database(tmp_path / "store.db"), budget=2)
        elsewhere = _tuner("elsewhere", Database(tmp_path / "other.db"))
        no_store = _tuner("no-store")
        retuning = _tuner("retuning", db, retune=True)
        ours.run()
        same_file.run()
    assert isinstance(ours.strategy, ClaimingStrategy) and isinstance(same_file.strategy, ClaimingStrategy)
    assert not any(isinstance(t.strategy, ClaimingStrategy) for t in (elsewhere, no_store, retuning))
    assert not held.wrap(ours)  # claiming already: not wrapped twice
    rows = db.query(select(claims_table.c.workload_id, claims_table.c.owner, claims_table.c.config_hash))
    ids = {db.ids(Workload.make(n), TARGET)[0]: n for n in ("ours", "same-file")}
    per_workload = {name: sorted(h for w, o, h in rows if w == wid and o == "worker-a") for wid, name in ids.items()}
    assert len(rows) == 5 and {n: len(h) for n, h in per_workload.items()} == {"ours": 3, "same-file": 2}
    measured = sorted(r.config.digest for r in db.records(Workload.make("ours"), TARGET))
    assert per_workload["ours"] == measured  # each candidate claimed before it was measured
    assert held.renew() == 5 and held.release() == 5
    assert db.query(select(claims_table.c.owner)) == []


def test_a_search_a_lost_job_stops_proposes_nothing_more(tmp_path):
    db = Database(tmp_path / "store.db")
    lost = threading.Event()
    held = TunerClaims(db, "worker-a", lease_seconds=60, stop=lost)
    with tuner_scope(held.wrap):
        tuner = _tuner("k", db, budget=4)
    lost.set()
    assert tuner.run().trials == 0 and db.records(Workload.make("k"), TARGET) == []
