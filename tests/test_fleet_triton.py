"""Fleet `triton` jobs: keys a production process meets and nobody tuned are queued once
(on_new_key="enqueue"), tuned by a worker (a `tensortune worker` process, or the worker in
this process) into the shared store, and picked up by the production kernel; shapes
queued from the command line; bad specs refused, and a target a worker cannot import
failing its job only. Kernels run under Triton's interpreter."""

import contextlib
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import fleet_triton_kernels as K  # noqa: E402

from tensortune.cli.main import cli  # noqa: E402
from tensortune.db import Database  # noqa: E402
from tensortune.fleet import JobQueue, Worker, check_spec  # noqa: E402

TESTS = Path(__file__).resolve().parent
SRC = str(TESTS.parent / "src")
KEY_128 = {"n": 128, "dtypes": ["float32", "float32"]}


@pytest.fixture(autouse=True)
def interpret(monkeypatch):
    """The interpreter, and a kernel of the package's own for each test (as a fresh process has)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(K, "scale", K.make_scale())


@pytest.fixture
def production(monkeypatch):
    """A production kernel bound where workers import it, and a way to become a worker
    (`as_worker()`: the module's name bound to a fresh kernel, as a worker's import makes)."""
    def make(store, **options):
        kernel = K.make_scale(db=store, **options)
        monkeypatch.setattr(K, "scale", kernel)
        return kernel

    @contextlib.contextmanager
    def as_worker():
        prod, K.scale = K.scale, K.make_scale()
        try:
            yield
        finally:
            K.scale = prod

    make.as_worker = as_worker
    return make


def launch(kernel, n):
    """One production launch, checked against torch; the decision it used."""
    x = torch.randn(n)
    y = torch.empty_like(x)
    kernel[K.grid(n)](x, y, n, 2.0)
    torch.testing.assert_close(y, x * 2)
    return kernel.decision


def _env():
    return {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, str(TESTS)]), "TRITON_INTERPRET": "1",
            "TENSORTUNE_PROGRESS": "0"}


SECOND_PROCESS = textwrap.dedent("""
    import json, sys
    import torch
    import fleet_triton_kernels as K
    K.scale = K.make_scale(db=sys.argv[1])
    x = torch.randn(110)
    y = torch.empty_like(x)
    K.scale[K.grid(110)](x, y, 110, 2.0)
    torch.testing.assert_close(y, x * 2)
    print(json.dumps({"source": K.scale.decision.source}))
