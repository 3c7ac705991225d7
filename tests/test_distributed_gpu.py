"""The GPU frontends on a real Ray cluster (`LocalCluster`: a head and two worker nodes on
loopback, shared with test_distributed.py), run under Triton's interpreter: every worker
node offers one GPU to Ray and serves the interpreter's target, so candidates are measured
by actors that own a GPU (Ray sets their CUDA_VISIBLE_DEVICES), each in its isolated
worker, on nodes of the target only; builds run as Ray tasks on nodes of the target."""

from __future__ import annotations

import importlib.util
import os

import pytest

torch = pytest.importorskip("torch")
if importlib.util.find_spec("triton") is None:
    pytest.skip("triton is not installed", allow_module_level=True)

from test_triton_kernels import matmul_args, matmul_grid, matmul_kernel  # noqa: E402

import tensortune as tt  # noqa: E402
import triton  # noqa: E402
from tensortune.db import Database, Workload  # noqa: E402
from tensortune.distributed import RayExecutor  # noqa: E402
from tensortune.frontends.triton.target import interpreter_target  # noqa: E402
from tensortune.measure import ErrorKind  # noqa: E402
from tensortune.measure.cuda_timer import CudaTimer  # noqa: E402

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET", "0") == "0",
                                reason="these tests run Triton's interpreter (no GPU here)")

HOST_TIMER = CudaTimer(clock="host", budget_seconds=0.0, warmup_seconds=0.0, min_repeats=1, estimate_repeats=1)


def matmul_reference(a, b, c, *rest):
    c.copy_(a @ b)


@pytest.fixture
def gpu_executor(ray_cluster):
    """Measuring actors that each hold one of the nodes' GPUs (as for a real GPU target)."""
    executor = RayExecutor(ray_cluster.address, measure_gpus=1)
    yield executor
    executor.close()


@pytest.mark.slow
def test_an_autotuned_triton_kernel_is_measured_by_actors_that_own_a_gpu(tmp_path, ray_cluster, gpu_executor,
                                                                          monkeypatch):
    """@tensortune.autotune(executor=...): every candidate, good and bad, measured on an
    actor holding a GPU, in its isolated worker; the launch uses the verified winner,
    confirmed here in a worker started in the background when the search began."""
    from tensortune.frontends.triton import isolated

    started = []
    early_start = isolated.EarlyStart.__init__
    monkeypatch.setattr(isolated.EarlyStart, "__init__",
                        lambda self, *a, **kw: started.append(self) or early_start(self, *a, **kw))
    configs = [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": 16}, num_warps=4) for m, n in ((16, 16), (32, 32))]
    configs += [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 24}),  # raises in the worker
                triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "BUG": 1})]  # wrong result
    db = Database(tmp_path / "t.db")
    k = tt.autotune(configs=configs, key=["M"], reference=matmul_reference, timer=HOST_TIMER, db=db,
                    settings=tt.Settings(db_path=tmp_path / "t.db", progress=False),
                    executor=gpu_executor)(matmul_kernel)
    args = matmul_args(20, 24, 40)
    k[matmul_grid(20, 24)](*args)
    torch.testing.assert_close(args[2], args[0] @ args[1], rtol=1e-4, atol=1e-4)
    (tuning,) = k.tunings.values()
    history = tuning.result.history
    assert len(history) == 4
    by_block = {(r.config["BLOCK_K"], r.config["BUG"] or 0): r for r in history}
    assert by_block[(24, 0)].error is ErrorKind.RUNTIME_ERROR
    assert by_block[(16, 1)].error is ErrorKind.WRONG_RESULT
    nodes = {n["NodeID"] for n in gpu_executor.connect().nodes() if n["Alive"]}
    for r in history:
        assert r.extra["ray_node"] in nodes and r.extra["ray_gpus"] == "0", r.extra  # Ray's CUDA_VISIBLE_DEVICES
    workload = Workload.make(k.name, k.source, k.decision.key.as_dict())
    records = db.records(workload, interpreter_target())
    assert {r.config for r in records if not r.extra.get("final")} == {r.config for r in history}
    (early,) = started
    assert early.ready_seconds is not None  # started by EarlyStart in the background, not at the confirmation


