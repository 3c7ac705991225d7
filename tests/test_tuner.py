import math

import pytest

from tensortune.db import Database, Target, Workload
from tensortune.measure import BuildResult, ErrorKind, MeasureResult
from tensortune.space import Space
from tensortune.tuner import Budget, Tuner

W = Workload.make("fake", "src")
T = Target.make("cpu", "fake")


class FakeRunner:
    """Time is a known function of the config; some configs fail."""

    def __init__(self):
        self.calls = []

    def run(self, builds):
        for b in builds:
            self.calls.append(b.config)
            x, y = b.config["x"], b.config["y"]
            if (x + y) % 7 == 0:
                yield MeasureResult.failed(b.config, ErrorKind.RUNTIME_ERROR, "injected")
            else:
                yield MeasureResult(b.config, (1e-3 * (1 + (x - 5) ** 2 + (y - 3) ** 2),))


def space():
    return Space({"x": list(range(10)), "y": list(range(8))}, constraints=["x != y"])


@pytest.mark.parametrize("strategy", ["exhaustive", "random", "auto"])
def test_budget_is_respected_and_everything_recorded(strategy, tmp_path):
    db = Database(tmp_path / "t.db")
    runner = FakeRunner()
    r = Tuner(space(), runner, workload=W, target=T, db=db, strategy=strategy, budget=17, seed=1,
              batch_size=4, progress=False).run()
    assert r.trials == 17 == len(runner.calls) == len(set(runner.calls))
    assert len(db.records(W, T)) == 17
    assert r.best.time == min(x.time for x in r.history)
    assert r.failures == sum(1 for c in runner.calls if (c["x"] + c["y"]) % 7 == 0)


def test_exhaustive_finds_the_optimum_and_stops_at_space_size():
    runner = FakeRunner()
    r = Tuner(space(), runner, workload=W, target=T, strategy="exhaustive", budget=1000, progress=False).run()
    assert r.trials == space().size
    assert r.best_config == {"x": 5, "y": 3}
    assert math.isclose(r.best_time, 1e-3)


def test_resume_tells_the_strategy_and_measures_nothing_twice(tmp_path):
    db = Database(tmp_path / "t.db")
    first = FakeRunner()
    Tuner(space(), first, workload=W, target=T, db=db, strategy="random", budget=20, seed=0,
          progress=False).run()
    second = FakeRunner()
    r = Tuner(space(), second, workload=W, target=T, db=db, strategy="random", budget=20, seed=0,
              progress=False).run()
    assert r.reused == 20 and r.trials == 20
    assert set(first.calls).isdisjoint(second.calls)
    assert len(db.records(W, T)) == 40


def test_a_tuner_run_again_tells_its_strategy_each_record_once_and_a_changed_one_again(tmp_path):
    """Round after round (a task scheduler's), the strategy hears of every result once; a
    record whose standing changed in the store since (another worker's) is told again."""
    from tensortune.search import create_strategy

    db = Database(tmp_path / "t.db")
    inner = create_strategy("random", space(), seed=0)
    told = []
    tell = inner.tell
    inner.tell = lambda results: (told.extend(r.config for r in results), tell(results))
    tuner = Tuner(space(), FakeRunner(), workload=W, target=T, db=db, strategy=inner, budget=5, progress=False)
    for _ in range(3):
        tuner.budget = Budget(trials=5)
        tuner.run()
    assert len(told) == len(set(told)) == 15 and len(inner.history) == 15
    first = tuner.run().history[0].config  # (a run of 5 more; then another worker records the first again)
    db.add(W, T, MeasureResult(first, (1e-9,)), strategy="other")
    told.clear()
    tuner.budget = Budget(trials=1)
    tuner.run()
    assert told.count(first) == 1 and len(told) == 2  # the changed record, and the new result


def test_seeded_runs_are_reproducible():
    a, b = FakeRunner(), FakeRunner()
    Tuner(space(), a, workload=W, target=T, strategy="random", budget=10, seed=42, progress=False).run()
    Tuner(space(), b, workload=W, target=T, strategy="random", budget=10, seed=42, progress=False).run()
    assert a.calls == b.calls


def test_time_budget_stops_the_loop():
    class SlowClock(FakeRunner):
        def run(self, builds):
            import time
            for result in super().run(builds):
                time.sleep(0.02)
                yield result
    runner = SlowClock()
    r = Tuner(space(), runner, workload=W, target=T, strategy="exhaustive",
              budget=Budget(seconds=0.1), batch_size=1, progress=False).run()
    assert 1 <= r.trials < space().size


def test_budget_validation():
    with pytest.raises(ValueError, match="at least 1"):
        Budget(trials=0)
    with pytest.raises(ValueError, match="needs"):
        Budget()
    with pytest.raises(ValueError, match="seconds must be a number, got nan"):
        Budget.of(float("nan"))
    with pytest.raises(ValueError, match="trials must be a whole number, got 2.5"):
        Budget(trials=2.5)
    for wrong in ("10", True, [5]):
        with pytest.raises(ValueError, match="a budget is a number of trials"):
            Budget.of(wrong)
    with pytest.raises(ValueError, match=r"unknown budget key\(s\) \['trails'\]"):
        Budget.of({"trails": 5})
    assert Budget.of(5) == Budget(trials=5) and Budget.of(2.5) == Budget(seconds=2.5)


def test_callbacks_see_every_result():
    seen = []
    Tuner(space(), FakeRunner(), workload=W, target=T, strategy="random", budget=5, seed=0,
          progress=False, callbacks=[seen.append]).run()
    assert len(seen) == 5 and all(isinstance(s, MeasureResult) for s in seen)


