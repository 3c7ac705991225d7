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


@pytest.mark.slow
def test_cpu_kernels_benchmark_tunes_checks_and_times_its_contenders(tmp_path):
    """benchmarks/cpu_kernels.py --quick on two workloads (a transposed matmul of prime
    extents, whose tiles all leave tails, and a depthwise convolution): tuning, the rebuilt
    winner, the check that torch and numpy compute the same values, the interleaved
    rounds, the JSON."""
    out = tmp_path / "cpu_kernels.json"
    command = [sys.executable, os.path.join(ROOT, "benchmarks", "cpu_kernels.py"), "--quick", "--quiet",
               "--workloads", "llama_up,depthwise", "--db", str(tmp_path / "records.db"), "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "src"), "TENSORTUNE_PROGRESS": "0"}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    written = json.loads(out.read_text())
    assert set(written["time"]) == {"llama_up", "depthwise"} and written["time"]["llama_up"]["sketch"] in (
        "C:cache_write(pack)", "C:cache_write(panel)", "C:tile")
    for row in written["time"].values():
        assert set(row["gflops"]) == {"tensortune", "numpy", "torch"} and len(row["rounds_seconds"]["torch"]) == 2
    assert "| workload |" in done.stdout


@pytest.mark.slow
def test_cpu_kernels_compare_times_two_exports_of_recorded_winners(tmp_path):
    """benchmarks/cpu_kernels_compare.py --quick: winners exported from a records database
    (here the same one twice, as before and after) and timed with numpy and torch."""
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "src"), "TENSORTUNE_PROGRESS": "0"}
    bench = os.path.join(ROOT, "benchmarks")
    db = str(tmp_path / "records.db")

    def run(*argv):
        done = subprocess.run([sys.executable, *argv], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    run(os.path.join(bench, "cpu_kernels.py"), "--quick", "--quiet", "--phase", "tune", "--workloads", "llama_up",
        "--db", db, "--out", str(tmp_path / "tuned.json"))
    for side in ("before", "after"):
        run(os.path.join(bench, "cpu_kernels_compare.py"), "export", "--quick", "--db", db, "--workloads", "llama_up",
            "--out", str(tmp_path / f"{side}.json"))
    out = run(os.path.join(bench, "cpu_kernels_compare.py"), "compare", "--quick", "--rounds", "2", "--seconds", "0.02",
              str(tmp_path / "before.json"), str(tmp_path / "after.json"), "--out", str(tmp_path / "compare.json"))
    written = json.loads((tmp_path / "compare.json").read_text())["time"]
    assert set(written) == {"llama_up"} and set(written["llama_up"]["gflops"]) == {"after", "before", "numpy", "torch"}
    assert "| workload |" in out


UPSTREAM_LIKE = '''
import torch
import triton
import triton.language as tl
from somepackage.utils import helper_we_do_not_need

DEVICE = "cpu"
print("module-level code the benchmark must not run")


@triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=["n"])
@triton.jit
def double_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


def double(x):
    double_kernel[lambda m: (triton.cdiv(x.numel(), m["BLOCK"]),)](x, x.numel())
    return x


a = double(torch.ones(4))  # an upstream file's own demo: not taken
'''


def test_the_kernel_benchmark_takes_the_named_definitions_and_swaps_only_the_decorator(tmp_path, monkeypatch):
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import triton_kernels
    finally:
        sys.path.pop(0)
    text = triton_kernels.extract(UPSTREAM_LIKE, ["DEVICE", "double_kernel", "double"], tensortune=True)
    assert "@tensortune.autotune(configs=" in text and "triton.autotune" not in text
    assert "print(" not in text and "a = double" not in text and "except ImportError" in text
    with pytest.raises(ValueError, match="lacks"):
        triton_kernels.extract(UPSTREAM_LIKE, ["missing_kernel"], tensortune=False)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setitem(triton_kernels.SOURCES, "upstream_like.py", ("o/r", "c", "p.py", "MIT",
                                                                   ["DEVICE", "double_kernel", "double"]))
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "upstream_like.py").write_text(UPSTREAM_LIKE)
    pytest.importorskip("torch")
    monkeypatch.setattr(sys, "path", list(sys.path))  # load() puts the work folder on it
    module = triton_kernels.load(tmp_path / "src", tmp_path, "upstream_like.py", "tensortune")
    assert type(module.double_kernel).__name__ == "AutotunedKernel"
    sys.modules.pop(module.__name__, None)


