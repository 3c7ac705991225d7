"""The replay benchmark scripts run end to end on a small measured space.

They take minutes at their published sizes, so nothing else runs them; these runs of a
few replays each catch a script that an API change has broken."""

import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOFTMAX = os.path.join(ROOT, "docs", "benchmarks", "spaces", "sketch_softmax-H100.json.gz")

SCRIPTS = {  # script -> (arguments, keys its JSON must have); DIR is a folder holding the softmax space
    "bandit.py": (["--datasets", "DIR", "--spaces", "--arm-sets", "screened_tpe+evolutionary", "--budgets", "20",
                   "--repeats", "2", "--jobs", "1"], {"group_means", "paired_with_auto", "datasets"}),
    "tpe_variants.py": (["--screened", "--budgets", "20", "--repeats", "2", "--jobs", "1", "--datasets", "DIR",
                         "--only", "softmax"], {"budgets", "datasets"}),
    "model_objective_search.py": (["--datasets", "DIR", "--budget", "20", "--repeats", "2", "--jobs", "1"],
                                  {"budget", "scores"}),
    "model_extra_features.py": (["--datasets", "DIR", "--splits", "2"], {"datasets", "model"}),
    "model_optimum_rank.py": (["--dataset", SOFTMAX, "--fractions", "0.1", "--splits", "2"],
                              {"neighbourhood", "results"}),
    "tune_overhead.py": (["--budgets", "12", "--seeds", "1"], {"machine", "results"}),
}


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_a_replay_benchmark_script_runs_and_writes_its_json(script, tmp_path):
    folder = tmp_path / "spaces"
    folder.mkdir()
    shutil.copy(SOFTMAX, folder)
    args, keys = SCRIPTS[script]
    out = tmp_path / "out.json"
    command = [sys.executable, os.path.join(ROOT, "benchmarks", script),
               *[str(folder) if a == "DIR" else a for a in args], "--json", str(out)]
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "src")}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    written = json.loads(out.read_text())
    assert keys <= set(written), sorted(written)


@pytest.mark.slow
def test_gpu_attention_benchmark_runs_on_the_cpu(tmp_path):
    """benchmarks/gpu_attention.py --quick: tiny shapes in Triton's interpreter, the same code
    paths as on the GPU (tuning, the unfused cut, torch SDPA, the checks, the JSON)."""
    out = tmp_path / "attention.json"
    command = [sys.executable, os.path.join(ROOT, "benchmarks", "gpu_attention.py"), "--quick",
               "--only", "gpt2", "--budget", "2", "--unfused-budget", "1", "--json", str(out)]
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "src"), "TENSORTUNE_PROGRESS": "0"}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert set(rows) == {"gpt2"}
    for row in rows.values():
        assert row["fused"]["pattern"] == "attention" and row["fused"]["error"] < 1e-2
        assert [k["pattern"] for k in row["unfused"]["kernels"]] == ["contraction", "rows", "contraction"]
        assert row["unfused"]["error"] < 1e-2 and row["tensortune_fused"]["us"] > 0
    assert "flash/fused" in done.stdout