@pytest.mark.slow
def test_te_autoschedule_for_cuda_generates_compiles_and_measures_on_the_cluster(tmp_path, gpu_executor):
    """te.autoschedule(target="cuda", executor=...): each candidate's module is generated in
    a build task and travels to the actor that measures it; the winner computes the graph."""
    from tensortune import te
    from tensortune.te import workloads

    db = Database(tmp_path / "t.db")
    kernel = te.autoschedule(workloads.matmul(16, 16, 32, "float16"), target="cuda", budget=4, db=db,
                             cache_dir=tmp_path / "gen", strategy="random", jobs=1, confirm=1, progress=False,
                             executor=gpu_executor)
    a, b = torch.randn(16, 32).half(), torch.randn(32, 16).half()
    torch.testing.assert_close(kernel(a, b).float(), a.float() @ b.float(), rtol=2e-2, atol=2e-2)
    records = db.records(_cuda_workload(kernel), interpreter_target())
    assert len(records) == 4 and any(r.ok for r in records)
    assert all(r.extra["ray_gpus"] == "0" and r.extra["ray_node"] for r in records if r.extra.get("stage") != "build")


def _cuda_workload(kernel):
    from tensortune.backends.triton.tune import cuda_workload

    return cuda_workload(kernel.plan, kernel.generator.options)


@pytest.mark.slow
def test_a_node_killed_while_it_measures_triton_candidates_loses_nothing(tmp_path, ray_cluster, gpu_executor):
    """A worker node dies while its GPU actor has candidates queued: they come back as the
    environment's failures, are measured again on the other node, and every result the
    run saw is in the database; the launch still uses a verified winner."""
    import threading
    import time

    configs = [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": kk}, num_warps=w)
               for m in (16, 32) for n in (16, 32) for kk in (16, 32) for w in (1,)]
    db_path = tmp_path / "t.db"
    slow = CudaTimer(clock="host", budget_seconds=0.3, warmup_seconds=0.0, min_repeats=2, estimate_repeats=1)
    k = tt.autotune(configs=configs, key=["M"], reference=matmul_reference, timer=slow,
                    settings=tt.Settings(db_path=db_path, progress=False), executor=gpu_executor)(matmul_kernel)
    args = matmul_args(20, 24, 40)
    victim: list[str] = []
    stop = threading.Event()

    def kill_the_node_of_an_early_result():
        watch = Database(db_path)
        while not stop.is_set():
            seen = [r for r in watch.all_records() if r.extra.get("ray_node")]
            if len(seen) >= 2:
                victim.append(seen[0].extra["ray_node"])
                ray_cluster.kill_node(victim[0])
                return
            time.sleep(0.1)

    killer = threading.Thread(target=kill_the_node_of_an_early_result, daemon=True)
    killer.start()
    try:
        k[matmul_grid(20, 24)](*args)
    finally:
        stop.set()
        killer.join()
        ray_cluster.add_worker()  # the next test has its two workers again
    torch.testing.assert_close(args[2], args[0] @ args[1], rtol=1e-4, atol=1e-4)
    assert victim, "the node was not killed during the run"
    (tuning,) = k.tunings.values()
    seen = tuning.result.history
    workload = Workload.make(k.name, k.source, k.decision.key.as_dict())
    records = [r for r in Database(db_path).records(workload, interpreter_target()) if not r.extra.get("final")]
    assert len(records) == len(seen)  # every result the run saw was recorded
    lost = [r for r in seen if r.environment]
    assert lost and all("lost" in r.environment for r in lost)
    measured_after = {r.config for r in seen[seen.index(lost[0]):] if r.ok}
    assert {r.config for r in lost} <= measured_after  # measured again, on the node left
    assert len({r.config for r in seen if r.ok}) == len(configs)  # nothing lost: every candidate measured


