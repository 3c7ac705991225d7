"""GPU measurement machinery on the CPU: timers, confirmation, isolated workers with fakes.

The fakes (tensortune.measure.gpu.fakes) crash, hang, poison the worker, or answer
wrongly on command; the runner must record each as that candidate's error, restart the
worker, and go on, with every result in a real SQLite database.
"""

from __future__ import annotations

import math
import statistics
import time

import pytest

torch = pytest.importorskip("torch")

from tensortune.db import Database, Target, Workload  # noqa: E402
from tensortune.measure import BuildResult, ErrorKind, MeasureResult  # noqa: E402
from tensortune.measure.confirm import confirm_winners, near_ties  # noqa: E402
from tensortune.measure.cuda_timer import CudaTimer, _Clock  # noqa: E402
from tensortune.measure.gpu import GpuRunner, GpuTask, GpuTaskError, TensorArg, confirmed_result  # noqa: E402
from tensortune.measure.gpu.args import make_args, mismatch, tolerance_for  # noqa: E402
from tensortune.space import Config, Space  # noqa: E402
from tensortune.tuner import Tuner  # noqa: E402

FAKES = "tensortune.measure.gpu.fakes"
HOST = CudaTimer(clock="host", budget_seconds=0.002, warmup_seconds=0.0, min_repeats=3, cooldown=0)


def fake_task(**kw) -> GpuTask:
    args = kw.pop("args", (TensorArg((64,)), TensorArg((64,), output=True)))
    return GpuTask(kw.pop("launch", f"{FAKES}:launch"), args, reference=kw.pop("reference", f"{FAKES}:reference"),
                   device="cpu", timer=kw.pop("timer", HOST), health_check=f"{FAKES}:health_check", **kw)


# -- timer ------------------------------------------------------------------------------

class FakeClock(_Clock):
    """A clock where each run of fn advances time by a fixed step (isolates the repeat logic);
    `queues=True` makes it queue work like the CUDA clock, so runs get a lead."""

    def __init__(self, step: float, queues: bool = False) -> None:
        self.now, self.step, self.flushes, self.syncs, self.idles = 0.0, step, 0, 0, []
        self.queues = queues

    def synchronize(self) -> None:
        self.syncs += 1

    def mark(self) -> float:
        return self.now

    def seconds(self, a: float, b: float) -> float:
        return b - a

    def flush(self) -> None:
        self.flushes += 1

    def idle(self, seconds: float) -> None:
        self.idles.append(seconds)
        self.now += seconds

    def capture(self, fn, batch):
        def replay():
            for _ in range(batch):
                fn()
        return replay


def test_timer_chooses_repeats_from_the_estimate_and_flushes_before_every_run():
    clock = FakeClock(step=1e-3)
    calls = []

    def fn():
        calls.append(1)
        clock.now += clock.step

    setups = []
    timer = CudaTimer(budget_seconds=0.05, warmup_seconds=0.01, min_repeats=5, estimate_repeats=4, cooldown=0)
    times = timer._time_with(clock, fn, lambda: setups.append(1), None)
    assert len(times) == 50 and all(t == pytest.approx(1e-3) for t in times)
    # 1 first call + 4 estimate + 10 warm-up + 50 timed; every run but the first is flushed
    assert len(calls) == 65 and clock.flushes == 64 and len(setups) == 65
    slow = FakeClock(step=1.0)

    def slow_fn():
        slow.now += 1.0
    assert len(timer._time_with(slow, slow_fn, None, None)) == 5  # min_repeats
    assert len(timer._time_with(slow, slow_fn, None, 0.5)) == 4  # cut off after the estimate


def test_cooldown_idles_after_runs_outside_the_timed_window():
    clock = FakeClock(step=1e-3)

    def fn():
        clock.now += clock.step
    times = CudaTimer(budget_seconds=0.05, warmup_seconds=0.0)._time_with(clock, fn, None, None)
    assert len(times) == 25 and all(t == pytest.approx(1e-3) for t in times)  # half the runs in the budget
    assert clock.idles == [pytest.approx(1e-3)] * 25


