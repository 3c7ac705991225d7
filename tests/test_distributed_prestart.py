"""The Ray executor keeps its slots busy: each measuring actor starts the run's worker when
the run starts (not at its first candidate), and candidates are asked for as slots free up,
so one slow candidate does not hold back the rest. On the real cluster of conftest's
`ray_cluster` (a head and two worker nodes on loopback)."""

import functools
import os
import time
from pathlib import Path

import pytest

from tensortune.db import Database, Target, Workload
from tensortune.distributed import RayExecutor
from tensortune.measure import BuildResult, CallableRunner, IsolatedCallableRunner, RemoteBuild, Timer
from tensortune.space import Space
from tensortune.tuner import Tuner

BUILD_SECONDS = 6.0


def _slow_build(seconds: float, config) -> BuildResult:
    time.sleep(seconds)
    return BuildResult(config, compile_seconds=seconds)


class SlowBuilder:
    """Every candidate takes `seconds` to build (on a Ray build task)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def build(self, configs):
        return [_slow_build(self.seconds, c) for c in configs]

    def remote_build(self) -> RemoteBuild:
        return RemoteBuild(functools.partial(_slow_build, self.seconds), timeout=120, native=False)


def _process_started() -> float:
    """When this process started, on the wall clock (from /proc, to 10 ms)."""
    ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))


def _note_worker(folder: str, n: int) -> int:
    """Inside a measuring worker: write down when this worker process started."""
    Path(folder, f"{os.getpid()}.started").write_text(repr(_process_started()))
    return n


def _pause(n: int) -> int:
    time.sleep(0.3)
    return n


def _sleepy(n: int) -> int:
    if n == 0:
        time.sleep(2.0)
    return n


@pytest.fixture
def ray_executor(ray_cluster):
    executor = RayExecutor(ray_cluster.address)
    yield executor
    executor.close()


def warm(executor):
    """Runs until both of the cluster's measuring actors have measured: they start with
    the executor's first run, and a node an earlier test added back may still be starting."""
    quick = Timer(warmup_seconds=0, min_repeats=1, budget_seconds=0)
    for k in range(10):
        result = run(Space({"n": [1, 2, 3, 4]}), CallableRunner(_pause, quick), executor, budget=4, name=f"warm{k}")
        if len({r.extra["ray_actor"] for r in result.history}) == 2:
            return
    pytest.fail("the cluster's two measuring actors never both measured")


def run(space, runner, executor, budget, builder=None, **kw):
    return Tuner(space, runner, builder=builder, workload=Workload.make(kw.pop("name", "f")),
                 target=Target.cpu(), db=Database(":memory:"), strategy=kw.pop("strategy", "exhaustive"),
                 budget=budget, progress=False, executor=executor, **kw).run()


@pytest.mark.slow
def test_each_actor_starts_the_runs_worker_when_the_run_starts(ray_executor, tmp_path):
    """With every build taking 6 s, each measuring actor's worker for the run has started
    within 3 s of the run's start: before any candidate could reach it. (The actors
    themselves are started by earlier runs, as they are kept across an executor's runs.)"""
    quick = Timer(warmup_seconds=0, min_repeats=1, budget_seconds=0)
    warm(ray_executor)
    runner = IsolatedCallableRunner(functools.partial(_note_worker, str(tmp_path)), quick, timeout=60)
    try:
        start = time.time()
        result = run(Space({"n": [1, 2, 3, 4]}), runner, ray_executor, budget=4, builder=SlowBuilder(BUILD_SECONDS))
    finally:
        runner.close()
    assert result.trials == 4 and all(r.ok for r in result.history)
    actors = {r.extra["ray_actor"] for r in result.history}
    started = [float(p.read_text()) for p in tmp_path.glob("*.started")]
    assert len(started) == len(actors)  # one worker per actor that measured, kept for the whole run
    assert all(s - start < BUILD_SECONDS / 2 for s in started), [round(s - start, 2) for s in started]


@pytest.mark.slow
def test_a_slow_candidate_does_not_hold_back_the_others(ray_executor):
    """One candidate measures for seconds; the others are asked for and measured on the
    other actor meanwhile, in windows of two: with a barrier at each batch's end, the
    slow one's result would come second, here most of the run comes before it. (Earlier
    runs start both actors, so that neither queues candidates behind the slow one.)"""
    seen = []
    quick = Timer(warmup_seconds=0, min_repeats=1, budget_seconds=0)
    warm(ray_executor)
    result = run(Space({"n": list(range(10))}), CallableRunner(_sleepy, quick), ray_executor, budget=10,
                 batch_size=2, callbacks=[seen.append])
    order = [r.config["n"] for r in seen]
    assert result.trials == 10 and sorted(order) == list(range(10)) and all(r.ok for r in seen)
    assert order.index(0) >= 5, order
