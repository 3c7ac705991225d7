"""Reading Kernel Tuner caches into replayable spaces."""

import gzip
import json
import math
import os

import pytest

from tensortune.datasets import find_datasets, load_kernel_tuner_cache
from tensortune.measure import BuildResult, ErrorKind
from tensortune.space import Config


def _write_cache(path, gz=False):
    cache = {
        "1,1": {"block": 1, "tile": 1, "time": 4.0, "times": [4.1, 3.9], "compile_time": 500.0,
                "benchmark_time": 100.0},
        "2,1": {"block": 2, "tile": 1, "time": 2.0, "compile_time": 400.0, "benchmark_time": 50.0},
        "2,2": {"block": 2, "tile": 2, "time": "CompilationFailedConfig", "compile_time": 300.0},
        "4,1": {"block": 4, "tile": 1, "time": "RuntimeFailedConfig"},
        "4,2": {"block": 4, "tile": 2, "time": "InvalidConfig"},
    }
    data = {"device_name": "Fake GPU", "kernel_name": "k", "objective": "time",
            "tune_params_keys": ["block", "tile"], "tune_params": {"block": [1, 2, 4], "tile": [1, 2]},
            "cache": cache}
    opener = gzip.open if gz else open
    with opener(path, "wt") as f:
        json.dump(data, f)
    return path


@pytest.mark.parametrize("gz", [False, True])
def test_small_cache_round_trip(tmp_path, gz):
    path = _write_cache(tmp_path / ("c.json.gz" if gz else "c.json"), gz)
    ds = load_kernel_tuner_cache(path)
    assert ds.name == "c" and ds.device == "Fake GPU"
    # the space is the product restricted to the cache's keys: (1, 2) is not measured
    assert ds.space.cartesian_size == 6 and ds.space.size == 5
    assert not ds.space.is_valid({"block": 1, "tile": 2})
    assert ds.optimum == pytest.approx(2e-3)
    assert ds.best_config == Config(block=2, tile=1)
    assert ds.failures == 3
    kinds = {c: r.error for c, r in ds.results.items()}
    assert kinds[Config(block=2, tile=2)] is ErrorKind.COMPILE_ERROR
    assert kinds[Config(block=4, tile=1)] is ErrorKind.RUNTIME_ERROR
    assert kinds[Config(block=4, tile=2)] is ErrorKind.INVALID
    assert ds.results[Config(block=1, tile=1)].extra["runs_ms"] == [4.1, 3.9]


def test_replay_runner_answers_and_accounts_time(tmp_path):
    ds = load_kernel_tuner_cache(_write_cache(tmp_path / "c.json"))
    runner = ds.runner()
    configs = [Config(block=1, tile=1), Config(block=2, tile=2), Config(block=1, tile=2)]
    results = list(runner.run([BuildResult(c) for c in configs]))
    assert results[0].ok and results[0].time == pytest.approx(4e-3)
    assert results[1].error is ErrorKind.COMPILE_ERROR and math.isinf(results[1].time)
    assert results[2].error is ErrorKind.INVALID  # not in the measured space
    # compile + benchmark of the first (0.5 + 0.1 s) and the compile of the failed one (0.3 s)
    assert runner.simulated_seconds == pytest.approx(0.9)
    assert runner.measured == 3
    failed_build = BuildResult(Config(block=2, tile=1), error=ErrorKind.TIMEOUT, message="slow")
    assert next(iter(runner.run([failed_build]))).error is ErrorKind.TIMEOUT


def test_scores(tmp_path):
    ds = load_kernel_tuner_cache(_write_cache(tmp_path / "c.json"))
    assert ds.score(2e-3) == 1.0
    assert ds.score(4e-3) == 0.5
    assert ds.score(math.inf) == 0.0


@pytest.mark.parametrize("content, message", [
    ("not json", "not a readable Kernel Tuner cache"),
    ('{"cache": {}}', "needs 'tune_params' and 'cache'"),
    ('{"tune_params": {"a": [1]}, "cache": {}}', "cache is empty"),
    ('{"tune_params": {"a": [1]}, "cache": {"1,2": {"time": 1.0}}}', "has 2 values for 1 parameters"),
    ('{"tune_params": {"a": [1]}, "cache": {"3": {"time": 1.0}}}', "outside tune_params"),
])
def test_bad_files_say_what_is_wrong(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        load_kernel_tuner_cache(path)


def test_real_dataset(shared_datasets):
    folder = os.path.join(shared_datasets, "kernel_tuner")
    paths = find_datasets(folder)
    assert len(paths) >= 6 and not any(p.name.startswith("T1_") for p in paths)
    ds = load_kernel_tuner_cache(os.path.join(folder, "pnpoly-RTX_3090.json.gz"))
    assert ds.space.size == len(ds.results) == 4092
    assert ds.failures == 318
    assert all(ds.space.is_valid(c) for c in list(ds.results)[:50])
    result = next(iter(ds.runner().run_configs([ds.best_config])))
    assert result.time == ds.optimum and ds.score(result.time) == 1.0


def test_cache_of_a_sparse_huge_product_is_an_exact_space_that_strategies_search(tmp_path):
    """Like hotspot's caches: the measured configurations are a sliver of the product of
    the parameters (here 5,000 of 7.3e8), so the space is walked row by row."""
    import numpy as np

    from tensortune.bench.replay import replay_run

    rng = np.random.default_rng(0)
    values = {f"p{i}": list(range(1, 31)) for i in range(6)}
    keys = {tuple(int(v) for v in rng.integers(1, 31, 6)) for _ in range(5000)}
    cache = {",".join(map(str, k)): {"time": 1.0 + sum((v - 9) ** 2 for v in k) / 100,
                                     "compile_time": 900.0, "benchmark_time": 50.0} for k in keys}
    path = tmp_path / "sparse.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"device_name": "Fake GPU", "tune_params_keys": list(values), "tune_params": values,
                   "cache": cache}, f)
    ds = load_kernel_tuner_cache(path)
    assert ds.space.cartesian_size == 30**6 and ds.space.size_is_exact and ds.space.size == len(keys)
    for strategy in ("random", "auto", "annealing", "genetic", "evolutionary", "model_based", "local", "bandit"):
        run = replay_run(path, strategy, 60, seed=1)
        assert run.trials == 60 and run.failures == 0 and 0 < run.score <= 1
    again = [replay_run(path, "auto", 60, seed=1).score for _ in range(2)]
    assert again[0] == again[1]
