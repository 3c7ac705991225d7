"""The XGBoost ranking cost model, its features, its metrics and pre-training."""

import itertools
import math
import os

import numpy as np
import pytest

from tensortune.db import Database, Target, Workload
from tensortune.measure import ErrorKind, MeasureResult
from tensortune.model import (BootstrapEnsemble, FeatureExtractor, RandomModel, XGBParams, XGBRankModel,
                              kendall_tau, relevance, top_k_error)
from tensortune.model.pretrain import pretrain_from_db
from tensortune.space import Config, Space


def _kendall_brute(x, y):
    conc = disc = tx = ty = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
        if dx == 0 and dy == 0:
            continue
        if dx == 0:
            tx += 1
        elif dy == 0:
            ty += 1
        elif dx == dy:
            conc += 1
        else:
            disc += 1
    return (conc - disc) / math.sqrt((conc + disc + tx) * (conc + disc + ty))


def test_kendall_tau_matches_the_definition_with_ties():
    rng = np.random.default_rng(0)
    for _ in range(5):
        x = rng.integers(0, 6, size=40).astype(float)
        y = x + rng.integers(-3, 4, size=40)
        assert kendall_tau(x, y) == pytest.approx(_kendall_brute(x, y))
    assert kendall_tau([1, 2, 3], [3, 2, 1]) == -1.0
    assert math.isnan(kendall_tau([1, 1], [1, 2]))


def test_top_k_error():
    times = [3.0, 1.0, 2.0, math.inf]
    assert top_k_error([4, 3, 2, 1], times, 1) == pytest.approx(200.0)
    assert top_k_error([4, 3, 2, 1], times, 2) == pytest.approx(0.0)
    assert top_k_error([0, 0, 0, 9], times, 1) == math.inf  # the model's pick failed


def test_relevance_puts_failures_last():
    assert relevance(np.array([2.0, 1.0, np.inf])).tolist() == [0.5, 1.0, 0.0]


def _space():
    return Space({"bx": [16, 32, 64, 128], "by": [1, 2, 4, 8], "order": ["ij", "ji"], "flag": [False, True]})


def _time(cfg):
    # fastest at 512 threads per block, "ji" is 20% slower; bx=128 with by=8 fails
    threads = cfg["bx"] * cfg["by"]
    if threads > 512:
        return math.inf
    return (1.0 + abs(math.log2(threads) - 9)) * (1.2 if cfg["order"] == "ji" else 1.0) * (1.05 if cfg["flag"] else 1)


def test_features_are_named_and_agree_by_name():
    space = _space()
    fx = FeatureExtractor(space, {"M": 1024, "dtype": "float16"})
    assert fx.names[:2] == ["bx", "log2.bx"] and "bx*by" in fx.names
    assert fx.names[-2:] == ["workload.M", "workload.dtype"]
    configs = list(space)
    X = fx.configs(configs)
    assert X.shape == (len(configs), fx.width)
    assert np.array_equal(X, fx.foreign(configs, {"M": 1024, "dtype": "float16"}))
    # unknown names are missing values, not errors
    row = fx.foreign([{"bx": 32}])[0]
    assert row[0] == 32 and np.isnan(row[fx.names.index("by")])


def test_model_learns_a_ranking_and_avoids_failures():
    space = _space()
    fx = FeatureExtractor(space)
    configs = list(space)
    times = np.array([_time(c) for c in configs])
    rng = np.random.default_rng(0)
    train = rng.permutation(len(configs))[:40]
    model = XGBRankModel(seed=0, feature_names=fx.names)
    model.fit(fx.configs([configs[i] for i in train]), times[train])
    scores = model.predict(fx.configs(configs))
    ok = np.isfinite(times)
    assert kendall_tau(scores[ok], -times[ok]) > 0.6
    assert top_k_error(scores, times, 3) < 10
    assert scores[~ok].mean() < scores[ok].mean()


def test_model_needs_two_different_labels():
    model = XGBRankModel(seed=0)
    model.fit(np.zeros((1, 2)), np.array([1.0]))
    assert not model.fitted
    with pytest.raises(ValueError, match="group sizes"):
        model.fit(np.zeros((3, 2)), np.ones(3), groups=[1, 1])


