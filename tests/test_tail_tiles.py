"""Tiles that do not divide their loop: full tiles without guards, the tail tile with
constant extents, in loops fused into one parallel loop (where no prefix of the loop can
be proved full), and every kernel of such tiles checked against NumPy on prime extents."""

from __future__ import annotations

import numpy as np
import pytest

from tensortune import te
from tensortune.autoschedule import SketchSpace
from tensortune.autoschedule.apply import apply_config
from tensortune.autoschedule.seeds import register_tile_seeds
from tensortune.measure import check_close
from tensortune.te import workloads as W
from tensortune.te.build import reference_outputs
from tensortune.te.expr import Not
from tensortune.te.ir import For, IfThenElse, loops, walk_stmts
from tensortune.te.partition import partition_tails

PRIME = (41, 83, 29)  # M, N, K: every tile of rows or vectors leaves a tail


def guarded_vector_loops(stmt) -> list[For]:
    return [x for x in loops(stmt)
            if x.kind == "vectorize" and any(isinstance(y, IfThenElse) for y in walk_stmts(x.body))]


def test_a_fused_parallel_loop_over_tiles_runs_full_tiles_unguarded_and_tails_with_constant_extents():
    A = te.placeholder((37, 50), name="A")
    B = te.compute((37, 50), lambda i, j: A[i, j] * 2.0, name="B")
    s = te.create_schedule(B)
    io, ii = s[B].split("i", 8)
    jo, ji = s[B].split("j", 16)
    s[B].reorder(io, jo, ii, ji)
    s[B].parallel(s[B].fuse(io, jo))
    s[B].vectorize(ji)
    plain = s.lower()
    assert guarded_vector_loops(plain.body)  # the tails' guards sit in the vector loop
    f = partition_tails(plain)
    (outer,) = [x for x in loops(f.body) if x.kind == "parallel"]
    versions = [x for x in walk_stmts(outer.body) if isinstance(x, IfThenElse) and not isinstance(x.cond, Not)]
    assert versions  # full tiles chosen per iteration of the parallel loop
    assert not guarded_vector_loops(f.body)  # no version tests a guard inside its vector loop
    # full tiles 8 x 16; the last row of tiles 5 (37 = 4 * 8 + 5) and the last column 2 (50 = 3 * 16 + 2)
    assert {x.extent for x in loops(f.body) if x.kind == "vectorize"} == {16, 2}
    assert {x.extent for x in loops(f.body) if x.loop == "i.1"} == {8, 5}
    a = np.random.default_rng(0).standard_normal((37, 50)).astype("float32")
    np.testing.assert_array_equal(te.build(s, [A, B])(a), a * 2.0)


def _inputs(w, seed):
    rng = np.random.default_rng(seed)
    return {t.name: rng.standard_normal(t.shape).astype("float32") for t in w.inputs}


@pytest.mark.parametrize("layout", ["NN", "NT", "TN"])
def test_register_tiles_that_leave_tails_compute_the_matmul_on_prime_extents(layout):
    w = W.matmul(*PRIME, layout=layout)
    sp = SketchSpace.of(w.outputs)
    seeds = register_tile_seeds(sp)
    tails = [c for c in seeds if PRIME[1] % c["C_tile_j"][-1] and PRIME[0] % c["C_tile_i"][-1]]
    assert tails  # the seeds take whole vectors and a few rows, neither dividing a prime
    rng = np.random.default_rng(3)
    randoms = [sp.canonical(c) for c in sp.space.sample(60, rng)][:6]
    for n, cfg in enumerate(seeds + randoms):
        inputs = _inputs(w, n)  # fresh inputs for every kernel
        a = inputs["A"].T if layout[0] == "T" else inputs["A"]
        b = inputs["B"].T if layout[1] == "T" else inputs["B"]
        kernel = te.build(apply_config(sp, cfg), list(w.args))
        check_close(kernel(inputs["A"], inputs["B"]), a @ b, 1e-3, 1e-3)
    # a packed register tile of whole vectors: no guard left inside a vector loop
    packed = next(c for c in tails if c["sketch"] != "C:tile")
    assert not guarded_vector_loops(partition_tails(apply_config(sp, packed).lower()).body)


def test_a_fused_epilogue_over_tail_tiles_computes_the_linear_layer():
    m, n, k = PRIME
    x, wt, bias = te.placeholder((m, k), name="x"), te.placeholder((n, k), name="w"), te.placeholder((n,), name="bias")
    r = te.reduce_axis(k, "r")
    C = te.compute((m, n), lambda i, j: te.sum(x[i, r] * wt[j, r], axis=r), name="C")
    D = te.compute((m, n), lambda i, j: te.maximum(C[i, j] + bias[j], 0.0), name="D")
    sp = SketchSpace.of(D)
    assert "C:tile_local(pack)>D,D:tile_consumer<C" in sp.sketches
    for n_, cfg in enumerate(register_tile_seeds(sp)):
        rng = np.random.default_rng(10 + n_)
        shapes = {"x": (m, k), "w": (n, k), "bias": (n,)}
        inputs = {name: rng.standard_normal(shape).astype("float32") for name, shape in shapes.items()}
        want = reference_outputs([D], **inputs)["D"]
        got = te.build(apply_config(sp, cfg), [x, wt, bias, D])(inputs["x"], inputs["w"], inputs["bias"])
        check_close(got, want, 1e-3, 1e-3)


def test_seeds_take_whole_vectors_rather_than_a_partial_divisor():
    sp = SketchSpace.of(W.matmul(128, 688, 256, layout="NT").outputs)  # 688 = 16 x 43
    widths = {c["C_tile_j"][-1] for c in register_tile_seeds(sp)}
    assert widths and all(v % 16 == 0 for v in widths) and 43 not in widths


@pytest.mark.parametrize("op", ["lt", "le", "gt", "ge"])
@pytest.mark.parametrize("coef", [32, -32])
def test_the_tail_tiles_index_is_pinned_only_when_failing_the_condition_leaves_one_value(op, coef):
    from tensortune.te.affine import Affine
    from tensortune.te.expr import Binary, Var, const
    from tensortune.te.partition import _pinned
    f = Var("f")
    atom = Binary("mod", f, const(22))  # a tile index in 0..21
    ranges = {f: (0, 483)}
    holds = {"lt": lambda x: x < 0, "le": lambda x: x <= 0, "gt": lambda x: x > 0, "ge": lambda x: x >= 0}[op]
    for offset in range(-800, 800, 7):
        failing = [a for a in range(22) if not holds(coef * a + offset)]
        got = _pinned(op, Affine(((atom, coef),), offset), ranges)
        assert got == ((atom, failing[0]) if len(failing) == 1 else None), (offset, failing)
