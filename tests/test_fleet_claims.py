"""Claims of candidates a run never measured, and bounded waits on other workers' claims,
on both backends: a run that ends mid-batch drops the claims of what it did not measure
and proposes those candidates again next time; two searches, each holding a candidate
the other waits for, give up on it instead of waiting for each other forever."""

import threading
import time
from collections import Counter

from sqlalchemy import select

from tensortune.db import Database, Target, Workload
from tensortune.db.schema import claims as claims_table
from tensortune.fleet import (JOB_KINDS, CandidateClaims, ClaimingStrategy, JobKind, JobQueue, Tuning, Worker,
                              register_job_kind)
from tensortune.measure import CallableRunner, CandidateError, ErrorKind, Timer
from tensortune.search import SearchStrategy, create_strategy, register_strategy
from tensortune.search import base as search_base
from tensortune.space import Config, Space
from tensortune.tuner import Budget, Tuner

W, T = Workload.make("fleet.claims", "src"), Target.make("cpu", "claims-test")
QUICK = Timer(warmup_seconds=0, min_repeats=2, budget_seconds=0)


class InOrder(SearchStrategy):
    """Proposes the given configurations (or values of `i`) in that order, each once."""

    name = "in_order"

    def __init__(self, space: Space, order: list[Config] | tuple[int, ...], seed: int | None = None,
                 budget: int | None = None) -> None:
        super().__init__(space, seed, budget)
        self.order = [c if isinstance(c, Config) else Config(i=c) for c in order]

    def ask(self, n: int) -> list[Config]:
        out = [c for c in self.order if c not in self.seen][:n]
        self.seen.update(out)
        return out


def _claimed(db: Database) -> dict[str, list[str]]:
    rows = db.query(select(claims_table.c.owner, claims_table.c.config_hash))
    out: dict[str, list[str]] = {}
    for owner, digest in rows:
        out.setdefault(owner, []).append(digest)
    return {owner: sorted(d) for owner, d in out.items()}


def _measured(db: Database) -> Counter:
    """How many times each configuration was measured (the environment's failures left out)."""
    return Counter(r.config["i"] for r in db.records(W, T) if not r.to_result().environment)


def test_a_run_that_ends_mid_batch_leaves_no_claim_on_what_it_did_not_measure_and_proposes_it_next(store):
    db = Database(store)
    space = Space({"i": list(range(6))})
    slow_once = threading.Event()

    def kernel(i: int) -> int:
        if not slow_once.is_set():  # the first candidate outlasts the run's seconds
            slow_once.set()
            time.sleep(1.5)
        return i

    strategy = ClaimingStrategy(create_strategy("exhaustive", space),
                                CandidateClaims(db, W, T, "a", lease_seconds=60), poll=0.05)
    tuner = Tuner(space, CallableRunner(kernel, QUICK), workload=W, target=T, db=db, strategy=strategy,
                  batch_size=4, budget=Budget(seconds=1.0), progress=False)
    first = tuner.run()
    assert first.trials == 1 and _measured(db) == {0: 1}  # 0, 1, 2 and 3 were claimed; out of time after 0
    assert _claimed(db) == {"a": [Config(i=0).digest]}  # only the measured one's claim is left (until the job ends)
    other = CandidateClaims(Database(store), W, T, "b", lease_seconds=60)
    assert other.take(Config(i=2)) and other.release([Config(i=2)]) == 1  # free for another worker at once
    tuner.budget = Budget(trials=3)
    second = tuner.run()
    assert [r.config["i"] for r in second.history[second.reused:]] == [1, 2, 3]  # taken back first
    assert _measured(db) == {0: 1, 1: 1, 2: 1, 3: 1} and strategy.gave_up == 0


