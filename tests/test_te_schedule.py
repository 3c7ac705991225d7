"""Schedules: primitives and their legality checks, bound inference, pseudo-code, steps
serialization and replay, loop-nest facts. Nothing here compiles (see test_te_build)."""

import json

import pytest

from tensortune import te
from tensortune.te import workloads as W
from tensortune.te.dtype import TEError
from tensortune.te.steps import Annotate, Split


def matmul_schedule(n=64):
    w = W.matmul(n, n, n)
    return w, te.create_schedule(w.outputs)


def test_split_tile_fuse_reorder_name_loops_deterministically():
    w, s = matmul_schedule()
    C = s["C"]
    i0, i1, i2 = C.split("i", factors=[4, 2])
    assert [(x.name, x.extent) for x in (i0, i1, i2)] == [("i.0", 8), ("i.1", 4), ("i.2", 2)]
    jo, ji = C.split("j", nparts=3)
    assert (jo.extent, ji.extent) == (3, 22)
    C.reorder(jo, i0)
    assert [x.name for x in C.loops] == ["j.0", "i.1", "i.2", "i.0", "j.1", "k"]
    f = C.fuse("j.0", "i.1")
    assert (f.name, f.extent) == ("j.0@i.1", 12)
    assert [type(x).__name__ for x in s.steps] == ["Split", "Split", "Reorder", "Fuse"]


@pytest.mark.parametrize("action, message", [
    (lambda s: s["C"].parallel("k"), "cannot parallel reduction loop 'k'"),
    (lambda s: s["C"].vectorize("k"), "cannot vectorize reduction loop"),
    (lambda s: s["C"].vectorize("j"), "must be the innermost loop"),
    (lambda s: s["C"].fuse("j", "k"), "cannot fuse spatial and reduction loops"),
    (lambda s: s["C"].fuse("i", "k"), "not adjacent"),
    (lambda s: s["C"].split("i", 0), "positive integer"),
    (lambda s: s["C"].split("q", 4), "has no loop 'q'; its loops are i, j, k"),
    (lambda s: s["C"].annotate("i", "gpu"), "unknown annotation"),
    (lambda s: s["C"].compute_inline(), "is an output"),
    (lambda s: s["C"].compute_at(s["C"], "i"), "is an output"),
    (lambda s: s["A"], "input placeholder"),
    (lambda s: s["nope"], "no stage named 'nope'"),
    (lambda s: s["C"].unroll("k"), None),
    (lambda s: s["C"].reorder_storage("j", "i"), "is an output; its layout is the caller's array"),
    (lambda s: s[s.cache_read("A", ["C"])].reorder_storage("i1"), "is not an order of the axes of 'A.local' (i0, i1)"),
])
def test_illegal_primitives_raise_clear_errors(action, message):
    w, s = matmul_schedule(2048)
    if message is None:  # unrolling 2048 iterations (more than 512) is refused
        with pytest.raises(TEError, match="would copy its body 2048 times"):
            action(s)
        return
    with pytest.raises(TEError) as err:
        action(s)
    assert message in str(err.value)


def test_a_failed_primitive_leaves_the_schedule_unchanged():
    w, s = matmul_schedule()
    s["C"].split("j", 16)
    before = (list(s.steps), [x.name for x in s["C"].loops])
    with pytest.raises(TEError):
        s["C"].vectorize("j.0")  # not innermost: rolled back
    assert (list(s.steps), [x.name for x in s["C"].loops]) == before
    assert s["C"].loop("j.0").annotation == ""


def test_transformed_loops_explain_where_they_went():
    w, s = matmul_schedule()
    s["C"].split("i", 8)
    with pytest.raises(TEError, match="was split into i.0, i.1"):
        s["C"].loop("i")
    s["C"].fuse("i.0", "i.1")
    with pytest.raises(TEError, match="was fused into 'i.0@i.1'"):
        s["C"].parallel("i.1")


