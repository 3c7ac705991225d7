"""The task scheduler: budgets, policies, dead tasks, objectives, and a real Tuner task."""

from __future__ import annotations

import math

import pytest

from tensortune.db import Database, Target, Workload
from tensortune.measure import CallableRunner, ErrorKind, MeasureResult, Timer
from tensortune.space import Config, Space
from tensortune.tasks import Task, TaskScheduler, TunerTask, concurrent_rounds
from tensortune.tuner import Tuner


class Curve:
    """A fake task whose k-th measured candidate takes scale * (1 + decay / (k + 1)) s."""

    def __init__(self, scale: float, decay: float = 1.0, limit: int | None = None) -> None:
        self.scale, self.decay, self.limit, self.n = scale, decay, limit, 0

    def tune(self, trials: int) -> list[MeasureResult]:
        if self.limit is not None:
            trials = min(trials, self.limit - self.n)
        out = [MeasureResult(Config(i=self.n + k), (self.scale * (1 + self.decay / (self.n + k + 1)),))
               for k in range(trials)]
        self.n += trials
        return out


def test_round_robin_splits_the_budget_evenly():
    tasks = [Task(f"t{i}", Curve(1.0 + i)) for i in range(3)]
    result = TaskScheduler(tasks, budget=48, policy="round-robin", trials_per_round=4).run()
    assert result.trials == {"t0": 16, "t1": 16, "t2": 16}
    assert result.total_trials == 48
    assert [r.task for r in result.rounds[:6]] == ["t0", "t1", "t2", "t0", "t1", "t2"]


def test_gradient_spends_on_what_reduces_the_weighted_latency():
    tasks = [Task("light", Curve(1.0), weight=1.0), Task("heavy", Curve(1.0), weight=20.0)]
    result = TaskScheduler(tasks, budget=64, trials_per_round=4).run()
    assert result.total_trials == 64
    assert [r.task for r in result.rounds[:2]] == ["light", "heavy"]  # warm-up, in order
    assert result.trials["heavy"] > 2 * result.trials["light"]
    expected = 1.0 * result.best["light"] + 20.0 * result.best["heavy"]
    assert result.objective == pytest.approx(expected)


def test_gradient_beats_round_robin_on_the_objective():
    def run(policy):
        tasks = [Task("a", Curve(1.0, decay=0.01)), Task("b", Curve(1.0, decay=5.0)),
                 Task("c", Curve(0.01, decay=1.0))]
        return TaskScheduler(tasks, budget=60, policy=policy, trials_per_round=3).run().objective
    assert run("gradient") < run("round-robin")


def test_exhausted_tasks_leave_the_budget_to_others():
    tasks = [Task("short", Curve(5.0, limit=3)), Task("long", Curve(1.0))]
    result = TaskScheduler(tasks, budget=30, policy="round-robin", trials_per_round=4).run()
    assert result.trials == {"short": 3, "long": 27}


def test_all_tasks_exhausted_ends_early():
    tasks = [Task("a", Curve(1.0, limit=2)), Task("b", Curve(1.0, limit=1))]
    result = TaskScheduler(tasks, budget=100, trials_per_round=4).run()
    assert result.total_trials == 3


def test_patience_drops_a_task_that_stopped_improving():
    flat = Task("flat", lambda n: [MeasureResult(Config(i=k), (1.0,)) for k in range(n)])
    result = TaskScheduler([flat, Task("other", Curve(1.0))], budget=80, trials_per_round=4,
                           patience=8).run()
    assert result.trials["flat"] <= 12
    assert result.trials["other"] >= 68


def test_custom_objective_focuses_on_the_slowest_task():
    tasks = [Task("slow", Curve(10.0)), Task("fast", Curve(1.0))]
    result = TaskScheduler(tasks, budget=40, trials_per_round=4,
                           objective=lambda lat: max(lat)).run()
    assert result.trials["slow"] >= 32


def test_failed_candidates_count_as_trials_but_not_as_best():
    def broken(n):
        return [MeasureResult.failed(Config(i=k), ErrorKind.COMPILE_ERROR, "no") for k in range(n)]
    result = TaskScheduler([Task("broken", broken), Task("ok", Curve(1.0))], budget=16,
                           policy="round-robin", trials_per_round=4).run()
    assert math.isinf(result.best["broken"]) and result.best_results["broken"] is None
    assert result.trials["broken"] == 8 and result.best["ok"] < 2.0


def test_group_bound_uses_the_best_throughput_of_similar_tasks():
    a = Task("mm-a", Curve(1.0), flops=1e9, group="matmul")
    b = Task("mm-b", Curve(1.0), flops=1e6, group="matmul")
    s = TaskScheduler([a, b], budget=24, trials_per_round=4, policy="round-robin")
    s.run()
    # b does 1000x less work than a in the same time: at a's throughput it would take almost
    # nothing, so its expected gain is almost its whole latency, a's only a third of it
    assert s.gradient(1) == pytest.approx(-0.8 * s.best_costs[1], rel=0.01)
    assert s.gradient(0) == pytest.approx(-0.8 * s.best_costs[0] / 3, rel=0.01)


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="at least one task"):
        TaskScheduler([])
    with pytest.raises(ValueError, match="unique"):
        TaskScheduler([Task("a", Curve(1)), Task("a", Curve(1))])
    with pytest.raises(ValueError, match="unknown task scheduling policy"):
        TaskScheduler([Task("a", Curve(1))], policy="greedy")
    with pytest.raises(ValueError, match="weight"):
        Task("a", Curve(1), weight=0)


