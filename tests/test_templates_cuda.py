"""GPU templates: knobs resolved to the GPU pattern's options, errors that name the option,
and tuning end to end in Triton's interpreter (generated modules, the isolated GPU worker,
the NumPy interpreter's check, records, rebuilding from them)."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tensortune import te
from tensortune.db import Database
from tensortune.measure import MeasureResult
from tensortune.model.features import FeatureExtractor
from tensortune.space import Config
from tensortune.template import TemplateError
from tensortune.template.cuda import PatternFeatures, cuda_schedule, pattern_options, resolve
from tensortune.template.examples import gpu_matmul
from tensortune.template.search import TemplateSearch
from tensortune.template.template import template


def _matmul(M, N, K, dtype="float16"):
    A = te.placeholder((M, K), dtype, "A")
    B = te.placeholder((K, N), dtype, "B")
    k = te.reduce_axis(K, "k")
    return A, B, te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")


# ---- the knobs and the pattern's options ----------------------------------------------------

def test_a_gpu_templates_knobs_resolve_to_the_contraction_patterns_options():
    task = gpu_matmul(32, 48, 64)
    assert task.target == "cuda" and task.cuda.plan.kind == "contraction"
    assert set(task.space.names) == {"tile_m", "tile_n", "tile_k", "warps", "stages", "group_m", "split_k", "launch"}
    assert [t.name for t in task.args] == ["A", "B", "C"]
    config = Config(tile_m=32, tile_n=64, tile_k=32, warps=4, stages=4, group_m=8, split_k=1, launch="plain")
    resolved = task.resolve(config)
    assert resolved.config["BLOCK_M"] == 32 and resolved.config["BLOCK_N"] == 64 and resolved.config["BLOCK_K"] == 32
    assert resolved.config["num_warps"] == 4 and resolved.config["num_stages"] == 4 and resolved.config["GROUP_M"] == 8
    assert resolved.config in resolved.sketch.space
    # a template on the CPU's te schedules is a different kind of task
    with pytest.raises(TemplateError, match="is a GPU template"):
        task.instantiate(config)


def test_options_left_out_take_the_patterns_first_rule_of_thumb():
    _, _, C = _matmul(256, 256, 256)
    resolved = resolve(cuda_schedule(C, BLOCK_K=32))
    first = resolved.sketch.seeds[0]
    assert resolved.config["BLOCK_K"] == 32
    assert all(resolved.config[n] == first[n] for n in resolved.sketch.space.names if n != "BLOCK_K")
    assert pattern_options(C)["BLOCK_M"] == [16, 32, 64, 128, 256]


def test_options_the_pattern_does_not_offer_are_named():
    _, _, C = _matmul(64, 64, 64)
    with pytest.raises(TemplateError, match=r"\['BLOCK_MM'\] are not options of the contraction pattern"):
        resolve(cuda_schedule(C, BLOCK_MM=64))
    with pytest.raises(TemplateError, match="not a configuration of the contraction pattern.*num_warps"):
        resolve(cuda_schedule(C, num_warps=3))
    with pytest.raises(TemplateError, match="violates constraint 'TMA or not TMA_STORE'"):
        resolve(cuda_schedule(C, BLOCK_M=64, BLOCK_N=64, TMA=False, TMA_STORE=True))
    X = te.placeholder((4, 8), "float16", "X")
    i = te.reduce_axis(8, "i")
    j = te.reduce_axis(4, "j")
    total = te.compute((1,), lambda o: te.sum(X[j, i], axis=[j, i]), name="total")
    with pytest.raises(TemplateError, match="cuda_schedule"):
        cuda_schedule([total, total])


def test_a_knob_value_the_pattern_refuses_is_that_candidates_failure_not_the_templates():
    @template("test_gpu_refused")
    def refused(cfg, n):
        _, _, C = _matmul(n, n, n)
        cfg.define_knob("warps", [4, 3])  # 3 warps: not an option of the pattern
        return cuda_schedule(C, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, num_warps=cfg["warps"])

    task = refused(64)  # the first option resolves: the task is made
    assert task.resolve(Config(warps=4)).config["num_warps"] == 4
    with pytest.raises(TemplateError, match="num_warps"):
        task.resolve(Config(warps=3))
    feats = PatternFeatures(task)
    assert np.isnan(feats.config_row(Config(warps=3))).all() and not np.isnan(feats.config_row(Config(warps=4))).any()


def test_a_template_must_keep_its_kernels_arguments_and_one_kind_of_schedule():
    @template("test_gpu_other_args")
    def other_args(cfg, n):
        cfg.define_knob("k", [n, 2 * n])
        _, _, C = _matmul(n, n, cfg["k"])
        return cuda_schedule(C, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, num_warps=2)

    task = other_args(16)
    with pytest.raises(TemplateError, match="differ from those of its first options"):
        task.resolve(Config(k=32))

    @template("test_gpu_no_pattern")
    def no_pattern(cfg, n):
        A = te.placeholder((n, n), "float16", "A")
        k = te.reduce_axis(n, "k")
        S = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="S")
        T = te.compute((n,), lambda i: te.sum(S[k] * A[i, k], axis=k), name="T")
        cfg.define_knob("w", [1, 2])
        return cuda_schedule(T, num_warps=cfg["w"])

    with pytest.raises(TemplateError, match="no GPU pattern"):
        no_pattern(16)


def test_the_model_ranks_gpu_candidates_on_the_patterns_columns():
    task = gpu_matmul(64, 64, 64)
    feats = PatternFeatures(task)
    assert feats.names == FeatureExtractor(task.cuda.sketch.space).names  # the GPU auto-scheduler's columns
    search = TemplateSearch(task, seed=0, budget=8)
    batch = search.ask(4)
    assert len(batch) == 4 and all(task.space.is_valid(c) for c in batch)
    assert search.features.configs(batch).shape == (4, feats.width)


def test_a_prior_from_another_gpu_template_of_the_same_graph(tmp_path):
    from tensortune.template.cuda_tune import cuda_target
    from tensortune.template.prior import prior_model

    @template("test_gpu_square_tiles")
    def square(cfg, n):
        _, _, C = _matmul(n, n, n)
        cfg.define_knob("tile", [16, 32, 64])
        cfg.define_knob("warps", [2, 4])
        return cuda_schedule(C, BLOCK_M=cfg["tile"], BLOCK_N=cfg["tile"], BLOCK_K=32, num_warps=cfg["warps"])

    source, task = square(64), gpu_matmul(64, 64, 64)
    db = Database(tmp_path / "prior.db")
    for config in source.space:  # recorded times that favour large tiles
        db.add(source.workload, cuda_target(), MeasureResult(config, (1e-3 / config["tile"],)))
    model = prior_model(task, db, [source])
    assert model is not None
    small = Config(tile_m=32, tile_n=32, tile_k=32, warps=4, stages=3, group_m=1, split_k=1, launch="plain")
    large = Config(tile_m=64, tile_n=64, tile_k=32, warps=4, stages=3, group_m=1, split_k=1, launch="plain")
    scores = model.predict(PatternFeatures(task).configs([small, large]))
    assert scores[1] > scores[0]  # higher is better: the large tile, as the other template's records say
    from tensortune.template.examples import matmul
    with pytest.raises(TemplateError, match="runs on 'c'"):
        prior_model(task, db, [matmul(16, 16, 16)])


# ---- tuning in Triton's interpreter ----------------------------------------------------------

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")

SCRIPT = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[1])
    import test_templates_cuda as tests

    if __name__ == "__main__":
        print(json.dumps(getattr(tests, sys.argv[2])(*sys.argv[3:])))
""")


