"""Tuning a new shape starts from a cost model pre-trained on the database's other shapes."""

import numpy as np
import pytest

from tensortune.db import Database, Target, Workload
from tensortune.measure import MeasureResult
from tensortune.model import FeatureExtractor, XGBParams, XGBRankModel
from tensortune.model.pretrain import transfer_model
from tensortune.space import Space
from tensortune.tuner import Tuner

SPACE = Space({"x": list(range(64)), "y": list(range(8))})
TARGET = Target.make("cpu", "test")


class Bowl:
    """A fake runner whose optimum (x=40, y=3) does not move with the shape N."""

    def __init__(self, n: int) -> None:
        self.n = n

    def run(self, builds):
        for b in builds:
            c = b.config
            yield MeasureResult(c, (1.0 + (c["x"] - 40) ** 2 + 4 * (c["y"] - 3) ** 2 + 0.01 * self.n,))


def _tune(db, n, budget, seed, transfer=True, strategy="auto"):
    tuner = Tuner(SPACE, Bowl(n), workload=Workload.make("bowl", "src", {"N": n}), target=TARGET, db=db,
                  strategy=strategy, budget=budget, seed=seed, progress=False, transfer=transfer)
    return tuner, tuner.run()


def test_a_new_shape_starts_from_what_other_shapes_taught():
    hits = {True: 0, False: 0}
    for seed in range(4):
        for transfer in (True, False):
            db = Database(":memory:")
            _tune(db, 1, 120, seed=seed)
            tuner, result = _tune(db, 2, 6, seed, transfer)
            assert result.trials == 6
            assert (tuner.transferred_from >= 100) == transfer
            hits[transfer] += result.best_time <= 1.0 + 1 + 0.02 + 1e-9  # the optimum or a neighbour
    assert hits[True] >= 3
    assert hits[False] <= 1


def test_a_prior_from_other_devices_only_keeps_half_the_random_start():
    db = Database(":memory:")
    _tune(db, 1, 60, seed=0)  # shape 1 on this device
    same_device, _ = _tune(db, 2, 20, seed=0)
    assert same_device.transferred_from > 0 and same_device.strategy.inner.random_start == 0
    other_device = Tuner(SPACE, Bowl(1), workload=Workload.make("bowl", "src", {"N": 1}),
                         target=Target.make("cpu", "another"), db=Database(":memory:"), budget=20, seed=0,
                         progress=False)
    other_device.db.import_records(db.records(Workload.make("bowl", "src", {"N": 1})))
    result = other_device.run()
    inner = other_device.strategy.inner
    assert other_device.transferred_from == 60 and inner.random_start == inner.initial // 2 > 0
    assert result.trials == 20
    cold = Tuner(SPACE, Bowl(1), workload=Workload.make("bowl", "src", {"N": 1}), target=TARGET, budget=20,
                 seed=0, progress=False)
    cold.run()
    assert cold.strategy.inner.random_start == cold.strategy.inner.initial
    # the first measurements of the other device's run are its random start, the same
    # points a cold run of that seed starts with
    start = inner.random_start
    assert [r.config for r in result.history[:start]] == [r.config for r in cold.strategy.inner.history[:start]]


def test_strategies_without_a_model_ignore_the_prior():
    db = Database(":memory:")
    _tune(db, 1, 40, seed=0, strategy="random")
    tuner, result = _tune(db, 2, 5, seed=0, strategy="random")
    assert tuner.transferred_from == 0 and result.trials == 5


def test_transfer_model_leaves_out_this_workload_on_this_target():
    db = Database(":memory:")
    w = Workload.make("bowl", "src", {"N": 1})
    for x in range(10):
        db.add(w, TARGET, MeasureResult(SPACE.to_config((x, 0)), (1.0 + x,)))
    fx = FeatureExtractor(SPACE, w.key)
    assert transfer_model(db, fx, w, TARGET) is None  # only its own records: nothing to transfer
    other = Target.make("cpu", "another")
    model = transfer_model(db, fx, w, other)  # the same shape measured on another device
    assert model is not None and model.trained_rows == 10
    assert transfer_model(db, fx, Workload.make("other-kernel", "src", {"N": 1}), TARGET) is None


def test_regression_objective_ranks_and_unknown_objectives_are_refused():
    rng = np.random.default_rng(0)
    X = rng.random((200, 3))
    times = 1.0 + X[:, 0] + 0.1 * X[:, 1]
    m = XGBRankModel(XGBParams(objective="regression"), seed=0)
    m.fit(X[:100], times[:100])
    assert np.corrcoef(m.predict(X[100:]), -times[100:])[0, 1] > 0.8
    with pytest.raises(ValueError, match="unknown cost-model objective 'huber'"):
        XGBParams(objective="huber")


def test_no_model_is_fitted_for_a_strategy_that_would_not_take_it(monkeypatch):
    import tensortune.model.pretrain as pretrain

    db = Database(":memory:")
    _tune(db, 1, 40, seed=0)
    calls = []
    monkeypatch.setattr(pretrain, "transfer_model", lambda *a, **k: calls.append(a))
    tuner, _ = _tune(db, 2, 5, seed=0, strategy="random")
    assert calls == [] and tuner.transferred_from == 0


def test_auto_from_100_measurements_takes_only_a_prior_learned_on_this_device():
    db = Database(":memory:")
    _tune(db, 1, 60, seed=0)
    same_device, result = _tune(db, 2, 100, seed=0)
    assert same_device.transferred_from == 60
    assert type(same_device.strategy.inner).__name__ == "EvolutionarySearch"
    assert result.trials == 100
    other_device = Tuner(SPACE, Bowl(1), workload=Workload.make("bowl", "src", {"N": 1}),
                         target=Target.make("cpu", "another"), db=Database(":memory:"), budget=100, seed=0,
                         progress=False)
    other_device.db.import_records(db.records(Workload.make("bowl", "src", {"N": 1})))
    other_device.run()
    assert other_device.transferred_from == 0
    assert type(other_device.strategy.inner).__name__ == "ScreenedTPESearch"


def test_auto_declines_a_prior_its_options_do_not_fit():
    db = Database(":memory:")
    _tune(db, 1, 60, seed=0)
    # `keep` is screened_tpe's: swapping to evolutionary for the prior would drop it
    tuner = Tuner(SPACE, Bowl(2), workload=Workload.make("bowl", "src", {"N": 2}), target=TARGET, db=db,
                  strategy="auto", strategy_options={"keep": 0.3}, budget=100, seed=0, progress=False)
    result = tuner.run()
    assert result.trials == 100 and tuner.transferred_from == 0
    assert type(tuner.strategy.inner).__name__ == "ScreenedTPESearch" and tuner.strategy.inner.keep == 0.3
