"""Fleet `model` jobs: a whole PyTorch model queued, compiled and tuned by a real worker
into the shared store, then compiled by a user from those records alone; two workers
compiling one model at once never measure a kernel's candidate twice; bad specs
refused when queued, and a factory that cannot build its model failing its job only."""

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from tensortune.cli.main import cli
from tensortune.db import Database
from tensortune.db.schema import claims
from tensortune.fleet import JobQueue, Worker, check_spec
from tensortune.fleet.model_job import ModelTuned, model_tuned

torch = pytest.importorskip("torch")

SRC = str(Path(__file__).resolve().parents[1] / "src")
MODELS = '''
import torch

def small_mlp():
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))

def broken():
    raise RuntimeError("the weights are not there")
'''


@pytest.fixture
def models_module(tmp_path, monkeypatch):
    """An importable module of model factories, as on a worker's host with the code installed."""
    (tmp_path / "fleet_tiny_models.py").write_text(MODELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "fleet_tiny_models"
    sys.modules.pop("fleet_tiny_models", None)


def _enqueue_mlp(store: str, module: str, trials: int = 4) -> None:
    out = CliRunner().invoke(cli, ["--db", store, "model", "tune", f"{module}:small_mlp", "--input", "4x16",
                                   "--target", "cpu", "--budget", str(trials), "--enqueue"])
    assert out.exit_code == 0 and f"model {module}:small_mlp(4x16) on cpu" in out.output, out.output


def _compile_from_records(store: str, module: str):
    """A user's compile of the same architecture (other weights): every task from the records."""
    import tensortune
    torch.manual_seed(1)
    model = __import__(module).small_mlp().eval()
    torch._dynamo.reset()
    fast = tensortune.compile(model, [torch.randn(4, 16)], target="cpu", db=store, progress=False)
    tasks = [t for r in fast.reports for t in r.tasks]
    assert tasks and [t.source for t in tasks] == ["records"] * len(tasks), [(t.label, t.source) for t in tasks]
    assert sum(t.trials for t in tasks) == 0
    for _ in range(3):
        x = torch.randn(4, 16)
        with torch.no_grad():
            assert torch.allclose(fast(x), model(x), rtol=1e-4, atol=1e-5)


def test_a_model_job_is_tuned_by_a_worker_and_a_later_compile_is_built_from_its_records(store, models_module):
    db = Database(store)
    q = JobQueue(db)
    _enqueue_mlp(store, models_module)
    broken = q.enqueue("model", {"factory": f"{models_module}:broken", "inputs": ["2x2"], "target": "cpu"},
                       {"trials": 4})
    missing = q.enqueue("model", {"factory": "no_such_models_here:make", "inputs": ["2x2"], "target": "cpu"},
                        {"trials": 4})
    outcomes = Worker(db, owner="w", lease_seconds=30, jobs=1).run(exit_when_idle=True)
    assert [o.status for o in outcomes] == ["done", "failed", "failed"], outcomes
    job = q.list()[0]
    assert job.status == "done" and job.trials_done == outcomes[0].trials >= 2, job
    assert "tuned" in job.message and "measured by w" in job.message
    assert "RuntimeError: the weights are not there" in q.get(broken).message
    assert "No module named 'no_such_models_here'" in q.get(missing).message
    assert sum(n for _, n, _ in db.workloads()) >= job.trials_done  # every measurement is in the store
    assert db.query(select(func.count()).select_from(claims))[0][0] == 0  # its kernels' claims released
    _compile_from_records(store, models_module)
    listing = CliRunner().invoke(cli, ["--db", store, "queue", "list", "--json"])
    rows = json.loads(listing.output)
    assert [r["status"] for r in rows] == ["done", "failed", "failed"] and rows[0]["kind"] == "model"
    table = CliRunner().invoke(cli, ["--db", store, "queue", "list"]).output
    assert "1 done, 2 failed" in table and "tuned" in table  # a done model job says what it did


def test_a_bad_model_spec_is_refused_with_what_is_wrong(tmp_path):
    store = str(tmp_path / "store.db")
    cases = [
        ({"factory": "small_mlp", "target": "cpu"}, '"factory" must be MODULE:NAME'),
        ({"factory": "m:f", "inputs": "4x16", "target": "cpu"}, '"inputs" must be a list of strings'),
        ({"factory": "m:f", "inputs": ["4xq"], "target": "cpu"}, "the shape must be numbers joined by x"),
        ({"factory": "m:f", "inputs": ["4x16:float77"], "target": "cpu"}, "unknown dtype 'float77'"),
        ({"factory": "m:f", "inputs": ["4x16"], "target": "tpu"}, '"target" must be "cpu" or "cuda"'),
        ({"factory": "m:f", "inputs": ["4x16"]}, '"target" must be "cpu" or "cuda"'),
        ({"factory": "m:f", "target": "cpu", "batch": 4}, "unknown key(s) ['batch']"),
    ]
    for spec, message in cases:
        with pytest.raises(ValueError, match=None) as err:
            check_spec("model", spec)
        assert message in str(err.value), (spec, err.value)
        out = CliRunner().invoke(cli, ["--db", store, "queue", "add", "model", json.dumps(spec)])
        assert out.exit_code == 1 and message in out.output and "Traceback" not in out.output, out.output
    good = json.dumps({"factory": "m:f", "inputs": ["4x16"], "target": "cpu"})
    refused = [
        (["queue", "add", "model", good, "--trials", "4", "--seconds", "9"], "not both"),
        (["queue", "add", "model", good, "--strategy", "tpe"], "leave --strategy at auto"),
        (["model", "tune", "m:f", "--input", "4x16", "--budget", "4", "--enqueue"], "--enqueue needs --target"),
        (["model", "tune", "m:f", "--input", "4x16", "--target", "cpu", "--enqueue"], "--enqueue needs --budget"),
        (["model", "tune", "m:f", "--target", "cpu", "--budget", "4", "--enqueue", "--retune"], "--retune"),
    ]
    for args, message in refused:
        out = CliRunner().invoke(cli, ["--db", store, *args])
        assert out.exit_code != 0 and message in out.output and "Traceback" not in out.output, (args, out.output)
    assert JobQueue(Database(store)).list() == []


def test_a_model_jobs_trials_count_each_kernel_once_at_its_tuning_whatever_its_graphs_report():
    """A kernel in several graphs: tuned once (every graph of a joint tuning reports that
    tuning's trials) or built from its records by a graph compiled later (0 trials)."""
    from tensortune.graph.report import CompileReport, TaskReport

    def graph(*tasks):
        return CompileReport("cpu", tasks=[TaskReport(label, 1, trials, 1e-6, source, key=key)
                                           for key, label, trials, source in tasks])

    tuned_first = graph(("mm", "mm 4x16", 6, "tuned"), ("add", "add 4x16", 4, "tuned"))
    later = graph(("mm", "mm 4x16", 0, "records"), ("add", "add 4x16", 4, "tuned"),
                  ("cumsum", "cumsum 4x16", 3, "torch (every candidate failed)"), ("relu", "relu 4x16", 0, "records"))
    for reports in ([tuned_first, later], [later, tuned_first]):
        done = model_tuned(reports)
        assert done == ModelTuned(trials=13, tasks=4, tuned=2, from_records=1, fallbacks=1), done


@pytest.mark.slow
def test_a_worker_process_tunes_a_queued_model_under_a_renewed_lease_for_a_users_compile(tmp_path, models_module):
    store = str(tmp_path / "store.db")
    _enqueue_mlp(store, models_module, trials=3)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, str(tmp_path)]), "TENSORTUNE_PROGRESS": "0"}
    worker = subprocess.Popen([sys.executable, "-m", "tensortune.cli.main", "--db", store, "worker", "--jobs", "1",
                               "--lease", "1", "--exit-when-idle"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    q, renewed = JobQueue(Database(store)), False
    while worker.poll() is None:  # the compile outlasts a third of the lease: the heartbeat must renew it
        job = q.list()[0]
        renewed |= job.status == "running" and job.lease_expires > job.started_at + 1.05
        time.sleep(0.05)
    out, err = worker.communicate(timeout=600)
    assert worker.returncode == 0 and "1 job(s), 1 done" in out, (out, err)
    (job,) = q.list()
    assert job.status == "done" and job.attempts == 1 and job.trials_done >= 2, job
    assert renewed
    _compile_from_records(store, models_module)


def _measured_by_searches(db):
    """How many times each (workload, target, configuration) was measured by a search: the
    environment's failures and the re-timings of finalists (`confirm`) left out."""
    return Counter((w, r.target, r.config.digest) for w, _, _ in db.workloads() for r in db.records(w)
                   if not r.to_result().environment and r.strategy != "confirm")


@pytest.mark.slow
def test_two_workers_compiling_one_model_at_once_never_measure_a_candidate_twice(store, tmp_path, models_module):
    q = JobQueue(Database(store))
    spec = {"factory": f"{models_module}:small_mlp", "inputs": ["4x16"], "target": "cpu"}
    jobs = [q.enqueue("model", spec, {"trials": trials}) for trials in (12, 13)]  # one model, two budgets
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, str(tmp_path)]), "TENSORTUNE_PROGRESS": "0"}
    workers = [subprocess.Popen([sys.executable, "-m", "tensortune.cli.main", "--db", store, "worker", "--jobs",
                                 "1", "--max-jobs", "1", "--exit-when-idle"], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for _ in jobs]
    watch, most_claims, counted_while_running = Database(store), 0, False
    while any(w.poll() is None for w in workers):
        most_claims = max(most_claims, watch.query(select(func.count()).select_from(claims))[0][0])
        counted_while_running |= any(j.status == "running" and j.trials_done > 0 for j in q.list())
        time.sleep(0.05)
    outs = [w.communicate(timeout=600) for w in workers]
    assert all(w.returncode == 0 and "1 done" in out for w, (out, _) in zip(workers, outs)), outs
    done = [q.get(j) for j in jobs]
    assert all(j.status == "done" for j in done), [(j.status, j.message) for j in done]
    assert len({j.owner for j in done}) == 2  # one job each, at once
    # both compiles searched (neither only rebuilt the other's winners), each into its budget
    assert all(j.trials_done >= 2 for j in done), [(j.trials_done, j.message) for j in done]
    measured = _measured_by_searches(Database(store))
    twice = {key: n for key, n in measured.items() if n > 1}
    assert measured and not twice, twice
    assert most_claims > 0 and counted_while_running  # claimed while measuring; trials shown while running
    assert watch.query(select(func.count()).select_from(claims))[0][0] == 0  # released when each job ended