def test_save_and_load_give_the_same_scores(tmp_path):
    rng = np.random.default_rng(1)
    X = rng.random((80, 3))
    times = 1 + X[:, 0] + 0.5 * X[:, 1]
    base = XGBRankModel(XGBParams(rounds=10), seed=3, feature_names=["a", "b", "c"])
    base.fit(X[:40], times[:40])
    model = XGBRankModel(seed=3, feature_names=["a", "b", "c"], base=base)
    model.fit(X[40:60], times[40:60])
    path = tmp_path / "model.json"
    model.save(path)
    loaded = XGBRankModel.load(path)
    assert np.allclose(loaded.predict(X), model.predict(X))
    assert loaded.base is not None and loaded.params == model.params
    (tmp_path / "junk.json").write_text("{}")
    with pytest.raises(ValueError, match="not a saved"):
        XGBRankModel.load(tmp_path / "junk.json")


def test_predict_matches_columns_by_name():
    rng = np.random.default_rng(2)
    X = rng.random((60, 2))
    model = XGBRankModel(seed=0, feature_names=["a", "b"])
    model.fit(X, 1 + X[:, 0])
    swapped = model.predict(X[:, ::-1], names=["b", "a"])
    assert np.allclose(swapped, model.predict(X))


def test_ensemble_members_differ_and_average():
    rng = np.random.default_rng(3)
    X = rng.random((50, 2))
    ens = BootstrapEnsemble(members=3, seed=0)
    ens.fit(X, 1 + X[:, 0] + 0.3 * rng.random(50))
    members = ens.predict_members(X)
    assert members.shape == (3, 50) and not np.allclose(members[0], members[1])
    assert np.allclose(ens.predict(X), members.mean(axis=0))
    assert RandomModel(0).predict(X).shape == (50,)


def test_pretraining_on_other_workloads_transfers():
    space = _space()
    db = Database(":memory:")
    target = Target.make("gpu", "fake")
    for m in (256, 512):
        for cfg in space:
            t = _time(cfg)
            res = MeasureResult(cfg, (t,)) if math.isfinite(t) else \
                MeasureResult.failed(cfg, ErrorKind.OUT_OF_RESOURCES, "too many threads")
            db.add(Workload.make("k", key={"M": m}), target, res)
    new = Workload.make("k", key={"M": 1024})
    fx = FeatureExtractor(space, new.key)
    model = pretrain_from_db(db, fx, name="k", exclude=new)
    assert model.fitted
    configs = list(space)
    times = np.array([_time(c) for c in configs])
    scores = model.predict(fx.configs(configs))
    ok = np.isfinite(times)
    assert kendall_tau(scores[ok], -times[ok]) > 0.7
    # a model with a base starts from it and lets new measurements take over
    fresh = XGBRankModel(seed=0, feature_names=fx.names, base=model)
    assert fresh.fitted and np.allclose(fresh.predict(fx.configs(configs)), scores)
    assert pretrain_from_db(db, fx, name="nothing").fitted is False


def test_model_quality_on_a_real_space(shared_datasets):
    from tensortune.bench.model_quality import evaluate_model

    q = evaluate_model(os.path.join(shared_datasets, "kernel_tuner", "pnpoly-RTX_3090.json.gz"),
                       train_fraction=0.1, splits=2)
    assert q.kendall_tau > 0.6
    assert q.top5_error_pct < 10
    assert q.train_rows == 409


def test_model_quality_takes_extra_features_of_the_configurations():
    from tensortune.bench.model_quality import evaluate_model
    from tensortune.bench.replay import cached_dataset

    path = os.path.join(os.path.dirname(__file__), "..", "docs", "benchmarks", "spaces",
                        "triton_matmul_256x8192x4096-H100.json.gz")
    recorded = {c: r.time for c, r in cached_dataset(path).results.items()}
    seen: list[int] = []

    def oracle(configs):  # the recorded time itself: a column that ranks the space perfectly, if coarsely learned
        seen.append(len(configs))
        return np.asarray([min(recorded[c], 1e3) for c in configs])

    plain = evaluate_model(path, splits=2)
    told = evaluate_model(path, splits=2, extra_features=oracle)
    assert seen == [len(recorded)]
    assert told.kendall_tau > plain.kendall_tau + 0.1
    assert told.top5_error_pct < plain.top5_error_pct