def test_unknown_strategy_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown strategy 'nope'"):
        Tuner(space(), FakeRunner(), workload=W, target=T, strategy="nope")


def test_tune_callable_records_and_checks_reference(tmp_path):
    import numpy as np

    import tensortune as tt

    def compute(mode):
        x = np.arange(100.0)
        return x * 2 if mode != "bad" else x * 3

    r = tt.tune(compute, {"mode": ["a", "b", "bad"]}, budget=3, db=tmp_path / "c.db", progress=False,
                reference=lambda: np.arange(100.0) * 2)
    errors = {h.config["mode"]: h.error for h in r.history}
    assert errors == {"a": None, "b": None, "bad": ErrorKind.WRONG_RESULT}


def test_builder_failures_flow_through(tmp_path):
    class FailingBuilder:
        jobs = 2

        def build(self, configs):
            return [BuildResult(c, None, ErrorKind.COMPILE_ERROR, "nope") if c["x"] == 0 else BuildResult(c)
                    for c in configs]

    from tensortune.measure import CallableRunner, Timer
    runner = CallableRunner(lambda x, y: x + y, Timer(warmup_seconds=0, min_repeats=1, budget_seconds=0))
    r = Tuner(space(), runner, builder=FailingBuilder(), workload=W, target=T, strategy="exhaustive",
              budget=100, progress=False).run()
    assert sum(1 for h in r.history if h.error is ErrorKind.COMPILE_ERROR) == 7


class RejectingBuilder:
    """Rejects every config with x >= 6, as a compiler rejects a tile that does not fit."""

    jobs = 4

    def build(self, configs):
        return [BuildResult(c, None, ErrorKind.OUT_OF_RESOURCES, "too much shared memory") if c["x"] >= 6
                else BuildResult(c) for c in configs]


def _passthrough_runner():
    from tensortune.measure import CallableRunner, Timer

    return CallableRunner(lambda x, y: x + y, Timer(warmup_seconds=0, min_repeats=1, budget_seconds=0))


@pytest.mark.parametrize("free", [0, 5, 100])
def test_free_rejections_do_not_use_up_trials(free, tmp_path):
    db = Database(tmp_path / "r.db")
    r = Tuner(space(), _passthrough_runner(), builder=RejectingBuilder(), workload=W, target=T, db=db,
              strategy="random", budget={"trials": 20, "free_rejections": free}, seed=1, progress=False).run()
    rejected = [h for h in r.history if h.rejected_by_build]
    ran = [h for h in r.history if not h.rejected_by_build]
    assert all(h.error is ErrorKind.OUT_OF_RESOURCES and h.extra["stage"] == "build" for h in rejected)
    assert len(ran) + max(0, len(rejected) - free) == 20  # exactly the trials were charged
    if free == 0:
        assert len(r.history) == 20
    if free == 100:
        assert len(ran) == 20 and rejected  # all 20 measured, rejections on top
    # every rejection is in the database with its stage, as every result is
    stored = db.measured_configs(W, T)
    assert len(stored) == len(r.history)
    assert sum(1 for rec in stored.values() if rec.extra.get("stage") == "build") == len(rejected)


def test_runtime_failures_always_use_up_trials():
    r = Tuner(space(), FakeRunner(), workload=W, target=T, strategy="random",
              budget={"trials": 40, "free_rejections": 40}, seed=0, progress=False).run()
    assert len(r.history) == 40 and r.failures > 0 and not any(h.rejected_by_build for h in r.history)


def test_free_rejections_validation():
    with pytest.raises(ValueError, match="free_rejections"):
        Budget(trials=3, free_rejections=-1)


class _StreamingExecutor:
    """Measures one candidate at a time and asks for more after each result, in
    uneven amounts, like an executor whose slots free up at odd moments (`streams`)."""

    name = "streaming"
    streams = True

    def __init__(self) -> None:
        self.asks: list[int] = []

    def parallelism(self, builder, target=None):
        return 16

    def measure(self, builder, runner, configs, target=None, more=None):
        queue = list(configs)
        step = 0
        while queue:
            config = queue.pop(0)
            yield MeasureResult(config, (float(sum(config.values()) + 1),))
            step += 1
            if more is not None:
                self.asks.append(1 + step % 3)
                queue += more(1 + step % 3)

    def late_results(self, runner):
        return ()

    def close(self):
        pass


class _BatchExecutor(_StreamingExecutor):
    streams = False


def test_a_streaming_executor_measures_the_same_seeded_candidates_within_the_budget():
    """Asked for more as slots free up, in uneven amounts, the tuner still proposes what a
    batch-by-batch run proposes (a seeded search, the same candidates), records every
    result, and never exceeds the budget with candidates in flight."""
    space = Space({"a": list(range(8)), "b": list(range(5)), "c": list(range(6))})
    runs = {}
    for name, executor in (("batch", _BatchExecutor()), ("stream", _StreamingExecutor())):
        db = Database(":memory:")
        tuner = Tuner(space, runner=None, workload=Workload.make("f"), target=Target.make("cpu", "x"), db=db,
                      strategy="random", seed=3, budget=40, progress=False, executor=executor)
        result = tuner.run()
        assert result.trials == 40 and len(db.records(tuner.workload, tuner.target)) == 40
        runs[name] = [r.config for r in result.history]
    assert len(executor.asks) > 5  # the streaming run was asked for more many times
    assert set(runs["stream"]) == set(runs["batch"])