@pytest.mark.slow
def test_gpu_kernels_benchmark_runs_on_the_cpu(tmp_path):
    """benchmarks/gpu_kernels.py --quick on one workload of each family: tuning on the shared
    worker, the check against torch on fresh inputs, the peers, the JSON and the table."""
    pytest.importorskip("triton")
    cases = "dw3x3-s2-relu6,attn-causal-fp16,tail-48x32x256"
    command = [sys.executable, os.path.join(ROOT, "benchmarks", "gpu_kernels.py"), "--quick", "--cases", cases,
               "--out", str(tmp_path), "--cache", str(tmp_path / "kernels")]
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "src"), "TENSORTUNE_PROGRESS": "0"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = json.loads((tmp_path / "gpu_kernels.json").read_text())["rows"]
    assert set(rows) == set(cases.split(","))
    assert [rows[c]["pattern"] for c in cases.split(",")] == ["grouped_conv", "attention", "contraction"]
    assert all(r["correct"] and {"eager", "flash", "cublas"} & set(r["us"]) for r in rows.values())
    assert "geometric mean" in done.stdout


def test_gpu_variants_measures_each_listed_configuration_on_the_cpu(tmp_path):
    """benchmarks/gpu_variants.py --quick: each case's first seeds measured (checked, timed) in
    Triton's interpreter, the fastest timed beside its peers, every configuration in the JSON."""
    pytest.importorskip("triton")
    command = [sys.executable, os.path.join(ROOT, "benchmarks", "gpu_variants.py"), "--quick", "--cases",
               "attn-causal-fp16,square-64", "--out", str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "src"), "TENSORTUNE_PROGRESS": "0"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    cases = json.loads((tmp_path / "gpu_variants.json").read_text())["cases"]
    assert set(cases) == {"attn-causal-fp16", "square-64"}
    for row in cases.values():
        assert row["correct"] and len(row["variants"]) == 3 and all(v["us"] for v in row["variants"])
        assert row["config"] in [v["config"] for v in row["variants"]]
    assert "SCORES_AHEAD=" in done.stdout


def test_gemv_benchmark_smoke_runs_in_the_interpreter(tmp_path):
    """benchmarks/gemv.py --smoke: each shape tuned (GEMV seeds first), checked against torch on
    fresh inputs and timed beside eager torch; the JSON rows and the table."""
    pytest.importorskip("triton")
    command = [sys.executable, os.path.join(ROOT, "benchmarks", "gemv.py"), "--smoke", "--shapes",
               "gate-silu*up,4rows+res", "--out", str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "src"), "TENSORTUNE_PROGRESS": "0"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = json.loads((tmp_path / "gemv.json").read_text())["rows"]
    assert set(rows) == {"gate-silu*up", "4rows+res"}
    for row in rows.values():
        assert row["correct"] and row["gemv_chosen"] and row["best_gemv"]["measured"] >= 1
        assert {"tensortune", "cublas"} <= set(row["us"]) and row["errors"]["cublas"] < 1e-2
    assert "% of HBM bandwidth" in done.stdout


