"""Fleet mode on both backends: the job queue's atomic claims and leases, candidate
claims (taken by exactly one of many processes), and real `tensortune worker` processes
tuning the C matmul into one store, one of them killed mid-job."""

import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from tensortune.cli.main import cli
from tensortune.db import Database, Target, Workload
from tensortune.fleet import CandidateClaims, ClaimingStrategy, JobQueue, Worker, job_savings
from tensortune.measure import MeasureResult
from tensortune.search import create_strategy
from tensortune.space import Config, Space

SRC = str(Path(__file__).resolve().parents[1] / "src")
W, T = Workload.make("fleet.kernel", "src"), Target.make("cpu", "fleet-test")
MATMUL = {"m": 24, "n": 24, "k": 24}


def test_a_job_is_taken_by_one_worker_and_again_once_its_lease_expires(store):
    q = JobQueue(Database(store), max_attempts=2)
    first = q.enqueue("c_matmul", MATMUL, {"trials": 4}, "random")
    assert q.enqueue("c_matmul", MATMUL, {"trials": 4}, "random") == first  # not queued twice
    second = q.enqueue("c_matmul", MATMUL, {"trials": 8}, "random")
    a = q.claim("a", lease_seconds=0.3)
    b = q.claim("b", lease_seconds=60)
    assert (a.id, b.id, a.owner, a.attempts) == (first, second, "a", 1)
    assert q.claim("c", lease_seconds=60) is None
    assert not q.finish(first, "b") and q.renew(first, "a", 0.3, trials_done=3)
    time.sleep(0.4)  # a died: its lease runs out
    again = q.claim("c", lease_seconds=0.3)
    assert (again.id, again.attempts, again.trials_done) == (first, 2, 3)
    assert not q.renew(first, "a", 60)  # a, back to life, learns the job is not its own
    time.sleep(0.4)
    assert q.claim("d", lease_seconds=60) is None  # lost twice: failed, not taken forever
    failed = q.get(first)
    assert failed.status == "failed" and "lost 2 times" in failed.message
    assert q.give_back(second, "b") and q.claim("e", 60).id == second
    assert q.finish(second, "e") and q.get(second).status == "done"


def _claimer(store: str, owner: str, configs: int, out) -> None:
    claims = CandidateClaims(Database(store), W, T, owner, lease_seconds=600)
    out.put([i for i in range(configs) if claims.take(Config(i=i))])


def test_each_candidate_is_claimed_by_exactly_one_of_many_processes(store):
    Database(store).close()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_claimer, args=(store, f"p{p}", 60, out)) for p in range(4)]
    for p in procs:
        p.start()
    taken = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert sorted(i for t in taken for i in t) == list(range(60))


def test_claims_expire_and_a_claiming_search_never_proposes_what_another_holds(store):
    db = Database(store)
    space = Space({"i": list(range(6))})
    a = CandidateClaims(db, W, T, "a", lease_seconds=60)
    b = CandidateClaims(Database(store), W, T, "b", lease_seconds=0.2)
    assert b.take(Config(i=5)) and not a.take(Config(i=5))
    time.sleep(0.3)
    assert a.take(Config(i=5)) and not b.take(Config(i=5))  # b's claim expired; a's is live
    search_a = ClaimingStrategy(create_strategy("exhaustive", space), a, poll=0.05)
    search_b = ClaimingStrategy(create_strategy("exhaustive", space), b, poll=0.05)
    assert search_a.ask(2) == [Config(i=0), Config(i=1)]
    assert search_b.ask(2) == [Config(i=2), Config(i=3)]  # 0 and 1 are a's
    db.add(W, T, MeasureResult(Config(i=0), (1e-3,)))  # a measured 0 and released its claims
    a.release()
    assert a.take(Config(i=5))
    assert search_b.ask(3) == [Config(i=1), Config(i=4)]  # 0 was told to it, 5 is a's
    assert search_b.told_from_others == 1 and Config(i=0) in search_b.inner.seen