def test_each_run_gets_a_lead_that_covers_the_host_launching_it():
    clock = FakeClock(step=1e-3, queues=True)

    def slow_launch():
        time.sleep(0.002)  # the host takes 2 ms to queue the run
        clock.now += clock.step
    timer = CudaTimer(budget_seconds=0.02, warmup_seconds=0.0, cooldown=0, estimate_repeats=3)
    times = timer._time_with(clock, slow_launch, None, None)
    assert all(t == pytest.approx(1e-3) for t in times)  # the lead is outside the timed window
    assert len(clock.idles) == 3 + len(times)  # one lead before every estimate run and every timed run
    assert len(set(clock.idles)) == 1 and clock.idles[0] >= 3 * 0.002

    fast = FakeClock(step=1e-3, queues=True)

    def fast_launch():
        fast.now += fast.step
    timer._time_with(fast, fast_launch, None, None)
    assert set(fast.idles) == {timer.lead_seconds}  # never less than the floor


def test_graph_mode_divides_replays_by_the_batch():
    clock = FakeClock(step=2e-6)

    def fn():
        clock.now += clock.step
    times = CudaTimer(cuda_graph=True, graph_batch=100, budget_seconds=0.01)._time_with(clock, fn, None, None)
    assert times and all(t == pytest.approx(2e-6) for t in times)


def test_host_clock_times_real_work_and_validates_options():
    times = CudaTimer(clock="host", budget_seconds=0.005, min_repeats=3).time(lambda: sum(range(20000)))
    assert len(times) >= 3 and all(t > 0 for t in times)
    with pytest.raises(ValueError, match="clock"):
        CudaTimer(clock="wall")
    with pytest.raises(ValueError, match="min_repeats"):
        CudaTimer(min_repeats=0)


# -- confirmation -----------------------------------------------------------------------

class ScriptedTimer:
    """Returns given times per candidate, round after round (isolates the choice logic)."""

    def __init__(self, script):
        self.script, self.calls = {k: list(v) for k, v in script.items()}, []

    def time(self, fn):
        key = fn()
        self.calls.append(key)
        return (self.script[key].pop(0),)


def test_confirm_picks_the_lowest_median_and_reports_confidence():
    timer = ScriptedTimer({"a": [1.00, 1.02, 1.00, 1.01, 1.00], "b": [0.99, 0.98, 0.99, 1.05, 0.99],
                           "c": [5.0] * 5})
    cands = {k: (lambda k=k: k) for k in "abc"}
    c = confirm_winners(cands, timer, prior={"a": 1.0, "b": 1.01, "c": 5.0}, within=0.03, rounds=5)
    assert c.winner == "b" and "c" not in c.medians  # c is not a near-tie: never re-timed
    assert c.confidence == pytest.approx(0.8) and c.margin == pytest.approx(1.00 / 0.99 - 1)
    assert set(timer.calls) == {"a", "b"} and len(timer.calls) == 10
    assert timer.calls[:2] != timer.calls[2:4] or timer.calls[2:4] != timer.calls[4:6]  # order shuffled
    assert c.as_extra()["confirmed"] is True
    with pytest.raises(ValueError):
        confirm_winners({}, timer)


def test_near_ties_keeps_successes_within_the_fraction():
    rs = [MeasureResult(Config(i=i), (t,)) for i, t in enumerate([1.0, 1.02, 1.05, 0.995])]
    rs.append(MeasureResult.failed(Config(i=9), ErrorKind.CRASHED, "x"))
    assert [r.config["i"] for r in near_ties(rs, 0.03)] == [3, 0, 1]


# -- arguments and comparisons ----------------------------------------------------------

def test_tensor_args_are_seeded_random_and_validated():
    specs = (TensorArg((4, 8), "float16"), TensorArg((5,), "int32", init="randint", low=3, high=9), 7,
             TensorArg((3,), output=True, init="empty"))
    a, b = make_args(specs, 1, "cpu"), make_args(specs, 1, "cpu")
    assert torch.equal(a[0], b[0]) and a[0].dtype == torch.float16 and a[0].abs().sum() > 0
    assert int(a[1].min()) >= 3 and int(a[1].max()) < 9 and a[2] == 7 and torch.isnan(a[3]).all()
    assert not torch.equal(make_args(specs, 2, "cpu")[0], a[0])
    with pytest.raises(ValueError, match="dtype"):
        TensorArg((2,), "float13")
    with pytest.raises(ValueError, match="at most one"):
        TensorArg((2,), output=True, zero=True)
    with pytest.raises(ValueError, match="at least one TensorArg"):
        GpuTask(f"{FAKES}:launch", (TensorArg((2,)),), device="cpu")