def test_compute_at_infers_tile_regions_and_checks_consumers():
    w = W.matmul_bias_relu(64, 64, 32)
    s = te.create_schedule(w.outputs)
    D = s["D"]
    io, jo, ii, ji = D.tile("i", "j", 8, 16)
    s["C"].compute_at(D, jo)
    assert s.bounds()["C"].region == (8, 16)
    assert [(x.name, x.extent) for x in s["C"].loops] == [("i", 8), ("j", 16), ("k", 32)]
    with pytest.raises(TEError, match="is vectorized"):
        D.vectorize(ji)
        s["C"].compute_at(D, ji)
    with pytest.raises(TEError, match="computed at loop 'j.0'"):
        D.split(jo, 2)


def test_compute_at_through_a_chain_of_stages():
    w = W.matmul(64, 64, 64)
    s = te.create_schedule(w.outputs)
    CL = s.cache_write(w.output)
    BL = s.cache_read("B", [CL])
    io, jo, ii, ji = s["C"].tile("i", "j", 16, 32)
    s["C"].reorder(jo, io)
    s[CL].compute_at(s["C"], io)
    s[BL].compute_at(s["C"], jo)  # B.local is read by C.local, which runs inside jo
    assert s.bounds()["B.local"].region == (64, 32)
    with pytest.raises(TEError, match="outside loop"):
        s[BL].compute_at(s["C"], ii)
    with pytest.raises(TEError, match="no longer possible"):
        s[CL].compute_root()


def test_shared_producer_cannot_be_computed_at_one_consumer():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((8,), lambda i: B[i] * 2.0, name="C")
    D = te.compute((8,), lambda i: B[i] - C[i], name="D")
    s = te.create_schedule(D)
    with pytest.raises(TEError, match="read by C, D"):
        s[B].compute_at(s[C], "i")
    s[C].compute_inline()
    s[B].compute_at(s[D], "i")  # after inlining C, D is B's only consumer
    assert s[B].attach == ("D", "i")


def test_inline_and_cache_write_preconditions():
    w = W.conv2d_nchw(1, 4, 8, 8, 4, 3, 3, 1, 1)
    s = te.create_schedule(w.outputs)
    s["conv"].split("b", 1)
    with pytest.raises(TEError, match="cache_write"):
        s.cache_write("conv")
    with pytest.raises(TEError, match="is a reduction"):
        s2 = te.create_schedule(W.softmax(4, 4).outputs)
        s2["rowmax"].compute_inline()
    s["pad"].compute_inline()
    assert s["pad"].inlined and s.producers("conv") == []
    with pytest.raises(TEError, match="is inlined"):
        s["pad"].split("b", 2)


def test_names_must_be_unique():
    A = te.placeholder((4,), name="X")
    B = te.compute((4,), lambda i: A[i] * 2.0, name="X")
    with pytest.raises(TEError, match="two different tensors are named 'X'"):
        te.create_schedule(B)


def test_steps_round_trip_through_json_and_replay_identically():
    w, s = matmul_schedule()
    CL = s.cache_write(w.output)
    io, jo, ii, ji = s["C"].tile("i", "j", 8, 32)
    s["C"].parallel(s["C"].fuse(io, jo))
    s[CL].compute_at(s["C"], "i.0@j.0")
    s[CL].reorder("k", "i", "j")
    s[CL].unroll("i")
    s[CL].vectorize("j")
    text = json.dumps(s.to_json())
    again = te.Schedule.from_steps(w.outputs, text)
    assert again.steps == s.steps
    assert str(again) == str(s)
    assert te.steps_from_json(json.loads(text)) == list(s.steps)
    with pytest.raises(TEError, match="unknown schedule step"):
        te.steps_from_json([{"step": "teleport"}])


def test_replay_with_mutated_factors_keeps_loop_names():
    w, s = matmul_schedule()
    s.apply([Split("C", "i", (8,)), Annotate("C", "i.0", "parallel")])
    mutated = [Split("C", "i", (5,)), Annotate("C", "i.0", "parallel")]
    s2 = te.Schedule.from_steps(w.outputs, mutated)
    assert s2["C"].loop("i.0").extent == 13 and s2["C"].loop("i.0").annotation == "parallel"