""")


@pytest.mark.slow
def test_a_production_key_is_queued_once_tuned_by_a_worker_process_and_picked_up(store, production, tmp_path):
    prod = production(store, recheck_seconds=0)
    first = launch(prod, 100)
    assert (first.source, first.config["BLOCK"]) == ("default", 16)  # answered at once: nothing is tuned yet
    q = JobQueue(Database(store))
    (job,) = q.list()
    assert job.kind == "triton" and job.budget == {} and job.status == "queued"
    assert job.spec == {"target": "fleet_triton_kernels:scale", "shape": {"n": 100, "dtype": "float32"},
                        "key": KEY_128}
    for n in (100, 120, 128):  # the same key (pow2 bucket): no other job, the same answer
        assert launch(prod, n) is first
    # another production process meets the key with another shape: the queue dedupes by key
    script = tmp_path / "second.py"
    script.write_text(SECOND_PROCESS)
    out = subprocess.run([sys.executable, str(script), store], env=_env(), capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1]) == {"source": "default"}
    assert [j.id for j in q.list()] == [job.id]

    worker = subprocess.run([sys.executable, "-m", "tensortune.cli.main", "--db", store, "worker",
                             "--exit-when-idle"], env=_env(), capture_output=True, text=True, timeout=300)
    assert worker.returncode == 0 and "1 job(s), 1 done, 4 candidates measured" in worker.stdout, worker
    done = q.get(job.id)
    assert done.status == "done" and done.trials_done == 4, done
    assert "; tuned fleet_scale n=128 (float32): BLOCK=128," in done.message

    picked = launch(prod, 100)
    assert (picked.source, picked.config["BLOCK"]) == ("recorded", 128)
    assert launch(prod, 120) is picked
    assert [d.source for d in prod.log] == ["default"] * 3 + ["recorded"] * 2  # per launch signature
    # picked up: the launch signatures of the key are on the fast path again
    assert len(prod._decisions) == 2 and not prod._waiting
    (row,) = json.loads(CliRunner().invoke(cli, ["--db", store, "queue", "list", "--json"]).output)
    assert (row["kind"], row["status"]) == ("triton", "done")
    # the savings of the key: its best (BLOCK=128, as BlockTimer times it) against the first measured
    assert row["best_seconds"] == pytest.approx(1e-3 / 128) and row["speedup"] >= 1


def test_a_waiting_key_is_looked_up_again_at_most_every_recheck_seconds(tmp_path, production):
    store = str(tmp_path / "store.db")
    prod = production(store, recheck_seconds=3600)
    assert launch(prod, 200).source == "default"
    with production.as_worker():
        (outcome,) = Worker(Database(store), owner="w").run(exit_when_idle=True)
    assert outcome.status == "done" and outcome.trials == 4
    assert launch(prod, 200).source == "default"  # not due yet: the store is not read
    prod._waiting[prod.decision.key].next_check = 0  # an hour later
    assert (launch(prod, 200).source, prod.decision.config["BLOCK"]) == ("recorded", 128)


def test_a_new_key_is_answered_from_the_nearest_tuned_key_and_a_tuned_key_is_not_queued(tmp_path, production):
    store = str(tmp_path / "store.db")
    prod = production(store, recheck_seconds=0)
    launch(prod, 100)
    with production.as_worker():
        Worker(Database(store), owner="w").run(exit_when_idle=True)
    assert launch(prod, 100).source == "recorded"
    near = launch(prod, 300)  # key 512: answered with the nearest tuned key's configuration, and queued
    assert (near.source, near.config["BLOCK"]) == ("nearest", 128)
    later = K.make_scale(db=store)  # a process started after the tuning: the tuned key is read, not queued
    assert launch(later, 100).source == "recorded"
    specs = [j.spec["key"]["n"] for j in JobQueue(Database(store)).list()]
    assert specs == [128, 512]


def test_a_target_the_worker_cannot_import_fails_its_job_and_production_is_warned_once(tmp_path, production,
                                                                                        monkeypatch):
    store = str(tmp_path / "store.db")
    prod = production(store, recheck_seconds=0)
    launch(prod, 100)
    monkeypatch.delattr(K, "scale")  # this worker's version of the package lacks the kernel
    db = Database(store)
    ok = JobQueue(db).enqueue("triton", {"target": "fleet_triton_kernels:launch_scale", "shape": {"n": 40}}, {})
    monkeypatch.setattr(K, "launch_scale", lambda n: K.make_scale()[K.grid(n)](*K.scale_inputs(n)[1]))
    outcomes = Worker(db, owner="w").run(exit_when_idle=True)
    assert [o.status for o in outcomes] == ["failed", "done"]  # the worker went on to the next job
    failed = JobQueue(db).list()[0]
    assert "cannot import the target fleet_triton_kernels:scale on this worker" in failed.message
    assert "has no attribute 'scale'" in failed.message and JobQueue(db).get(ok).status == "done"
    with pytest.warns(RuntimeWarning, match=r"was not tuned \(job 1 failed: .*cannot import the target"):
        d = launch(prod, 100)
    assert d.source == "default"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert launch(prod, 100) is d  # warned once; the launch is on the fast path again


def test_the_worker_checks_the_key_its_shape_made_against_the_queued_one(tmp_path, production):
    store = str(tmp_path / "store.db")
    db = Database(store)
    spec = {"target": "fleet_triton_kernels:scale", "shape": {"n": 100, "dtype": "float64"}, "key": KEY_128}
    job = JobQueue(db).enqueue("triton", spec, {"trials": 2})
    (outcome,) = Worker(db, owner="w").run(exit_when_idle=True)
    assert outcome.status == "failed"
    message = JobQueue(db).get(job).message
    assert "made the key {'n': 128, 'dtypes': ['float64', 'float64']}" in message
    assert "not the key {'dtypes': ['float32', 'float32'], 'n': 128} that was queued" in message


def test_the_shape_must_be_derivable_from_a_launch(tmp_path):
    import triton

    import tensortune as tt

    def make(**options):
        return tt.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 32)], key=["n"],
                           on_new_key="enqueue", db=str(tmp_path / "s.db"), timer=K.BlockTimer(),
                           **options)(K.scale_kernel)

    bare = make()
    with pytest.raises(ValueError, match=r"has no inputs function.*register one with @scale_kernel.inputs"):
        launch(bare, 10)
    with pytest.raises(ValueError, match=r"parameter 'm' of .* is not an argument of .*scale_kernel"):
        make().inputs(lambda m: None)
    with pytest.raises(ValueError, match=r"parameter 'BLOCK' of .* is a tuned meta-parameter"):
        make().inputs(lambda n, BLOCK: None)
    with pytest.raises(ValueError, match=r"\*\*shape cannot be passed by name"):
        make().inputs(lambda **shape: None)
    tensor_param = make()
    tensor_param.inputs(lambda x_ptr, n: None)
    with pytest.raises(ValueError, match=r"'x_ptr' is a Tensor at this launch, but a shape holds numbers"):
        launch(tensor_param, 10)
    local = make()  # bound to no module-level name: workers could not import it
    local.inputs(K.scale_inputs)
    with pytest.raises(ValueError, match=r"define it at module level of an importable module"):
        launch(local, 10)
    assert JobQueue(Database(str(tmp_path / "s.db"))).list() == []


def test_a_launch_shape_takes_scalars_by_name_and_dtype_from_the_tensors():
    from tensortune.frontends.triton.enqueue import launch_shape

    names = ["x_ptr", "y_ptr", "n", "factor", "BLOCK"]
    x = torch.zeros(4, dtype=torch.float16)

    def inputs(n, factor=1.0, dtype="float32", scale=3):
        pass

    assert launch_shape(inputs, names, (x, x, 4), {"factor": 2.5}) == {"n": 4, "factor": 2.5, "dtype": "float16"}
    assert launch_shape(inputs, names, (None, None, torch.tensor(4).item()), {}) == {"n": 4}  # defaults kept
    with pytest.raises(ValueError, match=r"they have float16, float32; name the parameter after a scalar"):
        launch_shape(inputs, names, (x, torch.zeros(4), 4), {})
    with pytest.raises(ValueError, match=r"this launch does not pass 'n'"):
        launch_shape(inputs, names, (x, x), {})


def test_many_processes_queue_one_key_as_one_job(store):
    """Production processes meeting one key at once, each with a connection of its own (the
    queue's dedupe is a transaction: on PostgreSQL under an advisory lock on the job's digest)."""
    dbs = [Database(store) for _ in range(8)]
    start, ids = threading.Barrier(len(dbs)), []

    def meet(db, n):
        spec = {"target": "fleet_triton_kernels:scale", "shape": {"n": n, "dtype": "float32"}, "key": KEY_128}
        start.wait()
        ids.append(JobQueue(db).enqueue("triton", spec, {}))

    threads = [threading.Thread(target=meet, args=(db, 65 + 9 * i)) for i, db in enumerate(dbs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(ids) == len(dbs) and len(set(ids)) == 1 and len(JobQueue(dbs[0]).list()) == 1


def test_the_command_line_queues_shapes_of_a_target_and_a_worker_tunes_them(tmp_path):
    store = str(tmp_path / "store.db")
    runner = CliRunner()
    args = ["--db", store, "queue", "add", "triton", "fleet_triton_kernels:launch_scale", "--shape", "n=100",
            "--shape", "n=300"]
    out = runner.invoke(cli, args)
    assert out.exit_code == 0, out.output
    assert "job 1: triton fleet_triton_kernels:launch_scale n=100 {}" in out.output
    assert "job 2: triton fleet_triton_kernels:launch_scale n=300 {}" in out.output
    assert "job 1:" in runner.invoke(cli, args[:-2]).output  # queued already: not twice
    rows = tmp_path / "jobs.jsonl"  # a --from row without a budget: the kernel's own, so the same job
    rows.write_text(json.dumps({"kind": "triton", "spec": {"target": "fleet_triton_kernels:launch_scale",
                                                          "shape": {"n": 300}}}) + "\n")
    assert "job 2: triton" in runner.invoke(cli, ["--db", store, "queue", "add", "--from", str(rows)]).output
    spec = json.dumps({"target": "fleet_triton_kernels:scale", "shape": {"n": 30}})
    out = runner.invoke(cli, ["--db", store, "queue", "add", "triton", spec, "--trials", "2"])
    assert out.exit_code == 0 and "job 3: triton fleet_triton_kernels:scale n=30 {'trials': 2}" in out.output
    outcomes = Worker(Database(store), owner="w").run(exit_when_idle=True)
    assert [(o.status, o.trials) for o in outcomes] == [("done", 4), ("done", 4), ("done", 2)], outcomes
    listing = json.loads(runner.invoke(cli, ["--db", store, "queue", "list", "--json"]).output)
    assert [r["status"] for r in listing] == ["done"] * 3
    assert "tuned fleet_scale n=512 (float32): BLOCK=128," in listing[1]["message"]
    later = K.make_scale(db=store)  # production after the fleet: the queued shapes' keys are tuned
    assert launch(later, 300).source == "recorded" and later.decision.config["BLOCK"] == 128


@pytest.mark.parametrize("spec, words", [
    ({"shape": {"n": 1}}, '"target" must be MODULE:NAME'),
    ({"target": "scale", "shape": {"n": 1}}, '"target" must be MODULE:NAME'),
    ({"target": "m:k"}, '"shape" must be an object'),
    ({"target": "m:k", "shape": {}}, '"shape" must be an object of NAME: value (at least one)'),
    ({"target": "m:k", "shape": {"n": [1, 2]}}, "shape value n must be a number, string or boolean"),
    ({"target": "m:k", "shape": {"n": float("nan")}}, "shape value n must be a number"),
    ({"target": "m:k", "shape": {"n": None}}, "shape value n must be a number"),
    ({"target": "m:k", "shape": {"not a name": 1}}, "shape name 'not a name' is not a Python identifier"),
    ({"target": "m:k", "shape": {"n": 1}, "key": [128]}, '"key" must be an object'),
    ({"target": "m:k", "shape": {"n": 1}, "key": {"n": {"deep": 1}}}, "key value n must be a number"),
    ({"target": "m:k", "shape": {"n": 1}, "budget": 3}, "unknown key(s) ['budget']"),
])
def test_a_bad_triton_spec_is_refused_with_what_is_wrong(spec, words):
    with pytest.raises(ValueError) as err:
        check_spec("triton", spec)
    assert words in str(err.value)


def test_the_command_line_refuses_bad_triton_jobs(tmp_path):
    runner = CliRunner()
    db = ["--db", str(tmp_path / "s.db"), "queue", "add"]
    for args, words in ((["triton", "m:k", "--shape", "n"], "is not NAME=VALUE"),
                        (["triton", "kernel", "--shape", "n=1"], '"target" must be MODULE:NAME'),
                        (["c_matmul", "m:k", "--shape", "n=1"], "--shape is for triton jobs"),
                        (["triton", "m:k", "--shape", "n=1", "--strategy", "random"], "leave --strategy at auto"),
                        (["triton", '{"target": "m:k", "shape": {"n": "x" }, "extra": 1}'], "unknown key(s)")):
        out = runner.invoke(cli, db + args)
        assert out.exit_code != 0 and words in out.output, (args, out.output)
    assert JobQueue(Database(str(tmp_path / "s.db"))).list() == []


def test_a_stored_triton_job_with_a_damaged_spec_or_budget_fails_with_why(tmp_path):
    db = Database(str(tmp_path / "s.db"))
    q = JobQueue(db)
    bad_spec = q.enqueue("triton", {"target": "fleet_triton_kernels:scale", "shape": {"n": [1]}}, {})
    bad_budget = q.enqueue("triton", {"target": "fleet_triton_kernels:scale", "shape": {"n": 8}}, {"trials": 0})
    outcomes = Worker(db, owner="w").run(exit_when_idle=True)
    assert [o.status for o in outcomes] == ["failed", "failed"]
    assert "shape value n must be a number" in q.get(bad_spec).message
    assert "trials must be at least 1" in q.get(bad_budget).message


def test_a_store_that_cannot_queue_the_key_is_a_warning_and_its_records_are_still_picked_up(tmp_path, production,
                                                                                              monkeypatch):
    from tensortune.db import DatabaseError
    from tensortune.frontends.triton import enqueue

    store = str(tmp_path / "store.db")
    prod = production(store, recheck_seconds=0)

    def refused(*args):
        raise DatabaseError("cannot write to database (a stand-in for a store that refuses writes)")

    with monkeypatch.context() as m:
        m.setattr(enqueue, "put_on_queue", refused)
        with pytest.warns(RuntimeWarning, match=r"cannot queue the key \{'n': 128.*looking for its records"):
            assert launch(prod, 100).source == "default"
    assert JobQueue(Database(store)).list() == []
    spec = {"target": "fleet_triton_kernels:scale", "shape": {"n": 100}}
    JobQueue(Database(store)).enqueue("triton", spec, {})  # queued by someone else
    with production.as_worker():
        Worker(Database(store), owner="w").run(exit_when_idle=True)
    assert (launch(prod, 100).source, prod.decision.config["BLOCK"]) == ("recorded", 128)


def test_the_enqueue_options_are_checked_when_the_kernel_is_decorated():
    import tensortune as tt

    with pytest.raises(ValueError, match="recheck_seconds must be a number of seconds"):
        tt.autotune(configs=None, key=["n"], on_new_key="enqueue", recheck_seconds=-1)
    with pytest.raises(ValueError, match="on_new_key must be one of tune, nearest, enqueue; got 'queue'"):
        tt.autotune(configs=None, key=["n"], on_new_key="queue")


def test_a_kernel_bound_only_in_the_main_script_cannot_be_queued(tmp_path, monkeypatch):
    kernel = K.make_scale(db=str(tmp_path / "s.db"))
    monkeypatch.setattr(sys.modules["__main__"], "scale_in_a_script", kernel, raising=False)
    with pytest.raises(ValueError, match=r"bound to a name only in the script run as __main__"):
        launch(kernel, 10)


RANK = textwrap.dedent("""
    import json, os, sys
    import torch
    import torch.distributed as dist
    import fleet_triton_kernels as K
    from tensortune.db import Database
    from tensortune.fleet import JobQueue, Worker

    rank, store = int(os.environ["RANK"]), os.environ["STORE"]
    dist.init_process_group("gloo", rank=rank, world_size=2)
    prod = K.scale = K.make_scale(db=store, recheck_seconds=0)

    def launch():
        x = torch.randn(100)
        y = torch.empty_like(x)
        prod[K.grid(100)](x, y, 100, 2.0)
        assert torch.equal(y, x * 2)
        return prod.decision.source, prod.decision.config["BLOCK"]

    first = launch()  # a collective: rank 0 decides and queues, rank 1 gets its answer
    dist.barrier()
    if rank == 0:
        K.scale = K.make_scale()  # the worker's import of the package
        outcomes = Worker(Database(store), owner="w").run(exit_when_idle=True)
        assert [o.status for o in outcomes] == ["done"], outcomes
        K.scale = prod
    dist.barrier()
    print(json.dumps({"rank": rank, "first": first, "then": launch(), "jobs": len(JobQueue(Database(store)).list())}))
    dist.destroy_process_group()
