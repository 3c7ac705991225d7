"""`tensortune bench strategies|model` on one real space, at tiny budgets."""

import json
import os

import pytest
from click.testing import CliRunner

from tensortune.bench.replay import mean_over_datasets, run_many, summarize
from tensortune.cli.main import cli


@pytest.fixture
def pnpoly(shared_datasets):
    return os.path.join(shared_datasets, "kernel_tuner", "pnpoly-RTX_3090.json.gz")


def test_bench_strategies_writes_nested_json_and_a_plot(pnpoly, tmp_path):
    out = tmp_path / "s.json"
    result = CliRunner().invoke(cli, ["bench", "strategies", "--dataset", pnpoly, "--budgets", "5,12",
                                      "--repeats", "2", "--first-seed", "3", "--strategies", "local=1", "--jobs", "1",
                                      "--output", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    per = data["datasets"]["pnpoly-RTX_3090"]
    assert set(per) == {"local", "random"}  # random is always the baseline
    assert set(per["random"]) == {"5", "12"} and per["random"]["5"]["runs"] == 2
    assert per["local"]["12"]["runs"] == 1 and data["first_seed"] == 3
    assert 0 < per["random"]["12"]["p10"] <= per["random"]["12"]["mean"] <= 1
    assert per["local"]["12"]["se"] == 0.0 and per["random"]["12"]["se"] >= 0
    assert data["mean"]["random"]["12"] == per["random"]["12"]["mean"]
    assert (tmp_path / "s.png").stat().st_size > 0
    assert "mean over" in result.output


def test_bench_strategies_rejects_bad_input(pnpoly, tmp_path):
    runner = CliRunner()
    bad = runner.invoke(cli, ["bench", "strategies", "--dataset", pnpoly, "--strategies", "telepathy"])
    assert bad.exit_code != 0 and "unknown strategy" in bad.output
    bad = runner.invoke(cli, ["bench", "strategies", "--dataset", pnpoly, "--budgets", "0,x"])
    assert bad.exit_code != 0 and "budgets" in bad.output
    bad = runner.invoke(cli, ["bench", "strategies", "--dataset", str(tmp_path / "missing.json")])
    assert bad.exit_code != 0 and "no such file" in bad.output
    bad = runner.invoke(cli, ["bench", "strategies", "--dataset", pnpoly, "--repeats", "0"])
    assert bad.exit_code == 2 and "--repeats" in bad.output
    for item in ("tpe=x", "tpe=0", "tpe=-1"):
        bad = runner.invoke(cli, ["bench", "strategies", "--dataset", pnpoly, "--strategies", item])
        assert bad.exit_code == 2 and item in bad.output and "at least 1" in bad.output, bad.output


@pytest.mark.parametrize("command", ["strategies", "model"])
def test_a_file_that_is_not_a_kernel_tuner_cache_is_a_usage_error(tmp_path, command):
    not_json, not_cache = tmp_path / "notes.json", tmp_path / "results.json"
    not_json.write_text("not json at all")
    not_cache.write_text(json.dumps({"mean": {"auto": 0.9}}))
    for path, words in ((not_json, "not a readable Kernel Tuner cache"), (not_cache, "needs 'tune_params'")):
        bad = CliRunner().invoke(cli, ["bench", command, "--dataset", str(path)])
        assert bad.exit_code == 2 and words in bad.output and path.name in bad.output, bad.output


def test_bench_model_reports_rank_quality(pnpoly, tmp_path):
    out = tmp_path / "m.json"
    result = CliRunner().invoke(cli, ["bench", "model", "--dataset", pnpoly, "--splits", "1",
                                      "--output", str(out)])
    assert result.exit_code == 0, result.output
    quality = json.loads(out.read_text())["pnpoly-RTX_3090"]
    assert set(quality) >= {"kendall_tau", "top1_error_pct", "top5_error_pct"}
    assert quality["kendall_tau"] > 0.5
    regression = CliRunner().invoke(cli, ["bench", "model", "--dataset", pnpoly, "--splits", "1",
                                          "--objective", "regression", "--json"])
    assert regression.exit_code == 0, regression.output
    assert "pnpoly-RTX_3090" in regression.output
    assert json.loads(regression.output)["pnpoly-RTX_3090"]["kendall_tau"] != quality["kendall_tau"]
    deeper = CliRunner().invoke(cli, ["bench", "model", "--dataset", pnpoly, "--splits", "1",
                                      "--max-depth", "7"])
    assert deeper.exit_code == 0 and "depth 7" in deeper.output, deeper.output
    bad = CliRunner().invoke(cli, ["bench", "model", "--dataset", pnpoly, "--max-depth", "0"])
    assert bad.exit_code != 0 and "max-depth" in bad.output


def test_parallel_runs_equal_serial_runs(pnpoly):
    serial = run_many([pnpoly], ["evolutionary"], [15], 2, jobs=1)
    parallel = run_many([pnpoly], ["evolutionary"], [15], 2, jobs=2)
    key = lambda r: r.seed  # noqa: E731
    assert [r.score for r in sorted(serial, key=key)] == [r.score for r in sorted(parallel, key=key)]
    summary = summarize(serial)
    assert 0 < mean_over_datasets(summary)["evolutionary"]["15"] <= 1
    scores = [r.score for r in serial]
    se = abs(scores[0] - scores[1]) / 2  # the standard error of the mean of two runs
    assert summary["pnpoly-RTX_3090"]["evolutionary"]["15"]["se"] == pytest.approx(se, abs=1e-4)


H100_SPACE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "benchmarks",
                          "spaces", "triton_matmul_2048x2048x2048-H100.json.gz")


def test_first_seed_shifts_the_seeds_of_the_repeats():
    shifted = run_many([H100_SPACE], ["random"], [10], 2, first_seed=5)
    assert sorted(r.seed for r in shifted) == [5, 6]
    again = {r.seed: r.score for r in run_many([H100_SPACE], ["random"], [10], 7)}
    assert all(r.score == again[r.seed] for r in shifted)  # seed 5 is seed 5, wherever it starts


def test_a_split_whose_picks_all_failed_is_counted_apart_not_averaged_as_infinity():
    import math

    from tensortune.bench.model_quality import ModelQuality, _mean_of_ran

    assert _mean_of_ran([2.0, math.inf, 4.0]) == (3.0, 1)
    error, failed = _mean_of_ran([math.inf])
    assert math.isinf(error) and failed == 1
    row = ModelQuality("d", 0.1, 2, 0.7, error, 3.0, 0.01, 10, failed, 0).to_json()
    assert row["top1_error_pct"] is None and row["top1_failed_splits"] == 1
    json.dumps(row, allow_nan=False)  # standard JSON, no Infinity