def test_gpu_variants_stream_k_smoke_runs_on_the_cpu(tmp_path):
    """benchmarks/gpu_variants.py --stream-k --smoke on one tiny matmul: the seeds without stream-K
    and the stream-K variants measured, the fastest of each kind checked and timed beside torch."""
    pytest.importorskip("triton")
    command = [sys.executable, os.path.join(ROOT, "benchmarks", "gpu_variants.py"), "--stream-k", "--smoke",
               "--cases", "smoke-48x32x256", "--plain-seeds", "1", "--out", str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "src"), "TENSORTUNE_PROGRESS": "0"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (row,) = json.loads((tmp_path / "gpu_streamk.json").read_text())["cases"].values()
    assert row["correct"] and set(row["us"]) == {"without", "stream-k", "cublas"}
    assert row["stream-k_config"]["STREAM_K"] > 0 and not row["without_config"].get("STREAM_K")
    assert sum(1 for v in row["variants"] if v["us"] and v["config"]["STREAM_K"]) == 3
    assert "x stream-K" in done.stdout


def test_gpu_kernels_benchmark_says_it_needs_a_gpu(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    command = [sys.executable, os.path.join(ROOT, "benchmarks", "gpu_kernels.py"), "--out", str(tmp_path)]
    done = subprocess.run(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": os.path.join(ROOT, "src")},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "needs a CUDA GPU" in done.stderr and "--quick" in done.stderr


@pytest.mark.slow
def test_the_gpu_templates_benchmark_runs_on_the_cpu(tmp_path):
    """benchmarks/templates_gpu.py --quick: the GPU matmul template and the GPU auto-scheduler
    tuned on a tiny shape in Triton's interpreter, checked with cuBLAS's stand-in, the JSON."""
    pytest.importorskip("triton")
    command = [sys.executable, os.path.join(ROOT, "benchmarks", "templates_gpu.py"), "--quick", "--out", str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "src"), "TENSORTUNE_PROGRESS": "0"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (row,) = json.loads((tmp_path / "templates_gpu.json").read_text())["rows"]
    assert row["correct"] and set(row["us"]) == {"template", "autoschedule", "cublas"}
    assert row["measured_now"] == {"template": 4, "autoschedule": 4}
    assert row["template_options"]["BLOCK_M"] == row["template_config"]["tile_m"]
    without_gpu = subprocess.run(command[:2] + ["--out", str(tmp_path)], cwd=ROOT, env=env, capture_output=True,
                                 text=True, timeout=120)
    if not os.path.exists("/dev/nvidiactl"):
        assert without_gpu.returncode == 2 and "needs a CUDA GPU" in without_gpu.stderr


def test_the_templates_benchmark_replays_its_measured_knob_space(tmp_path):
    """benchmarks/templates.py strategies --quick: the model strategy and random search
    replayed on the 32^3 matmul template's measured knob space (three seeds, 16 measurements)."""
    out = tmp_path / "templates.json"
    cache = os.path.join(ROOT, "docs", "benchmarks", "spaces", "template_matmul_32x32x32-cpu.json.gz")
    command = [sys.executable, os.path.join(ROOT, "benchmarks", "templates.py"), "strategies", "--quick",
               "--cache", cache, "--json", str(out)]
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "src")}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    section = json.loads(out.read_text())["strategies"]
    assert section["space"] == 720 and set(section["strategies"]) == {"model", "random"}
    for st in section["strategies"].values():
        assert len(st["curves_ms"]) == 3 and all(len(c) == 16 for c in st["curves_ms"])
        assert 0 < st["mean_fraction"]["16"] <= 1


