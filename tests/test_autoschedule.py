"""The auto-scheduler: sketches, the annotation space, schedules that te accepts and that
compute the right thing, features, the search, and autoschedule end to end."""

from __future__ import annotations

import numpy as np
import pytest

from tensortune import te
from tensortune.autoschedule import SketchSpace, autoschedule, autoschedule_many, generate_sketches
from tensortune.autoschedule.analysis import analyze
from tensortune.autoschedule.apply import apply_config
from tensortune.autoschedule.features import FEATURE_NAMES, program_features
from tensortune.autoschedule.measure import CheckSpec, SketchBuilder, SketchRunner
from tensortune.autoschedule.search import SketchSearch
from tensortune.autoschedule.seeds import register_tile_seeds
from tensortune.autoschedule.tiles import move_factor, tile_options
from tensortune.db import Database, Target
from tensortune.measure import BuildResult, ErrorKind, Timer, check_close
from tensortune.te import workloads as W
from tensortune.te.build import reference_outputs

FAST_TIMER = Timer(warmup_seconds=0, min_repeats=2, max_repeats=3, budget_seconds=0)


def keys(w):
    return [s.key for s in generate_sketches(w.outputs)]


def test_sketch_rules_follow_the_graph():
    # B, read along the contiguous axis j, is also copied into contiguous panels per block of j
    assert keys(W.matmul(64, 64, 64)) == ["C:cache_write", "C:cache_write(panel)", "C:tile"]
    # the elementwise consumer is fused: the matmul is tiled at the consumer's loops
    assert keys(W.matmul_bias_relu(64, 64, 64)) == ["C:tile_local>D,D:tile_consumer<C",
                                                     "C:tile_local(panel)>D,D:tile_consumer<C"]
    # padding has a branch: both inlining it and computing it at the root are sketched
    assert keys(W.conv2d_nchw(1, 4, 8, 8, 4, 3, 3, padding=1)) == [
        "pad:inline,conv:cache_write", "pad:inline,conv:tile", "pad:simple,conv:cache_write", "pad:simple,conv:tile"]
    # reductions without reuse are not tiled; a plain elementwise producer is always inlined
    assert all(",exp:" in k for k in keys(W.softmax(4, 64)))
    assert keys(W.transpose(8, 8)) == ["T:simple"]
    # 7 columns do not fill a vector of 16 while 32 filters fill two: the local tile is also
    # sketched vectorized along the filters (weights packed filters-last); 16 columns do
    assert keys(W.conv2d_nchw(1, 4, 7, 7, 32, 3, 3, padding=1))[-1] == "pad:simple,conv:cache_write(vec f)"
    assert not any("vec" in k for k in keys(W.conv2d_nchw(1, 4, 16, 16, 32, 3, 3, padding=1)))
    # a long reduction with almost no spatial parallelism gets an rfactor sketch
    A = te.placeholder((4096,), name="A")
    k = te.reduce_axis(4096, "k")
    S = te.compute((1,), lambda i: te.sum(A[k] * A[k], axis=k), name="S")
    assert [s.key for s in generate_sketches(S)] == ["S:rfactor", "S:simple"]


def test_sketches_are_printable_loop_nests():
    w = W.matmul_bias_relu(64, 64, 64)
    text = generate_sketches(w.outputs)[0].describe(analyze(w.outputs))
    assert "parallel for i.0@j.0" in text and "vectorize for j.3" in text
    assert "D[i, j] = max((C[i, j] + bias[j]), 0.0)" in text