def _worker(store, *args, **popen):
    env = {**os.environ, "PYTHONPATH": SRC, "TENSORTUNE_PROGRESS": "0"}
    return subprocess.Popen([sys.executable, "-m", "tensortune.cli.main", "--db", store, "worker", "--jobs", "1",
                             *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def _measured(db):
    """config digests measured per workload, failures of the environment left out."""
    return {w: Counter(r.config.digest for r in db.records(w) if not r.to_result().environment)
            for w, _, _ in db.workloads()}


@pytest.mark.slow
def test_two_worker_processes_share_the_queue_and_never_measure_a_candidate_twice(store):
    out = CliRunner().invoke(cli, ["--db", store, "queue", "add", "c_matmul", json.dumps(MATMUL), "--trials", "3",
                                   "--strategy", "exhaustive"])
    assert out.exit_code == 0, out.output
    q = JobQueue(Database(store))
    q.enqueue("c_matmul", MATMUL, {"trials": 4}, "exhaustive")  # the same kernel, tuned at once by the other
    q.enqueue("c_matmul", {"m": 16, "n": 16, "k": 16}, {"trials": 2}, "random")
    workers = [_worker(store, "--exit-when-idle", "--lease", "30") for _ in range(2)]
    outs = [w.communicate(timeout=600) for w in workers]
    assert all(w.returncode == 0 for w in workers), outs
    jobs = q.list()
    assert [j.status for j in jobs] == ["done"] * 3, [(j.status, j.message) for j in jobs]
    assert [j.trials_done for j in jobs] == [3, 4, 2]
    measured = _measured(Database(store))
    assert all(n == 1 for per in measured.values() for n in per.values()), measured
    # both exhaustive jobs of one kernel: 3 + 4 distinct candidates and the default, once
    assert sorted(sum(per.values()) for per in measured.values()) == [3, 8]
    listing = CliRunner().invoke(cli, ["--db", store, "queue", "list", "--json"])
    rows = json.loads(listing.output)
    assert all(r["status"] == "done" and r["best_seconds"] > 0 and r["speedup"] > 0 for r in rows), rows
    assert "3 done" in CliRunner().invoke(cli, ["--db", store, "queue", "list"]).output


@pytest.mark.slow
def test_a_job_whose_worker_was_killed_is_taken_again_and_resumes_from_the_store(store):
    q = JobQueue(Database(store))
    job = q.enqueue("c_matmul", MATMUL, {"trials": 6}, "random")
    first = _worker(store, "--lease", "2", start_new_session=True)
    watch, deadline = Database(store), time.time() + 300
    while time.time() < deadline and sum(n for _, n, _ in watch.workloads()) < 3:
        time.sleep(0.2)
    os.killpg(first.pid, signal.SIGKILL)  # the worker and its compile and measuring processes
    first.communicate(timeout=60)
    before = _measured(Database(store))
    assert 3 <= sum(n for per in before.values() for n in per.values()) < 7
    second = _worker(store, "--lease", "2", "--max-jobs", "1")
    _, err = second.communicate(timeout=600)
    assert second.returncode == 0, err
    done = q.get(job)
    assert done.status == "done" and done.attempts == 2 and done.trials_done >= 6, done
    after = _measured(Database(store))
    assert all(n == 1 for per in after.values() for n in per.values()), after
    (per,) = after.values()
    # 6 trials and the default; one more if the first was killed between recording a result
    # and counting it against the job's budget
    assert set(next(iter(before.values()))) <= set(per) and 7 <= len(per) <= 8


def test_a_job_the_worker_cannot_rebuild_fails_with_why_and_the_worker_goes_on(store):
    db = Database(store)
    q = JobQueue(db)
    bad = q.enqueue("c_matmul", {"m": 0, "n": 4, "k": 4}, {"trials": 2})
    unknown = q.enqueue("c_matmul", MATMUL, {"trials": 2}, "no-such-strategy")
    outcomes = Worker(db, owner="w", lease_seconds=30).run(exit_when_idle=True)
    assert [o.status for o in outcomes] == ["failed", "failed"]
    assert "needs m, n and k" in q.get(bad).message and "no-such-strategy" in q.get(unknown).message
    out = CliRunner().invoke(cli, ["--db", store, "queue", "add", "c_matmul", '{"m": 1}'])
    assert out.exit_code == 1 and "needs m, n and k" in out.output


def test_a_tensor_expression_job_is_auto_scheduled_under_the_workload_autoschedule_uses(store):
    from tensortune.autoschedule.api import Problem
    from tensortune.te import workloads

    db = Database(store)
    q = JobQueue(db)
    job = q.enqueue("te_cpu", {"workload": "matmul", "args": [16, 16, 16]}, {"trials": 3}, "random")
    bad = q.enqueue("te_cpu", {"workload": "os.system", "args": [1]}, {"trials": 3})
    outcomes = Worker(db, owner="w", lease_seconds=30, jobs=1).run(exit_when_idle=True)
    assert [o.status for o in outcomes] == ["done", "failed"] and "one of matmul" in q.get(bad).message
    workload = Problem.of(workloads.matmul(16, 16, 16)).workload
    records = db.records(workload)
    assert len(records) == 3 and any(r.ok for r in records)
    savings = job_savings(db, q.get(job))
    assert savings.best is not None and savings.baseline >= savings.best


@pytest.mark.slow
def test_a_worker_stopped_by_sigterm_queues_its_job_again_at_once(store):
    q = JobQueue(Database(store))
    job = q.enqueue("c_matmul", MATMUL, {"trials": 40}, "random")
    worker = _worker(store, "--lease", "600")
    watch, deadline = Database(store), time.time() + 300
    while time.time() < deadline and sum(n for _, n, _ in watch.workloads()) < 2:
        time.sleep(0.2)
    worker.send_signal(signal.SIGTERM)
    _, err = worker.communicate(timeout=120)
    assert worker.returncode == 128 + signal.SIGTERM, err
    back = q.get(job)
    assert back.status == "queued" and back.owner == "" and back.trials_done >= 1, back  # not after a lease
    taken = q.claim("next", lease_seconds=60)
    assert taken.id == job and taken.attempts == 2
