"""The Ray executor on a real cluster: a head and two worker nodes, separate processes on
loopback (`LocalCluster`), shared by the tests of this module; the C backend tuned end to
end, a worker node killed mid-run, a driver killed and restarted, the task scheduler."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tensortune.backends import ArrayArg, CBuilder, CCompiler, CProblem, CRunner, ScalarArg
from tensortune.db import Database, Target, Workload
from tensortune.distributed import RAY_HINT, RayExecutor, RayMissing, node_resources, target_resource
from tensortune.distributed.actor import MeasureActor, TargetMismatch
from tensortune.measure import (CallableRunner, ErrorKind, LocalExecutor, MeasureResult, ShippedFile, Timer,
                                make_executor)
from tensortune.space import Categorical, Ordinal, Space
from tensortune.tuner import Tuner

SOURCE = r"""
#include <stdlib.h>
#include <unistd.h>
#ifndef MODE
#define MODE 0
#endif
void saxpy(const float *x, float *y, float a, int n) {
#if MODE == 1
    volatile int *p = NULL; *p = 1;            /* crash */
#elif MODE == 3
    for (int i = 0; i < n; i++) y[i] = a * x[i];  /* wrong: forgets y */
#elif MODE == 4
    this does not compile;
#else
    if (SLEEP_US) usleep(SLEEP_US);
    for (int i = 0; i < n; i += STEP) for (int j = i; j < i + STEP && j < n; j++) y[j] = a * x[j] + y[j];
#endif
}
"""


def saxpy_reference(x, y):
    return {"y": np.float32(2.5) * x + y}


def problem():
    n = 1000
    return CProblem(SOURCE, "saxpy", (ArrayArg("x", (n,)), ArrayArg("y", (n,), role="inout"),
                                      ScalarArg("a", 2.5, "float"), ScalarArg("n", n)), reference=saxpy_reference)


def c_parts(tmp_path, timer=None):
    p = problem()
    builder = CBuilder(p, CCompiler(cache_dir=tmp_path / "cc"), jobs=2)
    runner = CRunner(p, timer or Timer(warmup_seconds=0, min_repeats=3, budget_seconds=0.01), timeout=20)
    return p, builder, runner


def tuner(tmp_path, db, space, executor, budget, timer=None, strategy="random", callbacks=(), seed=0):
    p, builder, runner = c_parts(tmp_path, timer)
    workload = Workload.make("saxpy", p.source, {"n": 1000})
    return Tuner(space, runner, builder=builder, workload=workload, target=Target.cpu(), db=db, strategy=strategy,
                 budget=budget, seed=seed, progress=False, executor=executor, callbacks=callbacks), runner, builder


# ---- without a cluster ------------------------------------------------------------------------
def test_missing_ray_is_a_one_line_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(RayMissing) as err:
        RayExecutor().connect()
    assert str(err.value) == RAY_HINT and "\n" not in str(err.value)


def test_executors_are_named_or_refused():
    assert isinstance(make_executor(None), LocalExecutor) and isinstance(make_executor("local"), LocalExecutor)
    assert make_executor("ray", "127.0.0.1:1").address == "127.0.0.1:1"  # joins lazily
    with pytest.raises(ValueError, match="unknown executor 'dask'"):
        make_executor("dask")
    with pytest.raises(ValueError, match="need executor='ray'"):
        make_executor("local", ray_address="x:1")


def test_an_unreachable_cluster_is_a_message_from_the_cli(tmp_path):
    from click.testing import CliRunner

    from tensortune.cli.main import cli
    from tensortune.distributed.local_cluster import _free_port

    address = f"127.0.0.1:{_free_port()}"  # nothing listens there
    out = CliRunner().invoke(cli, ["--db", str(tmp_path / "t.db"), "demo", "--size", "16", "--trials", "2",
                                   "--executor", "ray", "--ray-address", address])
    assert out.exit_code == 1 and "Traceback" not in out.output
    assert f"cannot join the Ray cluster at '{address}'" in out.output and "ray start --head" in out.output


def test_target_resources_tell_apart_every_part_of_the_target():
    a = Target.make("cpu", "EPYC", "x86_64x16", {"cc": "gcc 12"})
    b = Target.make("cpu", "EPYC", "x86_64x16", {"cc": "gcc 13"})
    assert target_resource(a) != target_resource(b)
    assert node_resources(a, slots=2) == {target_resource(a): 1000, target_resource(a) + "-measure": 2}
    with pytest.raises(ValueError, match="at least one measurement slot"):
        node_resources(a, slots=0)


def test_a_shipped_library_is_checked_on_arrival(tmp_path):
    lib = tmp_path / "k.so"
    lib.write_bytes(b"\x7fELF-bytes")
    shipped = ShippedFile.of(lib)
    assert shipped.materialize(tmp_path / "there").read_bytes() == b"\x7fELF-bytes"
    damaged = ShippedFile(shipped.name, b"\x7fELF-other", shipped.digest)
    with pytest.raises(ValueError, match="arrived damaged"):
        damaged.materialize(tmp_path / "there")


def test_a_node_that_is_not_its_target_refuses_to_measure():
    here = Target.cpu()
    with pytest.raises(TargetMismatch, match="advertises the target Another CPU"):
        MeasureActor(Target.make("cpu", "Another CPU", here.arch, here.versions), 0)
    assert MeasureActor(here, 3).ready()["index"] == 3


class _LosingExecutor(LocalExecutor):
    """The local executor, whose first `lose` results are lost with their node."""

    def __init__(self, lose, requeued):
        self.lose, self.requeued = lose, requeued

    def measure(self, builder, runner, configs, target=None):
        for r in super().measure(builder, runner, configs, target):
            if self.lose > 0:
                self.lose -= 1
                yield MeasureResult.failed(r.config, ErrorKind.CRASHED, "lost with its node", environment="node lost",
                                           extra={"requeued": True} if self.requeued else {})
            else:
                yield r


@pytest.mark.parametrize("requeued", [True, False])
def test_candidates_lost_with_a_node_do_not_stop_the_run(requeued):
    """Ten candidates lost at once with a big node are measured again; only failures of
    the environment that are not such losses stop a run after eight in a row."""
    space = Space({"n": list(range(12))})
    runner = CallableRunner(lambda n: n, Timer(min_repeats=1, budget_seconds=0))
    result = Tuner(space, runner, workload=Workload.make("f"), target=Target.make("cpu", "x"), db=Database(":memory:"),
                   strategy="exhaustive", budget=12, batch_size=12, progress=False,
                   executor=_LosingExecutor(10, requeued)).run()
    if requeued:
        assert result.trials == 12 and not result.stopped and result.environment_failures == 10
    else:
        assert result.stopped.startswith("the environment failed 10 candidates in a row")  # the batch ends first


# ---- on a cluster of a head and two worker nodes --------------------------------------------------
@pytest.fixture
def cluster(ray_cluster):
    return ray_cluster


@pytest.fixture
def ray_executor(cluster):
    executor = RayExecutor(cluster.address)
    yield executor
    executor.close()


SMALL = Space([Categorical("MODE", [0, 1, 3, 4]), Ordinal("STEP", [1, 8]), Ordinal("SLEEP_US", [0])])


@pytest.mark.slow
def test_ray_tunes_c_like_the_local_executor(tmp_path, ray_executor):
    """Every candidate of a small space, good and bad, measured both ways: the same
    configurations recorded, each with the same outcome, every record in the database."""
    outcomes = {}
    for name, executor in (("local", LocalExecutor()), ("ray", ray_executor)):
        db = Database(tmp_path / f"{name}.db")
        t, runner, builder = tuner(tmp_path / name, db, SMALL, executor, budget=8, strategy="exhaustive")
        try:
            result = t.run()
        finally:
            runner.close()
            builder.close()
        records = db.records(t.workload, t.target)
        assert len(records) == 8 and result.trials == 8
        outcomes[name] = {r.config: r.error for r in records}
        good = [r for r in records if r.ok]
        assert good and all(len(r.times) >= 3 and r.time > 0 for r in good)
        if name == "ray":
            assert {r.extra["ray_node"] for r in records if r.extra.get("stage") != "build"} <= {
                n["NodeID"] for n in ray_executor.connect().nodes()}
    assert outcomes["ray"] == outcomes["local"]
    assert set(outcomes["ray"].values()) == {None, ErrorKind.CRASHED, ErrorKind.WRONG_RESULT, ErrorKind.COMPILE_ERROR}


WIDE = Space([Ordinal("STEP", [1, 2, 4, 8, 16, 32]), Ordinal("SLEEP_US", [0, 1, 2, 3, 4, 5, 6, 7]),
              Categorical("MODE", [0])])


@pytest.mark.slow
def test_a_worker_node_killed_mid_run_loses_nothing(tmp_path, cluster, ray_executor):
    """Node 1 is killed right after its actor returned a result (with more queued on it):
    its candidates come back as the environment's failures and are measured on node 0;
    the run completes its budget and every result it saw is in the database."""
    victim = None
    seen = []

    def kill_node_one(result):
        nonlocal victim
        seen.append(result)
        node = result.extra.get("ray_node")
        if victim is None and node and len(seen) >= 3:
            victim = node
            cluster.kill_node(node)

    db = Database(tmp_path / "t.db")
    slow = Timer(warmup_seconds=0, min_repeats=3, budget_seconds=0.5)  # slower than a build: calls queue on actors
    t, runner, builder = tuner(tmp_path, db, WIDE, ray_executor, budget=16, timer=slow, callbacks=[kill_node_one])
    try:
        result = t.run()
    finally:
        runner.close()
        builder.close()
        cluster.add_worker()  # the next test has its two workers again
    assert victim is not None
    records = db.records(t.workload, t.target)
    assert len(records) == len(seen)  # every result the run saw was recorded
    assert result.trials == 16 and not result.stopped
    lost = [r for r in seen if r.environment]
    assert lost, "the killed node had candidates in flight"
    assert all("lost" in r.environment for r in lost)
    measured_after = {r.config for r in seen[seen.index(lost[0]):] if r.ok}
    assert {r.config for r in lost} <= measured_after  # measured again, elsewhere
    assert {r.extra["ray_node"] for r in seen[seen.index(lost[-1]) + 1:] if r.ok} == {
        n for n in {r.extra["ray_node"] for r in seen if r.ok} if n != victim}


DRIVER = """
import sys
from tensortune.backends import CBuilder, CCompiler, CRunner
from tensortune.db import Database, Target, Workload
from tensortune.measure import Timer
from tensortune.tuner import Tuner
sys.path.insert(0, {tests!r})
from test_distributed import WIDE, problem
p = problem()
db = Database({db!r})
Tuner(WIDE, CRunner(p, Timer(warmup_seconds=0, min_repeats=3, budget_seconds=0.3)),
      builder=CBuilder(p, CCompiler(cache_dir={cache!r})), workload=Workload.make("saxpy", p.source, {{"n": 1000}}),
      target=Target.cpu(), db=db, strategy="random", budget=40, seed=1, progress=False,
      executor="ray", ray_address={address!r}).run()