def test_a_triton_build_task_compiles_for_sm90_and_its_cache_entries_are_hits_elsewhere(tmp_path, monkeypatch):
    """The build recipe of `@tensortune.autotune` (what a Ray build task runs), in a fresh
    process without a GPU: it compiles for sm_90 and packs the Triton cache entry. Installed
    in another cache (`arrive`, on the measuring node), compiling the same candidate there
    finds it (no file is written again), and the group file points at the new cache."""
    import json

    from test_gpu_measure_triton import N, scale_kernel

    from tensortune.frontends.triton.isolated import parallel_builder
    from tensortune.measure import IsolatedWorker
    from tensortune.measure.gpu import TensorArg
    from tensortune.measure.triton_compile import kernel_reference, precompile
    from tensortune.measure.triton_shipping import CacheEntries, TravellingBinary, arrive
    from tensortune.space import Config

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    here, there = tmp_path / "here", tmp_path / "there"
    x = torch.randn(N)
    builder = parallel_builder(scale_kernel, (x, torch.empty_like(x), N, 1.5), {}, jobs=1, stream=True,
                               target=("cuda", 90, 32))
    recipe = builder.remote_build()
    assert recipe.native  # built on a node of the target
    with IsolatedWorker(timeout=300, env={"TRITON_CACHE_DIR": str(here)}) as worker:
        built = worker.call(recipe.build, Config(BLOCK=64, num_warps=2))
    assert built.ok, built.message
    travelled = built.artifact
    assert isinstance(travelled, TravellingBinary) and travelled.binary.binary_digest
    entries = travelled.entries
    assert any(name.endswith(".cubin") for _, name, _, _ in entries.files)
    module = tmp_path / "gen" / "k.py"
    with_module = TravellingBinary(travelled.binary, entries, str(module), "X = 1\n")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(there))
    assert arrive(with_module) == travelled.binary and module.read_text() == "X = 1\n"
    folder = there / entries.files[0][0]
    (group,) = folder.glob("__grp__*")
    assert all(p.startswith(str(folder)) for p in json.loads(group.read_text())["child_paths"].values())
    before = {f.name: f.stat().st_ino for f in folder.iterdir()}
    assert entries.install(there) == 0  # there whole already: nothing written again
    args = [TensorArg((N,)), TensorArg((N,)), N, 1.5]
    (again,) = precompile(kernel_reference(scale_kernel), [{"BLOCK": 64, "num_warps": 2}], args,
                          target=("cuda", 90, 32), jobs=1, env={"TRITON_CACHE_DIR": str(there)})
    assert again.ok and again.artifact.kernel_hash == travelled.binary.kernel_hash
    assert {f.name: f.stat().st_ino for f in folder.iterdir()} == before  # a cache hit: nothing rewritten
    damaged = CacheEntries(tuple((h, n, d + b"!", s) for h, n, d, s in entries.files))
    with pytest.raises(ValueError, match="arrived damaged"):
        damaged.install(tmp_path / "elsewhere")


@pytest.mark.slow
def test_a_whole_model_for_the_gpu_tunes_its_kernels_on_ray_in_concurrent_rounds(tmp_path, gpu_executor,
                                                                                  monkeypatch):
    """tensortune.compile(target="cuda", executor=...): the task scheduler runs several
    kernels' rounds at once on the cluster (a round of one kernel is smaller than what
    the cluster measures at once); the compiled model matches eager torch; every kernel's
    winner is confirmed here in one shared worker, not in a worker each, started while
    the rounds run rather than after them."""
    import time

    import tensortune
    from tensortune.graph.targets import CudaTarget
    from tensortune.measure.gpu import GpuRunner
    from tensortune.tasks import TaskScheduler

    confirmers = []
    shared_runner = CudaTarget.shared_runner
    monkeypatch.setattr(CudaTarget, "shared_runner",
                        lambda self, task: confirmers.append(shared_runner(self, task)) or confirmers[-1])
    warmed = []
    warm_up = GpuRunner.warm_up
    monkeypatch.setattr(GpuRunner, "warm_up", lambda self: warmed.append(time.perf_counter()) or warm_up(self))
    schedules, ended = [], []
    run = TaskScheduler.run
    monkeypatch.setattr(TaskScheduler, "run",
                        lambda self: schedules.append(run(self)) or ended.append(time.perf_counter()) or schedules[-1])

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)).eval()
    db = tmp_path / "records.db"
    fast = tensortune.compile(model, (torch.randn(4, 16),), target="cuda", budget=4, db=str(db), progress=False,
                              executor=gpu_executor)
    assert all(t.source == "tuned" for t in fast.report.tasks), fast.report.table()
    x = torch.randn(4, 16)
    with torch.no_grad():
        torch.testing.assert_close(fast(x), model(x), rtol=2e-2, atol=2e-2)
    store = Database(db)
    measured = [r for w in fast.workloads for r in store.records(w, interpreter_target())
                if r.extra.get("stage") != "build"]
    assert measured and all(r.extra.get("ray_gpus") == "0" for r in measured)
    (schedule,) = schedules
    assert len(confirmers) > len(fast.report.tasks) >= 2 and all(r is confirmers[0] for r in confirmers)
    assert len(warmed) == 1 and warmed[0] < ended[0]  # the confirming worker started before the last round ended
    rounds = schedule.rounds  # several kernels' rounds at once: two of them overlap in time
    assert any(a.task != b.task and a.started < b.started < a.started + a.seconds for a in rounds for b in rounds), \
        rounds


