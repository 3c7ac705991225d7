"""The `dot` sketch: matrix-vector products (and skinny matmuls) read along their contiguous
reduction, as a decode step's `x @ W^T`: when it applies, what it generates, and that every
annotation computes the right thing with tails and fused epilogues."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tensortune import te
from tensortune.autoschedule import SketchSpace, autoschedule, generate_sketches
from tensortune.autoschedule.apply import apply_config
from tensortune.autoschedule.search import SketchPointOps
from tensortune.autoschedule.seeds import register_tile_seeds
from tensortune.db import Database, Target
from tensortune.measure import Timer, check_close
from tensortune.space import Config
from tensortune.te import workloads as W

FAST_TIMER = Timer(warmup_seconds=0, min_repeats=2, max_repeats=3, budget_seconds=0)


def linear(m: int, n: int, k: int, epilogue: str = "", batch: int = 0):
    """x @ W^T (W stored n x k, as a Linear layer's weight), optionally + bias then ReLU or
    SiLU times a second input (the gated MLP's elementwise tail); `batch` > 0 gives every
    batch its own W (attention's scores against a key cache)."""
    lead = (batch,) if batch else ()
    x = te.placeholder(lead + (m, k), name="x")
    w = te.placeholder(lead + (n, k), name="w")
    r = te.reduce_axis(k, "k")
    if batch:
        C = te.compute((batch, m, n), lambda b, i, j: te.sum(x[b, i, r] * w[b, j, r], axis=r), name="C")
        return [C], [x, w]
    C = te.compute((m, n), lambda i, j: te.sum(x[i, r] * w[j, r], axis=r), name="C")
    if epilogue == "bias_relu":
        bias = te.placeholder((n,), name="bias")
        return [te.compute((m, n), lambda i, j: te.maximum(C[i, j] + bias[j], 0.0), name="D")], [x, w, bias]
    if epilogue == "silu_mul":
        up = te.placeholder((m, n), name="up")
        return [te.compute((m, n), lambda i, j: C[i, j] * te.sigmoid(C[i, j]) * up[i, j], name="D")], [x, w, up]
    return [C], [x, w]


def reference(inputs: dict, epilogue: str, batch: int) -> np.ndarray:
    x, w = inputs["x"].astype("float64"), inputs["w"].astype("float64")
    out = x @ np.swapaxes(w, -1, -2)
    if epilogue == "bias_relu":
        out = np.maximum(out + inputs["bias"], 0.0)
    elif epilogue == "silu_mul":
        out = out / (1.0 + np.exp(-out)) * inputs["up"]
    return out


def keys(outputs):
    return [s.key for s in generate_sketches(outputs)]


def test_a_matrix_vector_product_read_along_its_reduction_gets_a_dot_sketch_first():
    assert keys(W.matmul(1, 688, 256, layout="NT").outputs)[0] == "C:dot"
    assert keys(linear(1, 256, 688, "silu_mul")[0])[0] == "C:dot>D,D:tile_consumer<C"  # the epilogue fused
    assert keys(W.matmul(8, 512, 2048, layout="NT").outputs)[0] == "C:dot"  # a skinny matmul
    assert keys(linear(4, 64, 32, batch=3)[0])[0] == "C:dot"  # a batch of them, each with its own W
    # as a model lowers a Linear layer: mm(x, t(W)), the transpose a stage of its own, inlined
    x, w = te.placeholder((1, 256), name="x"), te.placeholder((688, 256), name="w")
    wt = te.compute((256, 688), lambda a, b: w[b, a], name="wt")
    k = te.reduce_axis(256, "k")
    C = te.compute((1, 688), lambda i, j: te.sum(x[i, k] * wt[k, j], axis=k), name="C")
    assert keys([C])[0] == "wt:inline,C:dot" and not any("simple,C:dot" in key for key in keys([C]))
    # not where rows share too little (9 rows), W is not contiguous along k (NN, TN), or k is under two vectors
    assert not any("dot" in k for k in keys(W.matmul(9, 512, 256, layout="NT").outputs))
    assert not any("dot" in k for k in keys(W.matmul(1, 512, 256).outputs))
    assert not any("dot" in k for k in keys(W.matmul(1, 512, 256, layout="TN").outputs))
    assert not any("dot" in k for k in keys(W.matmul(1, 512, 24, layout="NT").outputs))
    assert not any("dot" in k for k in keys(W.matmul(128, 688, 256, layout="NT").outputs))


def test_the_dot_sketch_reads_w_along_k_in_vectors_and_sums_the_lanes_per_block():
    sp = SketchSpace.of(W.matmul(1, 688, 256, layout="NT").outputs)
    seeds = register_tile_seeds(sp)
    assert [c["sketch"] for c in seeds[:6]] == ["C:dot"] * 6  # measured before any other sketch
    assert {c["C_dot_par"] for c in seeds[:6]} == {0, 1}  # in parallel and serially
    cfg = seeds[0].replace(C_dot_rows=8, C_dot_lanes=16, C_dot_par=1)
    text = str(apply_config(sp, cfg))
    # per block of 8 outputs: 8 rows of 16 lanes, updated along k in vectors of B's contiguous rows
    assert "parallel for j.0 in 0..86:" in text and "allocate C.rf: float32[1, 8, 16] (local)" in text
    assert "vectorize for C.rf/k.1 in 0..16:" in text
    assert "B[((j + (j.0 * 8)) + (j.1 * 8)), ((k.0 * 16) + C.rf/k.1)]" in text
    assert "C[C/i, (((j.0 * 8) + (j.1 * 8)) + j.2)] += C.rf[C/i, j.2, C/k.1]" in text  # the lanes summed
    described = sp.sketches["C:dot"].describe(sp.graph)
    assert "vectorize for lane" in described and "sum over lanes of C.rf" in described


CASES = [(1, 688, 256, ""), (3, 37, 45, "bias_relu"), (2, 100, 300, "silu_mul"), (1, 43, 33, "silu_mul"),
         (8, 20, 64, ""), (1, 19, 40, "bias_relu")]


@pytest.mark.parametrize("m,n,k,epilogue", CASES, ids=[f"{m}x{n}x{k}{'-' + e if e else ''}" for m, n, k, e in CASES])
def test_dot_annotations_compute_the_product_with_tails_and_fused_epilogues(m, n, k, epilogue):
    outputs, args = linear(m, n, k, epilogue)
    sp = SketchSpace.of(outputs)
    key = next(x for x in sp.sketches if ":dot" in x)
    holes = {h.name: h.values for h in sp.holes[key]}
    base = {p.name: p.values[0] for p in sp.space.params}
    rng = np.random.default_rng(m * 1000 + n + k)
    configs = [sp.canonical(Config(dict(base, sketch=key, **dict(zip(holes, values)))))
               for values in itertools.product(*holes.values())]
    configs = [c for c in configs if sp.space.is_valid(c)]  # the accumulators fit the registers
    picked = [configs[i] for i in rng.choice(len(configs), size=min(6, len(configs)), replace=False)]
    for cfg in picked + register_tile_seeds(sp)[:1]:
        inputs = {t.name: rng.standard_normal(t.shape).astype("float32") for t in args}
        kernel = te.build(apply_config(sp, cfg), args + outputs)
        check_close(kernel(*[inputs[t.name] for t in args]), reference(inputs, epilogue, 0), 1e-4, 1e-4)


def test_a_batch_of_matrix_vector_products_runs_its_batches_in_parallel():
    outputs, args = linear(2, 40, 48, batch=3)
    sp = SketchSpace.of(outputs)
    cfg = register_tile_seeds(sp)[0]
    assert cfg["sketch"] == "C:dot" and cfg["C_dot_par"] == 1
    s = apply_config(sp, cfg)
    assert s["C"].loops[0].annotation == "parallel" and s["C"].loops[0].name.startswith("b")
    rng = np.random.default_rng(3)
    inputs = {t.name: rng.standard_normal(t.shape).astype("float32") for t in args}
    got = te.build(s, args + outputs)(inputs["x"], inputs["w"])
    check_close(got, reference(inputs, "", 3), 1e-4, 1e-4)


def test_autoschedule_measures_and_checks_the_dot_sketch_for_a_decode_step(tmp_path):
    db_path = tmp_path / "records.db"
    w = W.matmul(1, 96, 64, layout="NT")
    kernel = autoschedule(w, budget=4, db=db_path, timer=FAST_TIMER, seed=0, progress=False)
    records = Database(db_path).records(kernel.workload, Target.cpu())
    tried = [r for r in records if r.strategy != "confirm"]
    assert len(tried) == 4 and all(r.ok and r.config["sketch"] == "C:dot" for r in tried)  # the seeds come first
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((1, 64)).astype("float32"), rng.standard_normal((96, 64)).astype("float32")
    check_close(kernel(a, b), a @ b.T, 1e-4, 1e-4)


def test_the_search_mutates_a_dot_sketchs_rows_and_lanes():
    sp = SketchSpace.of(W.matmul(1, 688, 256, layout="NT").outputs)
    ops = SketchPointOps(sp, np.random.default_rng(0))
    seed = register_tile_seeds(sp)[0]
    point = sp.space.to_point(seed)
    children = [sp.space.to_config(p) for p in (ops.mutate(point) for _ in range(60)) if p is not None]
    dot_children = [c for c in children if c["sketch"] == "C:dot"]
    for name in ("C_dot_rows", "C_dot_lanes", "C_dot_block"):
        assert any(c[name] != seed[name] for c in dot_children), name