def test_a_strategy_starts_from_a_pretrained_model():
    from tensortune.search import create_strategy

    space = _space()
    db = Database(":memory:")
    for cfg in space:
        t = _time(cfg)
        if math.isfinite(t):
            db.add(Workload.make("k", key={"M": 256}), Target.make("gpu", "fake"), MeasureResult(cfg, (t,)))
    new = Workload.make("k", key={"M": 4096})
    base = pretrain_from_db(db, FeatureExtractor(space, new.key), name="k", exclude=new)
    strategy = create_strategy("evolutionary", space, seed=0, budget=20, base_model=base, workload_key=new.key)
    two = [Config(bx=16, by=1, order="ji", flag=True), Config(bx=16, by=2, order="ji", flag=True)]
    strategy.tell([MeasureResult(c, (_time(c),)) for c in two])
    strategy.refit()
    configs = [c for c in space if math.isfinite(_time(c))]
    scores = strategy.score([space.to_point(c) for c in configs])
    # two measurements teach little; the ranking comes from the pre-trained base
    assert kendall_tau(scores, [-_time(c) for c in configs]) > 0.6


def test_per_thread_features_when_the_space_has_num_warps():
    space = Space({"BLOCK_M": [64, 128], "BLOCK_N": [128, 256], "num_warps": [4, 8], "num_stages": [3, 4]})
    fx = FeatureExtractor(space)
    assert {"BLOCK_M/thread", "BLOCK_M*BLOCK_N/thread", "BLOCK_N*num_stages/thread"} <= set(fx.names)
    assert not any(n.startswith("num_warps") and n.endswith("/thread") for n in fx.names)
    config = {"BLOCK_M": 128, "BLOCK_N": 256, "num_warps": 8, "num_stages": 3}
    row = fx.configs([Config(config)])[0]
    assert row[fx.names.index("BLOCK_M*BLOCK_N/thread")] == 128 * 256 / (32 * 8)
    assert row[fx.names.index("BLOCK_M/thread")] == 128 / 256
    # a space without num_warps has none
    assert not any(n.endswith("/thread") for n in FeatureExtractor(Space({"a": [1, 2], "b": [3, 4]})).names)


def test_per_thread_features_agree_by_name():
    space = Space({"BLOCK": [32, 64, 128], "num_warps": [1, 2, 4]})
    fx = FeatureExtractor(space)
    configs = [{"BLOCK": b, "num_warps": w} for b in (32, 64, 128) for w in (1, 2, 4)]
    points = [(i, j) for i in range(3) for j in range(3)]
    assert np.array_equal(fx.points(points), fx.foreign(configs))


def test_alignment_and_power_of_two_features_separate_96_from_32_and_128():
    space = Space({"bx": [16, 32, 48, 96, 128], "by": [1, 2, 4]})
    fx = FeatureExtractor(space)
    assert {"align.bx", "pow2.bx"} <= set(fx.names)
    assert "align.by" not in fx.names and "pow2.by" not in fx.names  # by: powers of two only
    configs = [{"bx": b, "by": 1} for b in (16, 32, 48, 96, 128)]
    rows = fx.foreign(configs)
    assert rows[:, fx.names.index("align.bx")].tolist() == [4, 5, 4, 5, 7]  # 96 aligns like 32 ...
    assert rows[:, fx.names.index("pow2.bx")].tolist() == [1, 1, 0, 0, 1]  # ... but is no power of two
    assert np.array_equal(fx.points([(i, 0) for i in range(5)]), rows)


def test_the_optimum_rank_script_holds_the_optimum_out(shared_datasets, tmp_path):
    import json
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = tmp_path / "ranks.json"
    subprocess.run([sys.executable, os.path.join(root, "benchmarks", "model_optimum_rank.py"), "--dataset",
                    os.path.join(shared_datasets, "kernel_tuner", "pnpoly-RTX_3090.json.gz"), "--fractions",
                    "0.2,0.9", "--splits", "2", "--json", str(out)], check=True, capture_output=True, timeout=300)
    results = json.loads(out.read_text())["results"]
    for by_fraction in results.values():
        low, high = by_fraction["0.2"], by_fraction["0.9"]
        assert len(low["ranks"]) == 2 and all(1 <= r <= low["held_out"] for r in low["ranks"])
        assert high["held_out"] < low["held_out"]