""")


@pytest.mark.slow
def test_every_rank_of_a_distributed_job_picks_the_tuned_key_up(tmp_path):
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    procs = [subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**_env(), "RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                                   "MASTER_PORT": port, "STORE": str(tmp_path / "store.db")})
             for rank in (0, 1)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    r0, r1 = sorted(results, key=lambda r: r["rank"])
    assert (r0["first"], r1["first"]) == (["default", 16], ["agreed", 16])
    assert r0["then"] == r1["then"] == ["recorded", 128] and r0["jobs"] == r1["jobs"] == 1


def test_a_job_done_without_a_record_for_this_target_is_warned_about(tmp_path, production):
    store = str(tmp_path / "store.db")
    prod = production(store, recheck_seconds=0)
    launch(prod, 100)
    q = JobQueue(Database(store))
    job = q.claim("a worker on another GPU", lease_seconds=60)  # it records under its own target
    q.finish(job.id, "a worker on another GPU", "done", "4 measured")
    with pytest.warns(RuntimeWarning, match=r"job 1 is done \(4 measured\), but the store has no final record of "
                                            r"the key for this process's target .*did the worker run on another GPU"):
        assert launch(prod, 100).source == "default"


def test_a_triton_job_claims_each_candidate_before_measuring_it_and_releases_them_at_the_end(tmp_path, monkeypatch):
    from sqlalchemy import select

    from tensortune.db.schema import claims

    store = str(tmp_path / "store.db")
    db = Database(store)
    job = JobQueue(db).enqueue("triton", {"target": "fleet_triton_kernels:scale", "shape": {"n": 100}}, {})
    held_while_measured, time_candidate = [], K.BlockTimer.time

    def peek(timer, fn):  # each candidate, as it is measured: the claims in the store
        held_while_measured.append(sorted(o for (o,) in db.query(select(claims.c.owner))))
        return time_candidate(timer, fn)

    monkeypatch.setattr(K.BlockTimer, "time", peek)
    (outcome,) = Worker(db, owner="w").run(exit_when_idle=True)
    assert (outcome.status, outcome.trials) == ("done", 4), outcome
    # the four configurations, claimed by the worker before they were measured (all four are
    # asked for at once), then released
    assert held_while_measured and all(h == ["w"] * len(K.BLOCKS) for h in held_while_measured[:4])
    assert db.query(select(claims.c.owner)) == []
    assert JobQueue(db).get(job).trials_done == 4