def test_mismatch_uses_dtype_tolerances():
    e = torch.randn(1000)
    assert mismatch(e + 1e-5 * e.abs().max(), e) is None  # float32: 1e-3 allows tf32
    assert "elements off" in mismatch(e * 1.01 + 0.05, e)
    h = e.half()
    assert mismatch((e * 1.004).half(), h) is None and tolerance_for("float16") == 1e-2
    bad = e.clone()
    bad[17] = float("nan")
    assert "NaN" in mismatch(bad, e)
    i = torch.arange(10, dtype=torch.int32)
    assert mismatch(i, i.clone()) is None and "differ" in mismatch(i + (i == 3), i)
    assert "shape" in mismatch(e[:10], e)


# -- isolated runner --------------------------------------------------------------------

def test_every_fault_is_recorded_and_tuning_goes_on(tmp_path):
    faults = ["none", "wrong", "partial", "crash", "oom", "hang", "sticky", "accumulate", "mutate_input"]
    space = Space({"fault": faults})
    db = Database(tmp_path / "records.db")
    workload, target = Workload.make("fake-faults"), Target.make("cpu", "fake-gpu")
    with GpuRunner(fake_task(), timeout=4, startup_timeout=120) as runner:
        result = Tuner(space, runner, workload=workload, target=target, db=db, strategy="exhaustive",
                       budget=len(faults), batch_size=len(faults), progress=False).run()
        restarts = runner.restarts
    by_fault = {r.config["fault"]: r for r in result.history}
    assert set(by_fault) == set(faults)
    assert by_fault["none"].ok and result.best_config == Config(fault="none")
    assert by_fault["wrong"].error is ErrorKind.WRONG_RESULT
    assert by_fault["partial"].error is ErrorKind.WRONG_RESULT and "NaN" in by_fault["partial"].message
    assert by_fault["crash"].error is ErrorKind.CRASHED and "SIGSEGV" in by_fault["crash"].message
    assert by_fault["oom"].error is ErrorKind.OUT_OF_RESOURCES
    assert by_fault["hang"].error is ErrorKind.TIMEOUT
    assert by_fault["sticky"].error is ErrorKind.CRASHED and by_fault["sticky"].extra["worker_restarted"]
    assert by_fault["accumulate"].error is ErrorKind.WRONG_RESULT  # the poisoned output shows it
    assert by_fault["mutate_input"].error is ErrorKind.WRONG_RESULT and "timed runs" in by_fault["mutate_input"].message
    assert restarts == 3  # crash, hang, sticky
    records = db.records(workload, target)
    assert len(records) == len(faults) and sum(r.ok for r in records) == 1


def test_in_place_kernels_are_restored_and_first_config_is_the_reference():
    task = GpuTask(f"{FAKES}:inplace", (TensorArg((32,), restore=True),), device="cpu", timer=HOST)
    with GpuRunner(task, timeout=30) as runner:
        results = list(runner.run([BuildResult(Config(v=1)), BuildResult(Config(v=2))]))
        assert all(r.ok for r in results), [r.message for r in results]
        assert sorted(r.extra["reference"] for r in results) == ["first_config", "this"]
        # an accumulating kernel is right when its output is declared zero=True (reset_to_zero);
        # the same worker measures it after set_task
        runner.set_task(fake_task(args=(TensorArg((64,)), TensorArg((64,), zero=True))))
        (r,) = runner.run([BuildResult(Config(fault="accumulate"))])
        assert r.ok, r.message
        assert runner.restarts == 0