def test_tile_options_cover_divisors_and_tails():
    opts = tile_options(56, 2, 64, tails=True)
    assert (8,) in opts and (56,) in opts and (16,) in opts  # 16 leaves a tail of 8
    assert all(len(t) == 3 for t in tile_options(1024, 4))
    rng = np.random.default_rng(0)
    for _ in range(50):
        moved = move_factor((2, 4, 8), 1024, rng)
        assert moved is not None and np.prod(moved) * (1024 // np.prod(moved)) == 1024


def test_canonical_configs_drop_unused_holes_and_keep_constraints():
    sp = SketchSpace.of(W.matmul(64, 64, 64).outputs)
    a = sp.space.config(sketch="C:tile", C_tile_i=(2, 2, 4), C_tile_j=(1, 2, 16), C_tile_k=(4,), C_par=1,
                        C_unroll=16, C_at=2)
    b = a.replace(C_at=1)
    assert sp.canonical(a) == sp.canonical(b)  # the plain tiling has no compute location
    c = sp.space.config(**{**a, "sketch": "C:cache_write", "C_par": 2, "C_at": 1})
    assert sp.canonical(c)["C_at"] == 2  # cannot be computed outside its own parallel loop
    assert not sp.space.is_valid(a.replace(C_tile_i=(1, 1, 16), C_tile_j=(1, 1, 64)))  # 1024 accumulators


@pytest.mark.parametrize("workload", [
    W.matmul(24, 40, 20), W.matmul_bias_relu(17, 33, 9), W.conv2d_nchw(1, 3, 9, 7, 4, 3, 3, stride=2, padding=1),
    W.conv2d_nchw(1, 3, 6, 5, 32, 3, 3, padding=1), W.batch_matmul(2, 12, 20, 8), W.softmax(3, 37),
    W.matmul(24, 40, 20, layout="NT"), W.matmul(24, 40, 20, layout="TN"), W.matmul(9, 35, 13, layout="TT")],
    ids=lambda w: f"{w.name}{dict(w.key).get('K', '')}{dict(w.key).get('layout', '')}")
def test_random_annotations_build_correct_kernels(workload):
    sp = SketchSpace.of(workload.outputs)
    rng = np.random.default_rng(1)
    inputs = {t.name: rng.standard_normal(t.shape).astype("float32") for t in workload.inputs}
    want = reference_outputs(workload.outputs, **inputs)[workload.output.name]
    for key in sp.sketches:  # one random annotation of every sketch
        cfg = sp.canonical(next(c for c in sp.space.sample(200, rng) if c["sketch"] == key))
        kernel = te.build(apply_config(sp, cfg), list(workload.args))
        check_close(kernel(*[inputs[t.name] for t in workload.inputs]), want, 1e-3, 1e-3)


def test_vector_axis_sketch_packs_the_operand_and_its_seeds_compute_the_conv():
    w = W.conv2d_nchw(1, 5, 7, 7, 32, 3, 3, padding=1)
    sp = SketchSpace.of(w.outputs)
    seeds = [c for c in register_tile_seeds(sp) if c["sketch"].endswith("(vec f)")]
    assert seeds and seeds[0]["conv_vec_f_tile_f"][-1] == 32 and seeds[0]["conv_vec_f_tile_x"][-1] == 7
    s = apply_config(sp, seeds[0])
    local = s["conv.local"]
    assert [l.annotation for l in local.loops[-2:]] == ["unroll", "vectorize"] and local.loops[-1].name.startswith("f.")
    text = str(s)
    assert "allocate weight.local: float32[5, 3, 3, 32] (global)" in text  # packed filters-last
    assert "allocate conv.local: float32[1, 1, 7, 32] (local)" in text  # the tile laid out (b, y, x, f)
    rng = np.random.default_rng(2)
    inputs = [rng.standard_normal(t.shape).astype("float32") for t in w.inputs]
    want = reference_outputs(w.outputs, **{t.name: a for t, a in zip(w.inputs, inputs)})["conv"]
    for cfg in seeds:
        check_close(te.build(apply_config(sp, cfg), list(w.args))(*inputs), want, 1e-3, 1e-3)


def test_an_operand_read_across_the_vectorized_axis_is_packed_with_that_axis_last():
    assert "C:cache_write(pack)" in keys(W.matmul(64, 96, 32, layout="NT"))  # B[j, k]: k is contiguous
    assert not any("pack" in k for k in keys(W.matmul(64, 96, 32)) + keys(W.matmul(64, 96, 32, layout="TN")))
    w = W.matmul(40, 96, 24, layout="NT")
    sp = SketchSpace.of(w.outputs)
    seeds = [c for c in register_tile_seeds(sp) if c["sketch"] == "C:cache_write(pack)"]
    assert seeds
    s = apply_config(sp, seeds[0])
    text = str(s)
    assert "allocate B.local: float32[24, 96] (global)" in text  # B^T laid out k, j: rows of j contiguous
    assert [l.annotation for l in s["B.local"].loops] == ["parallel", ""]
    assert "pack" in sp.sketches["C:cache_write(pack)"].describe(sp.graph)
    rng = np.random.default_rng(4)
    a, b = (rng.standard_normal(t.shape).astype("float32") for t in w.inputs)
    for cfg in seeds:
        check_close(te.build(apply_config(sp, cfg), list(w.args))(a, b), a @ b.T, 1e-3, 1e-3)
    # a long transposed operand is copied by 16 x 16 blocks (40 = 2 blocks and a tail)
    w = W.matmul(8, 64, 40, layout="NT")
    sp = SketchSpace.of(w.outputs)
    cfg = next(c for c in register_tile_seeds(sp) if c["sketch"] == "C:cache_write(pack)")
    s = apply_config(sp, cfg)
    assert [(l.name, l.extent, l.annotation) for l in s["B.local"].loops] == [
        ("i1.0", 3, "parallel"), ("i0.0", 4, ""), ("i1.1", 16, ""), ("i0.1", 16, "vectorize")]  # k, j of B[j, k]
    a, b = (rng.standard_normal(t.shape).astype("float32") for t in w.inputs)
    check_close(te.build(s, list(w.args))(a, b), a @ b.T, 1e-3, 1e-3)
    # a fused epilogue keeps its packed variant; so does a convolution whose filters come first (OHWI)
    A, B, bias = te.placeholder((16, 8), name="A"), te.placeholder((32, 8), name="B"), te.placeholder((32,), name="bias")
    k = te.reduce_axis(8, "k")
    C = te.compute((16, 32), lambda i, j: te.sum(A[i, k] * B[j, k], axis=k), name="C")
    D = te.compute((16, 32), lambda i, j: C[i, j] * 0.5 + bias[j], name="D")
    assert "C:tile_local(pack)>D,D:tile_consumer<C" in [sk.key for sk in generate_sketches(D)]
    data, weight = te.placeholder((1, 8, 8, 4), name="data"), te.placeholder((32, 3, 3, 4), name="weight")
    rr, rs, rc = te.reduce_axis(3, "rr"), te.reduce_axis(3, "rs"), te.reduce_axis(4, "rc")
    conv = te.compute((1, 6, 6, 32), lambda b_, y, x, f: te.sum(
        data[b_, y + rr, x + rs, rc] * weight[f, rr, rs, rc], axis=[rr, rs, rc]), name="conv")
    sp = SketchSpace.of(conv)
    assert "conv:cache_write(pack)" in sp.sketches
    cfg = next(c for c in register_tile_seeds(sp) if c["sketch"] == "conv:cache_write(pack)")
    x, wt = rng.standard_normal((1, 8, 8, 4)).astype("float32"), rng.standard_normal((32, 3, 3, 4)).astype("float32")
    want = reference_outputs([conv], data=x, weight=wt)["conv"]
    check_close(te.build(apply_config(sp, cfg), [data, weight, conv])(x, wt), want, 1e-3, 1e-3)


def test_a_depthwise_convolution_gets_a_window_sketch_vectorized_along_its_columns():
    assert not any("window" in k for k in keys(W.conv2d_nchw(1, 4, 8, 8, 4, 3, 3, padding=1)))  # a channel sum
    x, wg = te.placeholder((1, 16, 10, 10), name="x"), te.placeholder((16, 4, 3, 3), name="wg")
    rc, rr, rs = te.reduce_axis(4, "rc"), te.reduce_axis(3, "rr"), te.reduce_axis(3, "rs")
    grouped = te.compute((1, 16, 8, 8), lambda b, k, y, z: te.sum(
        x[b, (k // 4) * 4 + rc, y + rr, z + rs] * wg[k, rc, rr, rs], axis=[rc, rr, rs]), name="grouped")
    assert not any("window" in sk.key for sk in generate_sketches(grouped))  # a channel sum within each group
    w = W.depthwise_conv2d_nchw(1, 8, 8, 20, 3, 3, padding=1)
    sp = SketchSpace.of(w.outputs)
    assert "pad:simple,dwconv:window" in sp.sketches and "pad:inline,dwconv:window" in sp.sketches
    assert "unroll for rr, rs, y.1" in sp.sketches["pad:simple,dwconv:window"].describe(sp.graph)
    seeds = [c for c in register_tile_seeds(sp) if c["sketch"].endswith("window")]
    assert seeds and seeds[0]["dwconv_win_tile_y"] == (4,) and seeds[0]["dwconv_win_tile_x"] == (20,)
    s = apply_config(sp, seeds[0])
    # channels outside in parallel; the window and the rows unrolled around one row of vectors
    assert [(l.name, l.annotation) for l in s["dwconv"].loops][:1] == [("b@ch", "parallel")]
    assert [(l.name, l.annotation) for l in s["dwconv.local"].loops][-4:] == [
        ("rr", "unroll"), ("rs", "unroll"), ("y", "unroll"), ("x", "vectorize")]
    rng = np.random.default_rng(5)
    inputs = [rng.standard_normal(t.shape).astype("float32") for t in w.inputs]
    want = reference_outputs(w.outputs, **{t.name: a for t, a in zip(w.inputs, inputs)})["dwconv"]
    configs = seeds + [sp.canonical(c) for c in sp.space.sample(300, rng) if c["sketch"].endswith("window")][:4]
    for cfg in configs:
        check_close(te.build(apply_config(sp, cfg), list(w.args))(*inputs), want, 1e-3, 1e-3)
    # strided, with a fused bias + ReLU: the consumer takes the window's loops
    data, weight, bias = (te.placeholder((1, 4, 11, 11), name="data"), te.placeholder((4, 3, 3), name="weight"),
                          te.placeholder((4,), name="bias"))
    rr, rs = te.reduce_axis(3, "rr"), te.reduce_axis(3, "rs")
    dw = te.compute((1, 4, 5, 5), lambda b, c, y, x: te.sum(data[b, c, 2 * y + rr, 2 * x + rs] * weight[c, rr, rs],
                                                              axis=[rr, rs]), name="dw")
    out = te.compute((1, 4, 5, 5), lambda b, c, y, x: te.maximum(dw[b, c, y, x] + bias[c], 0.0), name="out")
    sp = SketchSpace.of(out)
    assert "dw:window>out,out:tile_consumer<dw" in sp.sketches
    arrays = {t.name: rng.standard_normal(t.shape).astype("float32") for t in (data, weight, bias)}
    want = reference_outputs((out,), **arrays)["out"]
    for cfg in [c for c in register_tile_seeds(sp) if c["sketch"].startswith("dw:window")]:
        got = te.build(apply_config(sp, cfg), [data, weight, bias, out])(*arrays.values())
        check_close(got, want, 1e-3, 1e-3)


def test_a_parallel_producer_splits_its_work_across_threads_as_its_consumer_does():
    w = W.conv2d_nchw(1, 5, 7, 7, 32, 3, 3, padding=1)
    sp = SketchSpace.of(w.outputs)
    seed = next(c for c in register_tile_seeds(sp) if c["sketch"] == "pad:simple,conv:cache_write(vec f)")
    s = apply_config(sp, seed)
    # the conv's threads split the rows (the filters, packed and read whole, come last) ...
    assert s["conv"].loops[0].name == "b.0@y.0@x.0@f.0" and s["conv"].loops[0].annotation == "parallel"
    # ... and the padding is computed in parallel over the same rows, not over channels
    assert [(l.name, l.annotation) for l in s["pad"].loops[:3]] == [("y", "parallel"), ("b", ""), ("ch", "")]
    assert [l.name for l in apply_config(sp, seed.replace(pad_par=0))["pad"].loops[:3]] == ["b", "ch", "y"]
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal(t.shape).astype("float32") for t in w.inputs]
    want = reference_outputs(w.outputs, **{t.name: a for t, a in zip(w.inputs, inputs)})["conv"]
    check_close(te.build(apply_config(sp, seed), list(w.args))(*inputs), want, 1e-3, 1e-3)


def test_rfactor_sketch_computes_the_reduction():
    A = te.placeholder((3000,), name="A")
    k = te.reduce_axis(3000, "k")
    S = te.compute((1,), lambda i: te.sum(A[k] * A[k], axis=k), name="S")
    sp = SketchSpace.of(S)
    cfg = sp.canonical(sp.space.config(sketch="S:rfactor", S_rf=64, S_rfvec=16, S_unroll=0,
                                       S_vec=sp.space.params[sp.space.names.index("S_vec")].values[0], S_par=0))
    s = apply_config(sp, cfg)
    assert s["S.rf"].loops[0].annotation == "parallel" and s["S.rf"].loops[-1].annotation == "vectorize"
    kernel = te.build(s)
    a = np.random.default_rng(0).standard_normal(3000).astype("float32")
    check_close(kernel(a), np.array([np.dot(a.astype("float64"), a)], "float32"), 1e-4, 1e-4)


def test_features_describe_the_loop_nest():
    sp = SketchSpace.of(W.matmul(64, 64, 64).outputs)
    cfg = sp.space.config(sketch="C:cache_write", C_tile_i=(1, 1, 8), C_tile_j=(1, 1, 32), C_tile_k=(1,),
                          C_par=1, C_unroll=16, C_at=2)
    f = dict(zip(FEATURE_NAMES, program_features(apply_config(sp, cfg).lower())))
    assert f["s0.log_vector"] == pytest.approx(np.log2(33))  # the update is vectorized over j.3 (32)
    # loads: C.local and B[k, j] contiguous along j, A[i, k] broadcast
    assert f["s0.vector_store_contiguous"] == 1.0 and f["s0.vector_loads_broadcast"] == pytest.approx(1 / 3)
    assert f["s0.log_acc_tile"] == pytest.approx(np.log2(8 * 32 + 1))  # 8 x 32 accumulators held across k
    assert f["s0.log_acc_reuse"] == pytest.approx(np.log2(65))
    assert f["s0.local_store"] == 1.0 and f["g.log_parallel_chunks"] > 0
    plain = dict(zip(FEATURE_NAMES, program_features(te.create_schedule(W.matmul(64, 64, 64).outputs).lower())))
    assert plain["s0.log_vector"] == 0 and plain["g.log_parallel_chunks"] == 0


def test_search_proposes_canonical_unique_valid_configs():
    sp = SketchSpace.of(W.matmul(64, 64, 64).outputs)
    s = SketchSearch(sp, seed=0, budget=40)
    assert s.switches == []  # per-switch exploring stays off on sketch spaces (docs/strategies.md)
    seen = set()
    for _ in range(3):
        batch = s.ask(8)
        assert all(sp.canonical(c) == c and sp.space.is_valid(c) for c in batch)
        assert not seen & set(batch)
        seen |= set(batch)
    point = sp.space.to_point(next(iter(seen)))
    for _ in range(20):
        child = s.ops.mutate(point)
        assert child is None or (child != point and sp.space.is_valid(sp.space.to_config(child)))
    # the evolution's moves stay canonical: no population slot is spent on a copy of a program
    conv = SketchSpace.of(W.conv2d_nchw(1, 4, 7, 7, 32, 3, 3, padding=1).outputs)
    ops = SketchSearch(conv, seed=0, budget=40).ops
    parents = ops.random(30)
    moved = [c for c in ops.mutate_many(parents) + [ops.crossover(parents[0], parents[1])] if c is not None]
    assert moved and all(conv.canonical(conv.space.to_config(p)) == conv.space.to_config(p) for p in parents + moved)


def test_a_wrong_kernel_is_that_candidates_wrong_result():
    w = W.matmul(16, 16, 16)
    sp = SketchSpace.of(w.outputs)
    good = sp.canonical(sp.space.sample(1, 0)[0])
    other = W.matmul_bias_relu(16, 16, 16)  # relu(A @ B + bias): different numbers, same first arguments
    bad_sp = SketchSpace.of(other.outputs)
    bad_build = SketchBuilder(bad_sp, [other.inputs[0], other.inputs[1], other.inputs[2], other.output],
                              jobs=1).build([bad_sp.canonical(bad_sp.space.sample(1, 0)[0])])[0]
    builds = SketchBuilder(sp, jobs=1).build([good]) + [BuildResult(good.replace(C_unroll=64), bad_build.artifact)]
    runner = SketchRunner(CheckSpec.of(w.outputs, list(w.args), "t"), timer=FAST_TIMER)
    try:
        ok, wrong = list(runner.run(builds))
    finally:
        runner.close()
    assert ok.ok and ok.extra["steps"]
    assert wrong.error is ErrorKind.WRONG_RESULT or wrong.error is ErrorKind.CRASHED


def test_autoschedule_records_every_trial_and_rebuilds_without_searching(tmp_path):
    db_path = tmp_path / "records.db"
    w = W.matmul_bias_relu(32, 32, 32)
    k = autoschedule(w, budget=6, db=db_path, progress=False, timer=FAST_TIMER, confirm=2, confirm_rounds=2)
    assert k.trials == 6 and not k.from_db and k.sketch.startswith("C:tile_local")
    db = Database(db_path)
    records = db.records(k.workload, Target.cpu())
    assert len([r for r in records if r.strategy != "confirm"]) == 6
    [confirmed] = [r for r in records if r.strategy == "confirm"]
    assert confirmed.config == k.config and confirmed.time == k.time and len(confirmed.times) >= 2
    assert confirmed.extra["confirmed"] and confirmed.extra["rounds"] == 2 and confirmed.extra["finalists"] >= 1
    assert confirmed.extra["margin"] >= 0 and "steps" in confirmed.extra
    assert all("steps" in r.extra for r in records if r.ok)
    a, b, bias = (np.random.default_rng(3).standard_normal(t.shape).astype("float32") for t in w.inputs)
    check_close(k(a, b, bias), np.maximum(a @ b + bias, 0), 1e-3, 1e-3)
    # the schedule replays from its recorded steps
    replay = te.Schedule.from_steps(k.schedule.outputs, k.steps)
    check_close(te.build(replay, list(k.kernel.args))(a, b, bias), np.maximum(a @ b + bias, 0), 1e-3, 1e-3)
    again = autoschedule(W.matmul_bias_relu(32, 32, 32), budget=6, db=db_path, progress=False)
    assert again.from_db and again.trials == 0 and again.config == k.config
    assert len(db.records(k.workload, Target.cpu())) == len(records)


def test_autoschedule_beside_records_of_the_same_graph_under_another_key(tmp_path):
    """The Tuner offers a model pre-trained on such records (as after a rules version
    bump); the sketch search declines it and keeps its program features."""
    w = W.matmul(16, 16, 16)
    autoschedule(w, budget=9, db=tmp_path / "r.db", progress=False, timer=FAST_TIMER, confirm=1)
    A, B = w.inputs
    k = autoschedule(w, args=[B, A, w.output], budget=9, db=tmp_path / "r.db", progress=False, timer=FAST_TIMER,
                     confirm=1)
    assert k.trials == 9 and not k.from_db


def test_autoschedule_many_shares_one_budget(tmp_path):
    ks = autoschedule_many([W.matmul(16, 16, 16), W.transpose(32, 16)], weights=[2.0, 1.0], budget=8,
                           db=tmp_path / "r.db", policy="round-robin", trials_per_round=2, timer=FAST_TIMER,
                           confirm=1)
    assert len(ks) == 2 and ks.allocation.total_trials == 8
    assert sum(k.trials for k in ks) == 8
    x = np.random.default_rng(0).standard_normal((32, 16)).astype("float32")
    check_close(ks[1](x), x.T)


def test_bad_inputs_are_clear_errors():
    with pytest.raises(te.TEError, match="target='cpu'"):
        autoschedule(W.matmul(8, 8, 8), target="tpu", db=":memory:")
    with pytest.raises(te.TEError, match="needs tensors"):
        autoschedule(lambda: 3, db=":memory:")
    with pytest.raises(ValueError, match="weights"):
        autoschedule_many([W.matmul(8, 8, 8)], weights=[1.0, 2.0], db=":memory:")
    with pytest.raises(te.TEError, match="layout 'NX' must be one of NN, NT, TN, TT"):
        W.matmul(8, 8, 8, layout="NX")


def test_any_registered_strategy_can_drive_the_search(tmp_path):
    k = autoschedule(W.transpose(16, 8), budget=3, db=tmp_path / "r.db", strategy="random", progress=False,
                     timer=FAST_TIMER, confirm=1)
    x = np.random.default_rng(1).standard_normal((16, 8)).astype("float32")
    assert k.trials == 3
    check_close(k(x), x.T)


def test_autoschedule_many_gives_every_computation_a_share_of_a_small_budget(tmp_path):
    """The warm-up round of 16 trials used to take all of a budget of 8: the second
    computation measured nothing and autoschedule_many raised 'measured no working schedule'."""
    ks = autoschedule_many([W.matmul(16, 16, 16), W.transpose(32, 16)], budget=8, db=tmp_path / "r.db",
                           timer=FAST_TIMER, confirm=1)
    assert [k.trials for k in ks] == [4, 4]
    with pytest.raises(ValueError, match="a budget of 1 trials cannot measure each of the 2"):
        autoschedule_many([W.matmul(8, 8, 8), W.transpose(8, 4)], budget=1, db=tmp_path / "r2.db")


@pytest.mark.parametrize("layout", ["NN", "NT", "TN"])
def test_a_panel_sketch_copies_each_block_of_columns_contiguously_and_computes_the_matmul(layout):
    w = W.matmul(40, 96, 24, layout=layout)
    sp = SketchSpace.of(w.outputs)
    assert "C:cache_write(panel)" in sp.sketches
    cfg = next(c for c in register_tile_seeds(sp) if c["sketch"] == "C:cache_write(panel)")
    cfg = cfg.replace(C_tile_j=(1, 1, 32), C_par=1)
    s = apply_config(sp, cfg)
    text = str(s)
    assert "allocate B.local: float32[24, 32] (local)" in text  # one block of 32 columns, all of k, j last
    loops = [l.name for l in s["C"].loops]
    assert loops[0] == "j.0" and s["C"].loops[0].annotation == "parallel"  # blocks of columns outermost
    rng = np.random.default_rng(7)
    for cfg_ in (cfg, cfg.replace(C_par=2, C_tile_i=(2, 1, 6))):  # blocks and rows in parallel; 40 = 6 x 6 + 4
        inputs = {t.name: rng.standard_normal(t.shape).astype("float32") for t in w.inputs}
        a = inputs["A"].T if layout[0] == "T" else inputs["A"]
        b = inputs["B"].T if layout[1] == "T" else inputs["B"]
        check_close(te.build(apply_config(sp, cfg_), list(w.args))(inputs["A"], inputs["B"]), a @ b, 1e-3, 1e-3)
    # a convolution whose window slides along the vectorized axis has no panel sketch
    assert not any("panel" in k for k in keys(W.conv2d_nchw(1, 4, 8, 8, 4, 3, 3, padding=1)))
    # nor a matrix-vector product (a decode step's x @ W^T): its one row reads B once
    assert not any("panel" in k for k in SketchSpace.of(W.matmul(1, 96, 24, layout=layout).outputs).sketches)