@pytest.mark.slow
def test_multi_gpu_benchmark_dry_run_scales_out_and_its_ranks_agree(tmp_path):
    """benchmarks/multi_gpu.py --dry-run: the GPU run's code paths on the CPU (Triton's
    interpreter, a real local Ray cluster of 1 then 2 measuring actors, 2 real ranks over
    gloo)."""
    out = tmp_path / "multi_gpu.json"
    command = [sys.executable, os.path.join(ROOT, "benchmarks", "multi_gpu.py"), "--dry-run", "--gpus", "1,2",
               "--shapes", "16x16x16,32x32x16", "--trials", "3", "--ranks", "2", "--rank-budget", "2",
               "--json", str(out)]
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "src"), "TENSORTUNE_PROGRESS": "0"}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    written = json.loads(out.read_text())
    for size in ("1", "2"):
        run = written["ray"][size]
        assert run["trials"] == 6 and run["per_minute"] > 0
        for shape in run["shapes"]:
            assert shape["environment_failures"] == 0 and shape["best_config"] is not None
    rank0, rank1 = written["ranks"]["2"]["ranks"]
    assert written["ranks"]["2"]["agree"] and written["ranks"]["2"]["correct"]
    assert rank0["measured"] > 0 and rank1["measured"] == 0
    assert {d["source"] for d in rank0["decisions"].values()} == {"tuned"}
    assert {d["source"] for d in rank1["decisions"].values()} == {"agreed"}
    assert len(rank1["decisions"]) == 2 and "ranks agree" in done.stdout.splitlines()[-1]


@pytest.mark.slow
def test_multi_gpu_benchmark_dry_run_tunes_the_shapes_with_autotune_on_the_cluster(tmp_path):
    """benchmarks/multi_gpu.py --frontend autotune --dry-run: each shape tuned by
    @tensortune.autotune on a real local Ray cluster (builds in build tasks, measured by the
    interpreter's actor), every candidate measured and a winner chosen."""
    out = tmp_path / "multi_gpu_autotune.json"
    command = [sys.executable, os.path.join(ROOT, "benchmarks", "multi_gpu.py"), "--dry-run", "--gpus", "1",
               "--shapes", "16x16x16,32x16x16", "--trials", "2", "--no-ranks", "--frontend", "autotune",
               "--json", str(out)]
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "src"), "TENSORTUNE_PROGRESS": "0"}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    run = json.loads(out.read_text())["ray"]["1"]
    assert run["frontend"] == "autotune" and run["trials"] == 4
    assert all(s["failures"] == 0 and s["best_config"] and s["best_time"] > 0 for s in run["shapes"])


@pytest.mark.slow
def test_multi_gpu_benchmark_dry_run_tunes_a_models_tasks_on_the_cluster(tmp_path):
    """benchmarks/multi_gpu.py --model --dry-run: a model compiled with its kernels built and
    measured on a real local Ray cluster (Triton's interpreter), checked against eager; its
    trace (Ray's timeline, the records) read by benchmarks/ray_timeline.py."""
    out, trace = tmp_path / "multi_gpu_model.json", tmp_path / "trace"
    command = [sys.executable, os.path.join(ROOT, "benchmarks", "multi_gpu.py"), "--dry-run", "--gpus", "1",
               "--no-ray", "--no-ranks", "--model", "--model-budget", "2", "--trace", str(trace), "--json", str(out)]
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "src"), "TENSORTUNE_PROGRESS": "0"}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    row = json.loads(out.read_text())["model"]["1"]
    assert row["tasks"] >= 2 and row["trials"] >= row["tasks"] and row["relative_error"] < 1e-3
    assert row["latency_ms"] > 0 and any(line.startswith("a model's tasks on Ray  ") for line in done.stdout.splitlines())
    # the phases, from the records: first result, last search result, last confirmation, all within the tuning
    assert 0 < row["first_result_seconds"] <= row["search_end_seconds"] <= row["last_record_seconds"] \
        <= row["tuning_seconds"] + 1 and row["search_per_minute"] > 0
    summary = tmp_path / "timeline.json"
    read = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "ray_timeline.py"),
                           str(trace / "model_1_timeline.json"), "--json", str(summary)],
                          capture_output=True, text=True, timeout=120)
    assert read.returncode == 0, read.stderr[-2000:]
    totals = json.loads(summary.read_text())["totals"]
    builds = sum(t["calls"] for name, t in totals.items() if name.endswith("run_build"))
    assert builds >= row["trials"] and totals["measure"]["calls"] >= row["trials"]
    import sqlite3
    with sqlite3.connect(trace / "model_1.db") as db:
        assert db.execute("SELECT COUNT(*) FROM records").fetchone()[0] >= row["trials"]