def test_pseudo_code_shows_annotations_allocations_and_guards():
    w = W.matmul(10, 16, 8)
    s = te.create_schedule(w.outputs)
    CL = s.cache_write(w.output)
    io, jo, ii, ji = s["C"].tile("i", "j", 4, 16)
    s["C"].parallel(io)
    s[CL].compute_at(s["C"], jo)
    s[CL].reorder("k", "i", "j")
    s[CL].vectorize("j")
    text = str(s)
    assert "parallel for i.0 in 0..3:" in text
    assert "allocate C.local: float32[4, 16] (local)" in text
    assert "vectorize for j in 0..16:" in text
    assert "C.local[i, j] += A[" in text
    assert "if (((i.0 * 4) + i.1) < 10):" in text or "< 10" in text


def test_loop_nest_info_reports_loops_accesses_and_work():
    w = W.matmul(32, 64, 16)
    s = te.create_schedule(w.outputs)
    jo, ji = s["C"].split("j", 16)
    s["C"].reorder("i", jo, "k", ji)
    s["C"].vectorize(ji)
    info = te.loop_nest_info(s)
    assert [x.role for x in info] == ["init", "update"]
    upd = info[1]
    assert [(lp.name, lp.kind) for lp in upd.loops] == [("i", "serial"), ("j.0", "serial"), ("k", "serial"),
                                                          ("j.1", "vectorize")]
    B = next(a for a in upd.accesses if a.buffer == "B")
    assert B.strides == (0, 16, 64, 1)
    assert B.footprint(upd.loops, 2) == 16 * 16
    assert upd.flops == 2 * 32 * 64 * 16


def test_tails_are_split_off_full_tiles_and_vectorized_tails_shortened():
    from tensortune.te.ir import IfThenElse, loops, walk_stmts
    from tensortune.te.partition import partition_tails
    A = te.placeholder((100,), name="A")
    B = te.compute((100,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B)
    s[B].split("i", 16)
    s[B].vectorize("i.1")
    plain = s.lower()
    assert any(isinstance(x, IfThenElse) for x in walk_stmts(plain.body))
    f = partition_tails(plain)
    assert [(x.loop, x.extent, x.kind) for x in loops(f.body)] == [
        ("i.0", 6, "serial"), ("i.1", 16, "vectorize"), ("i.0", 1, "serial"), ("i.1", 4, "vectorize")]
    assert not any(isinstance(x, IfThenElse) for x in walk_stmts(f.body))


def test_loading_selects_are_cut_out_of_loops_where_their_conditions_are_decided():
    from tensortune.te.expr import Select
    from tensortune.te.ir import Store, loops, walk_stmts
    from tensortune.te.partition import partition_tails
    from tensortune.te.visit import walk
    X = te.placeholder((1, 3, 10, 12), name="X")
    P = W.pad(X, 1, 2)  # (1, 3, 12, 16): one row above and below, two columns each side
    s = te.create_schedule(P)
    s[P].vectorize(s[P].loops[-1])
    f = partition_tails(s.lower())
    # rows: border (1), interior (10), border (1); columns of interior rows: 2, 12, 2
    assert [(x.loop, x.extent) for x in loops(f.body)] == [
        ("b", 1), ("ch", 3), ("y", 1), ("z", 16), ("y", 10), ("z", 2), ("z", 12), ("z", 2), ("y", 1), ("z", 16)]
    assert "pad[b, ch, (y + 1), (z + 2)] = X[b, ch, y, z]" in str(f)  # the interior: a plain copy
    stores = [x for x in walk_stmts(f.body) if isinstance(x, Store)]
    assert len(stores) == 5 and not any(isinstance(e, Select) for st in stores for e in walk(st.value))