def in_interpreter(tmp_path: Path, name: str, *args: str) -> object:
    """`name(*args)` of this module in a fresh process with TRITON_INTERPRET=1 (Triton decides
    at import whether it interprets; tuning starts processes of its own, which the
    module-wide `interpreter` worker, a daemon, may not)."""
    script = tmp_path / "run_in_interpreter.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, TRITON_INTERPRET="1", TENSORTUNE_PROGRESS="0")
    proc = subprocess.run([sys.executable, str(script), str(Path(__file__).parent), name, *args],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def tune_and_rebuild(db_path: str, cache: str) -> dict:
    """In a TRITON_INTERPRET=1 worker: tune, call, rebuild from the records."""
    import torch

    task = gpu_matmul(32, 48, 64)
    best = task.tune(budget=5, db=db_path, cache_dir=cache, progress=False, seed=1)
    a, b = torch.randn(32, 64).half(), torch.randn(64, 48).half()
    want = a.float() @ b.float()
    err = float((best(a, b).float() - want).abs().max() / want.abs().max())
    again = gpu_matmul(32, 48, 64).load_best(db_path)
    tuned_again = gpu_matmul(32, 48, 64).tune(budget=5, db=db_path, cache_dir=cache, progress=False)
    return {"trials": best.trials, "from_db": best.from_db, "err": err, "options": dict(best.options),
            "config": dict(best.config), "again": dict(again.config), "again_from_db": again.from_db,
            "again_source": again.kernel.tuning.source, "tuned_again_trials": tuned_again.trials,
            "has_dot": "tl.dot" in best.source}


def scaled_candidates_fail(db_path: str, cache: str) -> list:
    """In a TRITON_INTERPRET=1 worker: a template that computes 2 A @ B for one knob value."""
    @template("test_gpu_scaled")
    def scaled(cfg, n):
        A = te.placeholder((n, n), "float16", "A")
        B = te.placeholder((n, n), "float16", "B")
        k = te.reduce_axis(n, "k")
        cfg.define_knob("scale", [1.0, 2.0])
        C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k) * cfg["scale"], name="C")
        cfg.define_knob("tile", [16, 32])
        return cuda_schedule(C, BLOCK_M=cfg["tile"], BLOCK_N=cfg["tile"], BLOCK_K=16, num_warps=2)

    task = scaled(32)
    task.tune(budget=4, db=db_path, cache_dir=cache, progress=False, strategy="exhaustive")
    return sorted((r.config["scale"], r.config["tile"], r.ok, str(r.error)) for r in Database(db_path).records(
        task.workload))