"""


@pytest.mark.slow
def test_a_driver_killed_mid_run_resumes_from_the_store(tmp_path, cluster, ray_executor):
    """A driver process is killed once it has recorded a few results; a new driver on the
    same store measures none of those again and completes the space."""
    db_path = tmp_path / "t.db"
    script = DRIVER.format(tests=os.path.dirname(__file__), db=str(db_path), cache=str(tmp_path / "cc"),
                           address=cluster.address)
    driver = subprocess.Popen([sys.executable, "-c", script], env=cluster.env, start_new_session=True)
    db = Database(db_path)
    workload = Workload.make("saxpy", problem().source, {"n": 1000})
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and driver.poll() is None:
            if len(db.records(workload, Target.cpu())) >= 4:
                break
            time.sleep(0.2)
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    before = {r.config for r in db.records(workload, Target.cpu())}
    assert 4 <= len(before) < WIDE.size
    t, runner, builder = tuner(tmp_path, db, WIDE, ray_executor, budget=WIDE.size, strategy="random", seed=2)
    try:
        result = t.run()
    finally:
        runner.close()
        builder.close()
    new = result.history[result.reused:]
    assert result.reused == len(before)
    assert not {r.config for r in new if not r.environment} & before  # nothing recorded measured again
    assert {r.config for r in db.records(workload, Target.cpu())} == set(WIDE)


@pytest.mark.slow
def test_the_task_scheduler_tunes_te_kernels_on_ray(cluster, ray_executor, tmp_path):
    """autoschedule_many: every round of the task scheduler goes through the Ray executor,
    two kernels' rounds at once (one round of 4 candidates is less than the cluster's 8);
    each kernel comes back verified, and its records name the nodes that measured them."""
    from tensortune import te
    from tensortune.te import workloads

    db = Database(tmp_path / "t.db")
    many = te.autoschedule_many([workloads.matmul(16, 16, 16), workloads.matmul(8, 24, 16)], budget=8, db=db,
                                trials_per_round=4, confirm=1, executor=ray_executor)
    for kernel in many:
        a = np.random.default_rng(0).standard_normal(kernel.kernel.inputs[0].shape).astype("float32")
        b = np.random.default_rng(1).standard_normal(kernel.kernel.inputs[1].shape).astype("float32")
        np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)
        records = db.records(kernel.workload, Target.cpu())
        assert records and all(r.extra.get("ray_node") for r in records if r.extra.get("stage") != "build")
    assert many.allocation.total_trials == 8
    first, second = many.allocation.rounds  # both warm-up rounds at once: they overlap in time
    assert first.started < second.started + second.seconds and second.started < first.started + first.seconds


@pytest.mark.slow
def test_no_node_of_the_target_is_a_clear_error(cluster, ray_executor, tmp_path):
    db = Database(tmp_path / "t.db")
    p, builder, runner = c_parts(tmp_path)
    t = Tuner(SMALL, runner, builder=builder, workload=Workload.make("saxpy", p.source), db=db, budget=2,
              target=Target.make("cpu", "Elsewhere", "x86_64x64"), progress=False, executor=ray_executor)
    try:
        with pytest.raises(RuntimeError, match=r"no node that measures for cpu Elsewhere .*ray start .*--resources"):
            t.run()
    finally:
        runner.close()
        builder.close()
    assert not db.records(t.workload, t.target)


@pytest.mark.slow
def test_a_whole_model_for_the_cpu_tunes_its_kernels_on_ray(cluster, ray_executor, tmp_path):
    """tensortune.compile(executor=...): the task scheduler's kernels are built and measured
    on the cluster, and the compiled model matches eager torch."""
    import torch

    import tensortune

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)).eval()
    db = tmp_path / "records.db"
    fast = tensortune.compile(model, (torch.randn(4, 16),), target="cpu", budget=4, db=str(db), progress=False,
                              executor=ray_executor)
    assert all(t.source == "tuned" for t in fast.report.tasks), fast.report.table()
    x = torch.randn(4, 16)
    with torch.no_grad():
        torch.testing.assert_close(fast(x), model(x), rtol=1e-4, atol=1e-4)
    store = Database(db)
    measured = [r for w in fast.workloads for r in store.records(w, Target.cpu()) if r.extra.get("stage") != "build"]
    assert measured and all(r.extra.get("ray_node") for r in measured if r.strategy != "confirm")