TINY_MODEL = """
import torch

def make():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
"""


@pytest.mark.slow
def test_model_tune_for_cuda_on_ray_from_the_command_line(tmp_path, ray_cluster):
    """`tensortune model tune --target cuda --executor ray`: the model's kernels are
    measured on the cluster (by actors of the interpreter's target) and checked here."""
    import json

    from click.testing import CliRunner

    from tensortune.cli.main import cli

    (tmp_path / "tiny_gpu_model.py").write_text(TINY_MODEL)
    db = tmp_path / "m.db"
    out = CliRunner().invoke(cli, ["--db", str(db), "model", "tune", f"{tmp_path / 'tiny_gpu_model.py'}:make",
                                   "--input", "4x8", "--target", "cuda", "--budget", "4", "--executor", "ray",
                                   "--ray-address", ray_cluster.address, "--json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.output[out.output.index("{"):])
    assert report["graphs"][0]["tasks"] and not report["graphs"][0]["fallbacks"]
    records = [r for r in Database(db).all_records() if r.extra.get("stage") != "build"]
    assert records and all(r.extra.get("ray_node") for r in records if r.strategy != "confirm")


def test_kernels_tuned_on_one_cluster_share_its_executor_and_bad_options_are_named():
    from tensortune.frontends.triton.kernel import _named_executor

    assert _named_executor("ray", "127.0.0.1:1") is _named_executor("ray", "127.0.0.1:1")  # joins lazily
    with pytest.raises(ValueError, match="executor must be 'local', 'ray' or an Executor"):
        tt.autotune(configs=[triton.Config({"BLOCK_M": 16})], key=["M"], executor="dask")
    with pytest.raises(ValueError, match="ray_address= needs executor='ray'"):
        tt.autotune(configs=[triton.Config({"BLOCK_M": 16})], key=["M"], ray_address="127.0.0.1:1")
    with pytest.raises(ValueError, match="isolate=False cannot measure on a Ray cluster"):
        tt.autotune(configs=[triton.Config({"BLOCK_M": 16})], key=["M"], executor="ray", isolate=False)


def test_a_launch_that_cannot_be_isolated_is_refused_for_ray_with_the_reason(tmp_path):
    """A Python pre_hook runs around each launch in this process: it cannot run on a node."""
    configs = [triton.Config({"BLOCK_M": m, "BLOCK_N": 16, "BLOCK_K": 16}) for m in (16, 32)]
    k = tt.autotune(configs=configs, key=["M"], pre_hook=lambda args, reset_only=False: None,
                    settings=tt.Settings(db_path=tmp_path / "t.db", progress=False),
                    executor=RayExecutor("127.0.0.1:1"))(matmul_kernel)
    with pytest.raises(ValueError, match="measures in isolated workers on the cluster's nodes, but pre_hook"):
        k[matmul_grid(20, 24)](*matmul_args(20, 24, 40))


def fake_recipe(n: int):
    """The remote recipe of a GpuRunner measuring the fakes' kernel on `n` elements (CPU)."""
    from tensortune.measure.gpu import GpuRunner, GpuTask, TensorArg

    timer = CudaTimer(clock="host", budget_seconds=0.0, warmup_seconds=0.0, min_repeats=1, estimate_repeats=1)
    task = GpuTask("tensortune.measure.gpu.fakes:launch", (TensorArg((n,)), TensorArg((n,), output=True)),
                   reference="tensortune.measure.gpu.fakes:reference", device="cpu", timer=timer)
    return GpuRunner(task, timeout=60).remote_runner()


def test_an_actor_past_its_most_runners_hands_a_gpu_worker_to_the_next_task(monkeypatch):
    """Past `MAX_RUNNERS`, the next task's runner adopts the least recently used one's
    worker (no new process, no new CUDA context), and measures its own task."""
    from tensortune.distributed import actor as actor_module
    from tensortune.measure import BuildResult
    from tensortune.measure.gpu import GpuRunner, GpuTask, TensorArg
    from tensortune.space import Config

    monkeypatch.setattr(actor_module, "MAX_RUNNERS", 1)
    timer = CudaTimer(clock="host", budget_seconds=0.0, warmup_seconds=0.0, min_repeats=1, estimate_repeats=1)

    def task(n):
        return GpuTask("tensortune.measure.gpu.fakes:launch", (TensorArg((n,)), TensorArg((n,), output=True)),
                       reference="tensortune.measure.gpu.fakes:reference", device="cpu", timer=timer)

    first, second = GpuRunner(task(64), timeout=60), GpuRunner(task(128), timeout=60)
    measurer = actor_module.MeasureActor(interpreter_target(), 0)
    try:
        (a,) = measurer.measure("a", [first.remote_runner()], BuildResult(Config(fault="none")))
        worker = measurer.runners["a"][0]
        pid = worker._slots[0].worker._proc.pid
        (b,) = measurer.measure("b", [second.remote_runner()], BuildResult(Config(fault="wrong")))
        assert list(measurer.runners) == ["b"] and measurer.runners["b"][0] is worker
        assert worker.task.args[0].shape == (128,) and worker._slots[0].worker._proc.pid == pid
        assert a.ok and b.error is ErrorKind.WRONG_RESULT  # checked against its own task's reference
    finally:
        measurer.shutdown()


def test_the_next_runs_runner_takes_the_worker_of_a_run_that_has_ended():
    """A runner released at the end of its run (`RayExecutor.late_results`) hands its
    worker to the next task's runner when that one is prepared, well before the actor's
    kept-runner limit; a runner whose run goes on keeps its own worker."""
    from tensortune.distributed.actor import MeasureActor
    from tensortune.measure import BuildResult
    from tensortune.space import Config

    measurer = MeasureActor(interpreter_target(), 0)
    try:
        (a,) = measurer.measure("a", [fake_recipe(64)], BuildResult(Config(fault="none")))
        first = measurer.runners["a"][0]
        pid = first._slots[0].worker._proc.pid
        assert measurer.prepare("b", [fake_recipe(96)])["error"] == ""  # "a" still running: "b" gets its own
        measurer.settle("b")
        assert measurer.runners["b"][0] is not first and measurer.runners["b"][0]._slots[0].worker.pid != pid
        measurer.release("a")
        assert measurer.prepare("c", [fake_recipe(128)])["error"] == ""
        measurer.settle("c")  # its worker starts in a thread of its own
        assert list(measurer.runners) == ["b", "c"] and measurer.runners["c"][0] is first
        assert first._slots[0].worker.pid == pid and first._slots[0].ready  # started, for its new task
        (c,) = measurer.measure("c", [fake_recipe(128)], BuildResult(Config(fault="wrong")))
        assert a.ok and c.error is ErrorKind.WRONG_RESULT and first.task.args[0].shape == (128,)
    finally:
        measurer.shutdown()


def test_the_next_round_of_a_kernel_takes_the_worker_that_holds_that_kernel_already():
    """Of the ended runners, a new round adopts first the one whose worker measured the
    same task (its arguments and reference made), not the least recently used one of
    another task, which would make them all again."""
    from tensortune.distributed.actor import MeasureActor
    from tensortune.measure import BuildResult
    from tensortune.space import Config

    measurer = MeasureActor(interpreter_target(), 0)
    try:
        for key, n in (("a", 64), ("b", 96)):
            (r,) = measurer.measure(key, [fake_recipe(n)], BuildResult(Config(fault="none")))
            assert r.ok
        held = {k: measurer.runners[k][0] for k in ("a", "b")}
        measurer.release("a")
        measurer.release("b")  # "a" is the least recently used, "b" holds the kernel of size 96
        (r,) = measurer.measure("b2", [fake_recipe(96)], BuildResult(Config(fault="none")))
        assert r.ok and measurer.runners["b2"][0] is held["b"] and measurer.finished == {"a"}
        (r,) = measurer.measure("c", [fake_recipe(128)], BuildResult(Config(fault="wrong")))  # no holder: the LRU
        assert r.error is ErrorKind.WRONG_RESULT and measurer.runners["c"][0] is held["a"]
    finally:
        measurer.shutdown()


def test_runs_going_on_at_once_keep_their_own_workers_past_the_kept_ended_ones(monkeypatch):
    """More tasks' rounds at once than an actor keeps ended runners for: each running
    task keeps its worker (no task is swapped out from under another's candidates), and
    of the ended runners only the most recently used `KEPT_FINISHED` stay."""
    from tensortune.distributed import actor as actor_module
    from tensortune.measure import BuildResult
    from tensortune.space import Config

    monkeypatch.setattr(actor_module, "KEPT_FINISHED", 1)
    measurer = actor_module.MeasureActor(interpreter_target(), 0)
    try:
        sizes = {"a": 64, "b": 96, "c": 128}
        for _ in range(2):  # the tasks' candidates interleave on the actor
            for key, n in sizes.items():
                (r,) = measurer.measure(key, [fake_recipe(n)], BuildResult(Config(fault="none")))
                assert r.ok
        pids = {k: measurer.runners[k][0]._slots[0].worker.pid for k in sizes}
        assert len(set(pids.values())) == 3 and all(
            measurer.runners[k][0].task.args[0].shape == (n,) for k, n in sizes.items())
        measurer.release("a")
        measurer.release("b")  # two ended, one kept: the least recently used ("a") is closed
        assert list(measurer.runners) == ["b", "c"] and measurer.finished == {"b"}
    finally:
        measurer.shutdown()


class _SlowStartRunner:
    """A runner whose worker takes until `go` is set to start (a fake: isolates the actor)."""

    def __init__(self, go) -> None:
        self.go, self.ready = go, False

    def warm_up(self) -> None:
        assert self.go.wait(timeout=30)
        self.ready = True

    def run(self, builds):
        from tensortune.measure import MeasureResult
        return [MeasureResult(b.config, (1.0,), extra={"ready": self.ready}) for b in builds]


def test_prepare_starts_each_tasks_worker_in_a_thread_and_a_candidate_waits_for_its_own():
    """`prepare` returns while the worker is still starting (the actor takes the next call:
    other tasks' workers start at the same time), and a task's candidate waits for it."""
    import threading

    from tensortune.distributed.actor import MeasureActor
    from tensortune.measure import BuildResult, RemoteRunner
    from tensortune.space import Config

    go = threading.Event()
    measurer = MeasureActor(interpreter_target(), 0)
    recipe = RemoteRunner(lambda index: _SlowStartRunner(go))
    assert measurer.prepare("a", [recipe])["error"] == "" and measurer.prepare("b", [recipe])["error"] == ""
    assert set(measurer.starting) == {"a", "b"} and not measurer.runners["a"][0].ready  # both still starting
    threading.Timer(0.2, go.set).start()
    (a,) = measurer.measure("a", [recipe], BuildResult(Config(x=1)))
    assert a.extra["ready"] and "a" not in measurer.starting
    measurer.shutdown()
    assert not measurer.starting