def test_duplicate_binaries_are_measured_once_across_two_workers():
    class Bin:
        def __init__(self, d):
            self.binary_digest = d
    builds = [BuildResult(Config(fault="none", k=1), Bin("aa")), BuildResult(Config(fault="none", k=2), Bin("aa")),
              BuildResult(Config(fault="none", k=3), None, ErrorKind.COMPILE_ERROR, "ptxas said no"),
              BuildResult(Config(fault="none", k=4, sleep=0.05), Bin("bb")),
              BuildResult(Config(fault="none", k=5, sleep=0.05), Bin("cc"))]
    with GpuRunner(fake_task(), devices=[0, 1], timeout=30) as runner:
        results = {r.config["k"]: r for r in runner.run(iter(builds))}
    assert results[1].ok and results[2].ok and results[2].times == results[1].times
    assert results[2].extra["duplicate_of"] == Config(fault="none", k=1).to_json()
    assert results[3].error is ErrorKind.COMPILE_ERROR
    assert {r.extra["device"] for r in results.values() if r.ok} == {"gpu0", "gpu1"}


def test_a_worker_keeps_the_tasks_it_prepared_and_takes_one_up_again_without_remaking_it(monkeypatch, tmp_path):
    """A runner that switches between kernels (a model's rounds in turn) makes each
    task's arguments and reference once in its worker; past `KEPT_TASKS` (or
    `KEPT_BYTES`), the least recently used task is made anew."""
    from collections import OrderedDict

    from tensortune.measure.gpu import fakes, worker_side
    from tensortune.measure.worker import worker_state

    made = []
    reference = fakes.reference
    monkeypatch.setattr(fakes, "reference", lambda x, out: made.append(x.numel()) or reference(x, out))
    monkeypatch.setattr(worker_side, "KEPT_TASKS", 2)
    state = worker_state()
    monkeypatch.setitem(state, "gpu_tasks", OrderedDict())
    state.pop("gpu_task", None)
    a, b, c = (fake_task(args=(TensorArg((n,)), TensorArg((n,), output=True))) for n in (16, 32, 48))
    for task in (a, b, a, b, a):
        worker_side.prepare(task, str(tmp_path))
        assert state["gpu_task"].digest == task.digest
    assert made == [16, 32]
    worker_side.prepare(b, str(tmp_path))
    outcome = worker_side.measure(b, Config(fault="wrong"), str(tmp_path))  # checked against b's own reference
    assert outcome["error"] == ErrorKind.WRONG_RESULT.value
    worker_side.prepare(c, str(tmp_path))  # a third: the least recently used (a) goes
    worker_side.prepare(a, str(tmp_path))
    assert made == [16, 32, 48, 16] and list(state["gpu_tasks"]) == [c.digest, a.digest]
    monkeypatch.setattr(worker_side, "KEPT_BYTES", 1)  # nothing fits beside the newest
    worker_side.prepare(b, str(tmp_path))
    assert list(state["gpu_tasks"]) == [b.digest]
    state.pop("gpu_task", None)


def test_confirm_in_worker_and_broken_task_is_a_clear_error():
    timer = CudaTimer(clock="host", budget_seconds=0.01, warmup_seconds=0.0, min_repeats=3)
    with GpuRunner(fake_task(timer=timer), timeout=30, cutoff_factor=3.0) as runner:
        rs = list(runner.run([BuildResult(Config(fault="none", sleep=s)) for s in (0.0, 0.0005, 0.02)]))
        confirmation = runner.confirm(rs, within=1e6, rounds=3)
    best = min(rs, key=lambda r: r.time)
    assert len(rs[2].times) == 5  # cut off after the estimate: more than 3x slower than the best
    assert confirmation.winner == best.config == Config(fault="none", sleep=0.0)
    assert len(confirmation.medians) == 3 and 0 < confirmation.confidence <= 1
    rec = confirmed_result(best, confirmation)
    assert rec.extra["confirmed"] and rec.extra["rounds"] == 3 and math.isfinite(rec.time)
    assert statistics.median(confirmation.times[best.config]) < 0.01
    broken = fake_task(reference=f"{FAKES}:no_such_reference")
    with GpuRunner(broken, timeout=30) as runner, pytest.raises(GpuTaskError, match="no_such_reference"):
        list(runner.run([BuildResult(Config(fault="none"))]))
