"""Peer tuners (Kernel Tuner's strategies, Optuna's TPE) replayed on the same spaces as ours."""

import json
import os

import pytest
from click.testing import CliRunner

from tensortune.bench.peers import check_peer, peer_run
from tensortune.cli.main import cli
from tensortune.datasets import load_kernel_tuner_cache

pytest.importorskip("kernel_tuner", reason="the peers extra (kernel-tuner) is part of the test extra")
pytest.importorskip("optuna", reason="the peers extra (optuna) is part of the test extra")

PEERS = ["kt:random_sample", "kt:genetic_algorithm", "kt:simulated_annealing", "kt:pso", "optuna:tpe"]


def _write_space(path):
    """4 x 3 product; the cache holds 10 of its 12 points, two of them failures."""
    cache = {}
    for a in (1, 2, 4, 8):
        for b in (1, 2, 3):
            if (a, b) in ((8, 3), (1, 3)):
                continue  # outside the space
            rec = {"a": a, "b": b, "time": 1.0 + abs(a - 4) + abs(b - 2) * 0.5, "compile_time": 100.0,
                   "benchmark_time": 10.0}
            if (a, b) in ((2, 2), (8, 1)):
                rec["time"] = "RuntimeFailedConfig"
            cache[f"{a},{b}"] = rec
    data = {"device_name": "Fake GPU", "kernel_name": "k", "objective": "time", "tune_params_keys": ["a", "b"],
            "tune_params": {"a": [1, 2, 4, 8], "b": [1, 2, 3]}, "cache": cache}
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.parametrize("peer", PEERS)
def test_peer_respects_the_budget_and_the_space_and_is_reproducible(tmp_path, peer):
    path = _write_space(tmp_path / "small.json")
    ds = load_kernel_tuner_cache(path)
    run = peer_run(path, peer, budget=6, seed=3)
    assert run.strategy == peer and run.budget == 6
    assert run.trials <= 6 and run.trials >= 1
    assert 0 < run.score <= 1
    again = peer_run(path, peer, budget=6, seed=3)
    assert (again.score, again.trials, again.failures) == (run.score, run.trials, run.failures)
    # a budget above the space's size measures at most the 10 configurations it holds
    everything = peer_run(path, peer, budget=50, seed=0)
    assert everything.trials <= ds.space.size == 10


def test_random_sample_spends_the_whole_budget_on_distinct_configurations(tmp_path):
    path = _write_space(tmp_path / "small.json")
    run = peer_run(path, "kt:random_sample", budget=10, seed=0)
    # every configuration of the space measured once: the optimum is found, both failures counted
    assert (run.trials, run.failures, run.score) == (10, 2, 1.0)
    assert run.simulated_seconds == pytest.approx(10 * 0.11)


def test_peer_on_a_real_constrained_space(shared_datasets):
    path = os.path.join(shared_datasets, "kernel_tuner", "convolution_milo-A100.json.gz")
    for peer in ("kt:genetic_algorithm", "optuna:tpe"):
        run = peer_run(path, peer, budget=30, seed=1)
        assert run.trials == 30  # distinct configurations, all inside the constrained space
        assert 0.3 < run.score <= 1


def test_unknown_peers_are_named():
    with pytest.raises(ValueError, match="unknown Kernel Tuner strategy 'nope'.*genetic_algorithm"):
        check_peer("kt:nope")
    with pytest.raises(ValueError, match="unknown Optuna sampler 'cmaes'"):
        check_peer("optuna:cmaes")


def test_bench_strategies_runs_peers_side_by_side(tmp_path):
    path = _write_space(tmp_path / "small.json")
    out = tmp_path / "r.json"
    res = CliRunner().invoke(cli, ["bench", "strategies", "--dataset", path, "--budgets", "4,8", "--repeats", "3",
                                   "--strategies", "auto,kt:pso,optuna:tpe", "--jobs", "1", "--output", str(out)])
    assert res.exit_code == 0, res.output
    summary = json.loads(out.read_text())["datasets"]["small"]
    assert set(summary) == {"auto", "kt:pso", "optuna:tpe", "random"}
    assert summary["kt:pso"]["8"]["runs"] == 3
    bad = CliRunner().invoke(cli, ["bench", "strategies", "--dataset", path, "--strategies", "kt:nope"])
    assert bad.exit_code != 0 and "unknown Kernel Tuner strategy" in bad.output


def test_worker_processes_share_one_plain_copy_of_a_cache_in_the_users_own_folder(tmp_path, monkeypatch):
    import hashlib

    from tensortune.bench.peers import _plain_cache

    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # spawned workers inherit it
    path = _write_space(tmp_path / "small.json")
    res = CliRunner().invoke(cli, ["bench", "strategies", "--dataset", path, "--budgets", "4", "--repeats", "4",
                                   "--strategies", "kt:random_sample", "--jobs", "2"])
    assert res.exit_code == 0, res.output
    # two worker processes, eight peer runs: one copy, no partial files left behind
    folder = tmp_path / "home" / ".cache" / "tensortune" / "peers"
    (copy,) = folder.iterdir()
    assert copy.suffix == ".json" and folder.stat().st_mode & 0o077 == 0
    # a file planted under the copy's name is not trusted: its content must match the name
    copy.write_text('{"cache": {}, "planted": true}')
    _plain_cache.cache_clear()
    assert _plain_cache(path)[0] == str(copy) and "planted" not in copy.read_text()
    assert hashlib.sha256(copy.read_bytes()).hexdigest().startswith(copy.stem)