def test_tuner_task_resumes_the_search_and_records_every_trial(tmp_path):
    db = Database(tmp_path / "t.db")
    space = Space({"n": [1, 10, 100, 1000, 10000, 100000]})
    timer = Timer(warmup_seconds=0, min_repeats=2, budget_seconds=0)

    def tuner(name):
        return Tuner(space, CallableRunner(lambda n: sum(range(n)), timer), workload=Workload.make(name),
                     target=Target.make("cpu", "test"), db=db, strategy="random", seed=0, progress=False)

    tasks = [Task("a", TunerTask(tuner("a"))), Task("b", TunerTask(tuner("b")), weight=3.0)]
    result = TaskScheduler(tasks, budget=12, trials_per_round=2).run()
    assert result.total_trials == 12 and result.trials["a"] + result.trials["b"] == 12
    for name in ("a", "b"):
        records = db.records(Workload.make(name), Target.make("cpu", "test"))
        configs = [r.config for r in records]
        assert len(configs) == result.trials[name] == len(set(configs))  # no candidate measured twice


def test_a_stalled_task_does_not_live_on_the_throughput_of_its_group():
    # a shape with little work a program (a convolution over 3 channels) stays far below
    # its group's best throughput however long it is searched: after its search stalls,
    # the rounds go to the tasks that still improve
    stem = Task("stem", lambda n: [MeasureResult(Config(i=k), (3.0,)) for k in range(n)], flops=1e6, group="conv")
    wide = [Task(f"wide{k}", Curve(1.0, decay=2.0), flops=1e9, group="conv", weight=3.0) for k in range(3)]
    result = TaskScheduler([stem, *wide], budget=160, trials_per_round=4).run()
    assert result.trials["stem"] <= 40  # 136 of 160 while the group's throughput kept it first
    assert min(result.trials[f"wide{k}"] for k in range(3)) >= 32


def test_a_task_with_no_result_yet_does_not_blind_the_others_gradients():
    def broken(n):
        return [MeasureResult.failed(Config(i=k), ErrorKind.COMPILE_ERROR, "no") for k in range(n)]
    tasks = [Task("broken", broken), Task("light", Curve(1e-5), weight=1.0), Task("heavy", Curve(1e-5), weight=20.0)]
    s = TaskScheduler(tasks, budget=24, trials_per_round=4, policy="round-robin")
    s.run()
    assert s.gradient(2) == pytest.approx(20 * s.gradient(1) * s.best_costs[2] / s.best_costs[1], rel=0.05)
    assert s.gradient(2) < 0


def test_concurrent_rounds_fill_the_executor_and_never_exceed_the_tasks():
    assert concurrent_rounds(parallelism=40, trials_per_round=8, tasks=3) == 3
    assert concurrent_rounds(parallelism=16, trials_per_round=8, tasks=3) == 2
    assert concurrent_rounds(parallelism=4, trials_per_round=8, tasks=3) == 1


def test_rounds_of_several_tasks_run_at_once_and_share_the_budget():
    """With concurrency 2, the two tasks' rounds tune at the same time: each round waits
    at a barrier that only both together pass (one at a time would break it)."""
    import threading

    together = threading.Barrier(2, timeout=30)
    calls = []

    def curve(name, scale):
        state = {"n": 0}

        def tune(n):
            together.wait()
            calls.append((name, n))
            out = [MeasureResult(Config(i=state["n"] + k), (scale / (state["n"] + k + 1),)) for k in range(n)]
            state["n"] += n
            return out
        return tune

    tasks = [Task("a", curve("a", 1.0)), Task("b", curve("b", 2.0))]
    result = TaskScheduler(tasks, budget=24, trials_per_round=4, concurrency=2, policy="round-robin").run()
    assert result.total_trials == 24 and result.trials == {"a": 12, "b": 12}
    assert sorted(calls) == [("a", 4)] * 3 + [("b", 4)] * 3 and len(result.rounds) == 6
    first_a, first_b = (next(r for r in result.rounds if r.task == t) for t in "ab")
    assert first_a.started < first_b.started + first_b.seconds and first_b.started < first_a.started + first_a.seconds


def test_a_slow_round_does_not_hold_back_the_other_tasks_rounds():
    """Rounds start as others end: while one task's first round is still running, the
    other task gets round after round (a scheduler that waited for both would hang here)."""
    import threading

    fast_rounds = threading.Semaphore(0)
    order = []

    def slow(n):
        if "slow" not in order:  # its first round ends only once the fast task has had three
            for _ in range(3):
                assert fast_rounds.acquire(timeout=30)
        order.append("slow")
        return [MeasureResult(Config(i=k), (1.0,)) for k in range(n)]

    def fast(n):
        order.append("fast")
        fast_rounds.release()
        return [MeasureResult(Config(i=len(order) * 10 + k), (0.5,)) for k in range(n)]

    tasks = [Task("slow", slow), Task("fast", fast)]
    result = TaskScheduler(tasks, budget=20, trials_per_round=4, concurrency=2, policy="round-robin").run()
    assert order.index("slow") >= 3 and result.total_trials == 20


def test_rounds_at_once_never_take_more_than_the_trials_left():
    seen = []

    def tune(n):
        seen.append(n)
        return [MeasureResult(Config(i=len(seen) * 10 + k), (1.0,)) for k in range(n)]

    tasks = [Task(str(k), tune) for k in range(3)]
    result = TaskScheduler(tasks, budget=2, trials_per_round=4, concurrency=3).run()
    assert result.total_trials == 2 and seen == [1, 1]
    with pytest.raises(ValueError, match="concurrency must be at least 1"):
        TaskScheduler(tasks, concurrency=0)