@needs_triton
def test_a_gpu_template_is_tuned_checked_recorded_and_rebuilt(tmp_path):
    out = in_interpreter(tmp_path, "tune_and_rebuild", str(tmp_path / "records.db"), str(tmp_path / "cache"))
    assert out["trials"] == 5 and not out["from_db"] and out["has_dot"]
    assert out["err"] < 1e-2
    assert out["options"]["BLOCK_M"] == out["config"]["tile_m"]
    assert out["again"] == out["config"] and out["again_from_db"] and out["again_source"] == "database"
    assert out["tuned_again_trials"] == 0  # records of the task: rebuilt, nothing measured
    records = Database(tmp_path / "records.db").records(gpu_matmul(32, 48, 64).workload)
    assert len(records) == 5 and all(r.ok and math.isfinite(r.time) for r in records)


@needs_triton
def test_candidates_that_compute_something_else_fail_the_interpreters_check(tmp_path):
    rows = in_interpreter(tmp_path, "scaled_candidates_fail", str(tmp_path / "records.db"), str(tmp_path / "cache"))
    assert [(s, t, ok) for s, t, ok, _ in rows] == [(1.0, 16, True), (1.0, 32, True), (2.0, 16, False),
                                                    (2.0, 32, False)]
    assert all(err == "wrong_result" for s, _, ok, err in rows if not ok)


def test_without_a_gpu_or_the_interpreter_tuning_says_what_it_needs(monkeypatch, tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    task = gpu_matmul(32, 32, 32)
    for call in (lambda: task.tune(budget=2, db=str(tmp_path / "r.db")), lambda: task.load_best(str(tmp_path / "r.db"))):
        with pytest.raises(TemplateError, match="needs a CUDA GPU.*TRITON_INTERPRET=1"):
            call()


def test_a_template_over_another_pattern_a_softmax_over_rows():
    from tensortune.te import workloads

    @template("test_gpu_softmax")
    def softmax(cfg, rows, cols):
        w = workloads.softmax(rows, cols)
        cfg.define_knob("rows_per_program", pattern_options(w)["BLOCK_R"])
        cfg.define_knob("warps", [1, 4])
        return cuda_schedule(w, BLOCK_R=cfg["rows_per_program"], num_warps=cfg["warps"])

    task = softmax(64, 256)
    assert task.cuda.plan.kind == "rows" and task.space.size == 5 * 2
    resolved = task.resolve(Config(rows_per_program=4, warps=4))
    assert resolved.config["BLOCK_R"] == 4 and resolved.config["BLOCK_C"] == resolved.sketch.seeds[0]["BLOCK_C"]


@template("test_gpu_refused_warps")
def refused_warps(cfg, n):
    _, _, C = _matmul(n, n, n)
    cfg.define_knob("warps", [4, 3, 2])  # 3 warps: not an option of the pattern
    return cuda_schedule(C, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, num_warps=cfg["warps"])


def rebuild_from_untrusted_records(db_path: str) -> dict:
    """In a TRITON_INTERPRET=1 worker: records that cannot be rebuilt are skipped, said why."""
    import warnings

    from tensortune.template.cuda_tune import cuda_target

    task = refused_warps(32)
    db = Database(db_path)
    db.add(task.workload, cuda_target(), MeasureResult(Config(warps=16), (1e-7,)))  # not in the space: ignored
    db.add(task.workload, cuda_target(), MeasureResult(Config(warps=3), (1e-6,)))  # does not resolve: skipped
    db.add(task.workload, cuda_target(), MeasureResult(Config(warps=2), (1e-3,)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        best = task.load_best(db_path)
    return {"config": dict(best.config), "time": best.time, "warnings": [str(w.message) for w in caught]}


@needs_triton
def test_records_that_cannot_be_rebuilt_are_skipped_with_the_reason(tmp_path):
    out = in_interpreter(tmp_path, "rebuild_from_untrusted_records", str(tmp_path / "records.db"))
    assert out["config"] == {"warps": 2} and out["time"] == 1e-3
    assert len(out["warnings"]) == 1 and '{"warps":3}' in out["warnings"][0] and "num_warps" in out["warnings"][0]