def test_two_searches_each_holding_what_the_other_waits_for_give_up_instead_of_waiting_forever(store):
    space = Space({"i": [0, 1]})
    both_claimed = threading.Barrier(2, timeout=60)
    environment_fails = threading.Event()
    environment_fails.set()

    def searcher(owner: str, order: list[int]) -> tuple[Tuner, ClaimingStrategy]:
        """Proposes `order`; the environment fails its first candidate (for as long as
        `environment_fails` is set), which it holds, so it waits for the other's."""
        calls: list[int] = []

        def kernel(i: int) -> int:
            if not calls:
                both_claimed.wait()  # both have claimed their first candidate
            calls.append(i)
            if environment_fails.is_set() and i == order[0]:
                raise CandidateError(ErrorKind.RUNTIME_ERROR, "the device was taken", environment="device busy")
            return i

        db = Database(store)
        strategy = ClaimingStrategy(InOrder(space, [Config(i=i) for i in order]),
                                    CandidateClaims(db, W, T, owner, lease_seconds=600), poll=0.05, wait_seconds=0.5)
        return Tuner(space, CallableRunner(kernel, QUICK), workload=W, target=T, db=db, strategy=strategy,
                     batch_size=1, budget=Budget(trials=2), progress=False), strategy

    (tuner_a, a), (tuner_b, b) = searcher("a", [0, 1]), searcher("b", [1, 0])
    ended: dict[str, int] = {}
    threads = [threading.Thread(target=lambda n=n, t=t: ended.update({n: t.run().trials}), daemon=True)
               for n, t in (("a", tuner_a), ("b", tuner_b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    stuck = [t for t in threads if t.is_alive()]
    for search in (a, b):
        search.stop.set()  # lets searches that are stuck go (before the fix, they wait for each other)
    assert not stuck and set(ended) == {"a", "b"}, "two searches waited for each other's claims"
    assert a.gave_up + b.gave_up >= 1  # on the other's candidate: neither measures what the other holds
    db = Database(store)
    measured = _measured(db)
    assert set(measured.values()) <= {1}
    left = [d for digests in _claimed(db).values() for d in digests]
    assert sorted(left) == sorted(Config(i=i).digest for i in measured)  # what no run measured is claimed by no one
    environment_fails.clear()  # the next runs measure what is left, each candidate once
    for search in (a, b):
        search.stop.clear()
    again = tuner_a.run().trials + tuner_b.run().trials
    assert _measured(db) == {0: 1, 1: 1} and sum(ended.values()) + again == 2


def test_two_workers_whose_jobs_each_hold_what_the_other_waits_for_both_finish(store):
    """The same deadlock between two `Worker`s whose heartbeats keep renewing the claims:
    each job's search gives up on the other's candidate after two leases."""
    space = Space({"i": [0, 1]})
    both_claimed = threading.Barrier(2, timeout=60)

    def make(spec: dict, jobs: int | None) -> Tuning:
        calls: list[int] = []

        def kernel(i: int) -> int:
            if not calls:
                both_claimed.wait()
            calls.append(i)
            if i == spec["fails"]:
                raise CandidateError(ErrorKind.RUNTIME_ERROR, "the device was taken", environment="device busy")
            return i
        return Tuning(space, CallableRunner(kernel, QUICK), None, W, T, None, f"fails {spec['fails']}")

    register_job_kind("claims_test", JobKind(check=dict, make=make, describe=str))
    register_strategy("claims_test_up", InOrder, order=(0, 1))
    register_strategy("claims_test_down", InOrder, order=(1, 0))
    db = Database(store)
    queue = JobQueue(db)
    jobs = [queue.enqueue("claims_test", {"fails": 0}, {"trials": 2}, "claims_test_up"),
            queue.enqueue("claims_test", {"fails": 1}, {"trials": 2}, "claims_test_down")]
    workers = [Worker(Database(store), owner=f"w{k}", lease_seconds=1.0, poll_seconds=0.1) for k in range(2)]
    threads = [threading.Thread(target=w.run, kwargs={"max_jobs": 1}, daemon=True) for w in workers]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        stuck = [t for t in threads if t.is_alive()]
    finally:
        for w in workers:
            w.interrupt()  # lets workers that are stuck go (before the fix, they wait for each other)
        for t in threads:
            t.join(30)
        JOB_KINDS.pop("claims_test")
        for name in ("claims_test_up", "claims_test_down"):
            search_base._REGISTRY.pop(name)
            search_base._BOUND_OPTIONS.pop(name, None)
    assert not stuck, "two jobs waited for each other's claims"
    done = [queue.get(j) for j in jobs]
    assert [j.status for j in done] == ["done", "done"], done
    assert any("left to the other workers that held them" in j.message for j in done), done
    assert _claimed(db) == {} and set(_measured(db).values()) <= {1}