def test_multi_gpu_baseline_takes_the_one_gpu_rows_of_the_same_job_only(monkeypatch, tmp_path):
    """`--baseline`: an earlier run's one-GPU rows become this run's scaling base; another
    job's JSON, or a file that is not this script's, is refused with the reason."""
    import argparse

    monkeypatch.syspath_prepend(os.path.join(ROOT, "benchmarks"))
    import multi_gpu

    args = argparse.Namespace(trials=None, seed=0, frontend="autotune", one_shape_at_a_time=False, model_budget=None,
                              cpus_per_gpu=15, cpus_per_node=None)
    one = {"args": dict(vars(args)), "shapes": ["8x8x8"], "grid": {"B": [16]},
           "ray": {"1": {"per_minute": 60.0}}, "model": {}}
    (tmp_path / "one.json").write_text(json.dumps(one))
    out = {"shapes": ["8x8x8"], "grid": {"B": [16]}, "ray": {}, "model": {}}
    multi_gpu.take_baseline(out, str(tmp_path / "one.json"), args)
    assert out["ray"]["1"]["per_minute"] == 60.0 and out["ray"]["1"]["from"] == str(tmp_path / "one.json")
    with pytest.raises(SystemExit, match="--trials 16, this run with None: not the same job"):
        (tmp_path / "other.json").write_text(json.dumps({**one, "args": {**one["args"], "trials": 16}}))
        multi_gpu.take_baseline(dict(out), str(tmp_path / "other.json"), args)
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(SystemExit, match="not a JSON this script wrote"):
        multi_gpu.take_baseline(dict(out), str(tmp_path / "bad.json"), args)


def test_ray_timeline_steady_rate_leaves_out_a_runs_start_and_its_tail(monkeypatch):
    """The steady rate counts the measurements between the ends of the 10th and 90th
    percentile ones: a slow start (workers starting) and a tail do not change it."""
    monkeypatch.syspath_prepend(os.path.join(ROOT, "benchmarks"))
    import ray_timeline

    def call(name, start, seconds):
        return {"ph": "X", "name": name, "ts": start * 1e6, "dur": seconds * 1e6}

    ends = [10.0] + [20.0 + 0.5 * k for k in range(98)] + [200.0]  # 2 a second, between a start and a tail
    events = [call("tensortune.distributed.actor.run_build", 0.0, 1.0)] + [call("measure", e - 0.1, 0.1) for e in ends]
    summary = ray_timeline.summarize(events)
    assert summary["measurements"] == 100 and summary["first_measured_seconds"] == 10.0
    assert summary["last_measured_seconds"] == 200.0 and summary["steady_per_minute"] == pytest.approx(120.0)


@pytest.mark.slow
def test_ray_scaling_benchmark_runs_both_workloads_on_a_one_node_cluster(tmp_path):
    """benchmarks/ray_scaling.py at its smallest: a real one-node Ray cluster, the demo's C
    template and the conv2d auto-scheduler workload, Ray against local, nothing lost."""
    out = tmp_path / "ray_scaling.json"
    command = [sys.executable, os.path.join(ROOT, "benchmarks", "ray_scaling.py"), "--nodes", "1",
               "--cpus-per-node", "2", "--workloads", "demo64,conv", "--trials", "4", "--conv-trials", "2",
               "--rounds", "1", "--no-triton", "--json", str(out)]
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "src"), "TENSORTUNE_PROGRESS": "0"}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    written = json.loads(out.read_text())
    assert [(r["workload"], r["nodes"], r["lost"]) for r in written["summary"]] == [("demo64", 1, 0), ("conv", 1, 0)]
    for workload, trials in (("demo64", 4), ("conv", 2)):
        for way in ("ray", "local"):
            (run,) = written["c"][workload]["1"][way]
            assert run["trials"] == trials and run["records"] == trials and run["environment_failures"] == 0
            assert run["driver_ms_per_candidate"] > 0 and run["first_result_seconds"] > 0
