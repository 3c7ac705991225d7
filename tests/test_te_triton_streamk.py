"""Stream-K matmuls (STREAM_K): the last tiles' K steps shared out over every program, under TRITON_INTERPRET=1.

In the interpreter the GPU has 4 multiprocessors (`_num_sms` of a CPU tensor), so with
`SK_PER_SM` the kernel runs 4 or 8 programs. Programs run one after the other there,
which is the order in which every arrival protocol must still finish: a program that
waited for a later one would hang the test. Each case states how its tiles are split
(`streamk.plan_sizes` and `split_of` below), so a case that stops exercising what it
names fails instead of passing vacuously.
"""

from __future__ import annotations

import importlib.util

import pytest

torch = pytest.importorskip("torch")
if importlib.util.find_spec("triton") is None:
    pytest.skip("triton is not installed", allow_module_level=True)

from tensortune.backends.triton import CodegenError, GenOptions, analyze, generate, sketch  # noqa: E402
from tensortune.backends.triton import streamk  # noqa: E402
from tensortune.backends.triton.check import relative_error, source_error  # noqa: E402
from tensortune.te import workloads  # noqa: E402

TILE = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "PERSISTENT": True}
SMS = 4  # what the generated module counts for CPU tensors


def split_of(m: int, n: int, k: int, config: dict) -> dict:
    """How the kernel divides an (m, n, k) product: whole tiles, stream-K tiles, and for each
    stream-K tile the programs sharing it (the same arithmetic as the generated kernel)."""
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    tiles, iters = -(-m // bm) * -(-n // bn), -(-k // bk)
    dp, sk, programs = streamk.plan_sizes(tiles, iters, SMS * config.get("SK_PER_SM", 1), config["STREAM_K"])
    total = sk * iters
    starts = [p * total // programs for p in range(programs + 1)]
    parts = [sum(1 for p in range(programs) if starts[p] < (t + 1) * iters and starts[p + 1] > t * iters)
             for t in range(sk)]
    partial_per_program = [sum(1 for t in range(sk) if parts[t] > 1 and starts[p] < (t + 1) * iters
                               and starts[p + 1] > t * iters) for p in range(programs)]
    return {"dp": dp, "sk": sk, "parts": parts, "most_partial_in_a_program": max(partial_per_program, default=0)}


# (name, (m, n, k), epilogue, dtype, config, what the split must show)
CASES = [
    ("remainder-only", (48, 32, 96), "bias_relu", "float16", {**TILE, "STREAM_K": 1, "GROUP_M": 2},
     lambda s: s["dp"] == 4 and s["sk"] == 2 and max(s["parts"]) == 2),
    ("two-tile-hybrid", (80, 48, 96), "bias_relu", "float16", {**TILE, "STREAM_K": 2},
     lambda s: s["dp"] == 8 and s["sk"] == 7 and max(s["parts"]) == 2),
    ("two-partial-tiles-per-program", (112, 16, 80), "none", "float16", {**TILE, "STREAM_K": 2},
     lambda s: s["dp"] == 0 and s["most_partial_in_a_program"] == 2),
    ("three-parts-a-tile", (48, 16, 80), "none", "float16", {**TILE, "STREAM_K": 1, "SK_PER_SM": 2},
     lambda s: s["parts"] == [3, 3, 3]),
    ("k-tail-and-edges", (40, 40, 88), "bias_relu", "float16", {**TILE, "STREAM_K": 1},
     lambda s: s["sk"] == 1 and max(s["parts"]) == 4),
    ("epilogue-halves", (48, 64, 64), "bias_relu", "float16",
     {**TILE, "BLOCK_N": 32, "STREAM_K": 2, "EPILOGUE_SPLIT": 2}, lambda s: max(s["parts"]) == 2),
    ("tma", (48, 32, 64), "none", "float16", {**TILE, "STREAM_K": 1, "TMA": True, "GROUP_M": 2},
     lambda s: max(s["parts"]) == 2),
    ("tma-store", (80, 48, 64), "none", "float16",
     {**TILE, "BLOCK_N": 32, "STREAM_K": 2, "TMA": True, "TMA_STORE": True, "EPILOGUE_SPLIT": 2},
     lambda s: max(s["parts"]) >= 2),
    ("bf16", (48, 32, 64), "bias_relu", "bfloat16", {**TILE, "STREAM_K": 1}, lambda s: max(s["parts"]) == 2),
    ("fp32", (48, 32, 96), "none", "float32", {**TILE, "STREAM_K": 2, "SK_PER_SM": 2},
     lambda s: max(s["parts"]) >= 2),
]


def _graph(shape, epilogue, dtype):
    m, n, k = shape
    if epilogue == "bias_relu":
        return workloads.matmul_bias_relu(m, n, k, dtype).output
    return workloads.matmul(m, n, k, dtype).output


@pytest.mark.parametrize("name,shape,epilogue,dtype,config,expect", CASES, ids=[c[0] for c in CASES])
def test_stream_k_matches_numpy_interpreter(name, shape, epilogue, dtype, config, expect, interpreter, tmp_path):
    split = split_of(*shape, config)
    assert expect(split), f"{name}: the case no longer splits its tiles as it says: {split}"
    src = generate(analyze(_graph(shape, epilogue, dtype)), config, GenOptions(interpret=True))
    assert "while sk_at < sk_end:" in src.text and "tl.atomic_add(p_scnt" in src.text
    err = interpreter.call(relative_error, _graph(shape, epilogue, dtype), config, directory=str(tmp_path))
    assert err < (3e-2 if dtype == "bfloat16" else 1e-2), f"{name}: relative error {err:.3g}"


def launched_twice(directory):
    """In the interpreter worker: one module launched twice on new inputs; both results right,
    the counters back at zero after each launch."""
    import os

    from tensortune.backends.triton.generate import load

    out = workloads.matmul(48, 16, 80, "float32").output  # three programs a tile
    src = generate(analyze(out), {**TILE, "STREAM_K": 1, "SK_PER_SM": 2}, GenOptions(interpret=True))
    module = load(src.save(os.path.join(directory, "streamk.py")))
    errors, counters = [], []
    for seed in (1, 2):
        g = torch.Generator().manual_seed(seed)
        a, b = torch.randn(48, 80, generator=g), torch.randn(80, 16, generator=g)
        c = torch.full((48, 16), float("nan"))
        module.launch(a, b, c)
        errors.append(float((c - a @ b).abs().max()))
        counters.append(int(module._tail_counters(c, 12).abs().sum()))
    return errors, counters


def test_stream_k_counters_are_reset_for_the_next_launch(interpreter, tmp_path):
    errors, counters = interpreter.call(launched_twice, str(tmp_path))
    assert max(errors) < 1e-3 and counters == [0, 0]


@pytest.mark.parametrize("shape,config,piece,broken", [
    # two parts: the last arrival does not add the other program's partial tile
    ((48, 32, 96), {**TILE, "STREAM_K": 1}, "            acc += tl.load(p_sws", "            acc -= tl.load(p_sws"),
    # three or more: one part left out of the ordered sum
    ((48, 16, 80), {**TILE, "STREAM_K": 1, "SK_PER_SM": 2}, "range(lo + 1, owner_hi.to(tl.int32) + 1)",
     "range(lo + 2, owner_hi.to(tl.int32) + 1)"),
    # the last arrival leaves the tile to someone else: nobody writes it
    ((48, 32, 96), {**TILE, "STREAM_K": 2}, "done = ticket >= 0", "done = ticket < 0"),
], ids=["partial-not-added", "part-missing", "tile-never-finished"])
def test_broken_fixup_is_caught(shape, config, piece, broken, interpreter, tmp_path):
    import dataclasses

    out = workloads.matmul(*shape, "float16").output
    src = generate(analyze(out), config, GenOptions(interpret=True))
    assert piece in src.text
    bad = dataclasses.replace(src, text=src.text.replace(piece, broken))
    assert interpreter.call(source_error, out, bad, directory=str(tmp_path)) > 0.05


def test_plan_sizes_balance_the_waves():
    # 3072^3 in 128x256 tiles, 48 K steps each, on 132 programs
    assert streamk.plan_sizes(288, 48, 132, 1) == (264, 24, 132)
    assert streamk.plan_sizes(288, 48, 132, 2) == (132, 156, 132)
    assert streamk.plan_sizes(264, 48, 132, 2) == (264, 0, 132)  # whole waves: nothing to share
    assert streamk.plan_sizes(32, 16, 132, 2) == (0, 32, 132)  # under one wave: every tile shared
    assert streamk.plan_sizes(2, 3, 132, 1) == (0, 2, 6)  # fewer K steps than programs
    assert streamk.last_wave_fill(288, 132) == pytest.approx(24 / 132)


def test_stream_k_is_searched_and_seeded_where_the_last_wave_idles(monkeypatch):
    from tensortune.backends.triton import sketches

    assert not any(s.get("STREAM_K") for s in sketch(analyze(workloads.matmul(3072, 3072, 3072, "float16").output)).seeds)
    monkeypatch.setattr(sketches, "SEED_STREAM_K", True)  # measured slower on the H100: searched, not seeded
    sk = sketch(analyze(workloads.matmul(3072, 3072, 3072, "float16").output))
    assert {"STREAM_K", "SK_PER_SM"} <= set(sk.space.names)
    seeded = [s for s in sk.seeds[:5] if s["STREAM_K"] > 0]
    assert {s["STREAM_K"] for s in seeded} == {1, 2} and all(s["PERSISTENT"] and s["TMA"] for s in seeded)
    sample = [c for c in sk.space.sample(400, seed=0) if c["STREAM_K"] > 0] + seeded
    assert len(sample) > 20
    plan = analyze(workloads.matmul(3072, 3072, 3072, "float16").output)
    for c in sample:  # every stream-K point of the space is one the generator accepts
        assert c["PERSISTENT"] and c["SPLIT_K"] == 1 and c["TAIL_SPLIT"] == 1
        assert c["EPILOGUE_SPLIT"] == 2 or c["BLOCK_M"] * c["BLOCK_N"] <= c["num_warps"] * 32 * 64
        generate(plan, c, GenOptions())
    # whole last waves, a batched product, a K of a few steps: nothing to balance
    for w in (workloads.matmul(4096, 4096, 4096, "float16"), workloads.batch_matmul(4, 1024, 1024, 1024, "float16"),
              workloads.matmul(3072, 3072, 128, "float16")):
        assert "STREAM_K" not in sketch(analyze(w.output)).space.names
    # offered but not seeded where the idle slots are a small share of many waves
    short_k = sketch(analyze(workloads.matmul(8192, 8192, 256, "float16").output))
    assert "STREAM_K" in short_k.space.names and not any(s["STREAM_K"] for s in short_k.seeds)


def test_stream_k_rejects_what_it_cannot_combine():
    plan = analyze(workloads.matmul(64, 64, 64, "float16").output)
    for bad in ({"PERSISTENT": False}, {"SPLIT_K": 2}, {"TAIL_SPLIT": 2}):
        with pytest.raises(CodegenError, match="STREAM_K|PERSISTENT"):
            generate(plan, {**TILE, "STREAM_K": 1, **bad})
    with pytest.raises(CodegenError, match="STREAM_K=3"):
        generate(plan, {**TILE, "STREAM_K": 3})
    with pytest.raises(CodegenError, match="without batch"):
        generate(analyze(workloads.batch_matmul(2, 32, 32, 32, "float16").output), {**TILE, "STREAM_K": 1})


def test_search_checks_stream_k_candidates(tmp_path):
    """Through the GPU search's own builder, runner and reference check (fresh random inputs, the
    float32 torch reference): stream-K candidates measured and correct."""
    from tensortune.backends.triton.sketches import Sketch
    from tensortune.backends.triton.tune import CudaSearch

    out = workloads.matmul_bias_relu(48, 32, 256, "float16").output
    search = CudaSearch(out, db=str(tmp_path / "db.sqlite"), progress=False, cache_dir=str(tmp_path / "k"), jobs=1)
    try:
        space = search.sketch.space
        assert "STREAM_K" in space.names  # 48x32 on 132 SMs: one tile, a last wave nearly empty
        first = dict(search.sketch.seeds[0])
        small = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "PERSISTENT": True, "TMA": False, "TMA_STORE": False,
                 "EPILOGUE_SPLIT": 1, "SPLIT_K": 1, "num_warps": 2, "num_stages": 2}
        configs = [space.config({**first, **small, "STREAM_K": w, "SK_PER_SM": per_sm})
                   for w, per_sm in ((1, 1), (2, 2))]
        search.sketch = Sketch(search.plan, space, tuple(configs))
        results = search.tune(2)
    finally:
        search.close()
    assert [r.config["STREAM_K"] for r in results] == [1, 2]
    assert all(r.ok for r in results), [r.message for r in results]


@pytest.mark.slow
def test_seeded_stream_k_kernel_compiles_for_sm90_without_spilling(tmp_path, monkeypatch):
    """The first stream-K seed of 3072^3 compiled for the H100 (sm_90) here, without a GPU: no
    local memory (a stack means spilled registers, which made the one-piece epilogue slow)."""
    import glob
    import os
    import re
    import subprocess

    import triton

    from tensortune.backends.triton.runtime import GeneratedBuilder, Generator
    from tensortune.space import Config

    from tensortune.backends.triton import sketches

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(sketches, "SEED_STREAM_K", True)
    plan = analyze(workloads.matmul(3072, 3072, 3072, "float16").output)
    seed = next(s for s in sketch(plan).seeds if s["STREAM_K"] > 0)
    generator = Generator(plan, GenOptions(), str(tmp_path / "kernels"), "sk")
    cache = tmp_path / "cache"
    builder = GeneratedBuilder(generator, target=("cuda", 90, 32), jobs=1, max_shared=232448,
                               env={"TRITON_CACHE_DIR": str(cache)})
    try:
        (result,) = list(builder.build([Config(dict(seed))]))
    finally:
        builder.close()
    assert result.ok, result.message
    cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    (cubin,) = glob.glob(str(cache / "*" / "tt_contraction.cubin"))
    usage = subprocess.run([cuobjdump, "-res-usage", cubin], capture_output=True, text=True, check=True).stdout
    stack = re.search(r"STACK:(\d+)", usage)
    assert stack is not None and int(stack.group(1)) == 0, usage


def test_a_fixup_that_never_sees_its_parts_gives_nan_not_a_hang(interpreter, tmp_path):
    """Were a part never counted ready, the last arrival stops polling after SPIN_LIMIT polls
    (here cut to 8) and writes the tile as NaN, which the check reports, instead of hanging."""
    import dataclasses

    out = workloads.matmul(48, 32, 96, "float16").output
    src = generate(analyze(out), {**TILE, "STREAM_K": 1}, GenOptions(interpret=True))
    signal = '                tl.atomic_add(p_scnt + 2 * st + 1, 1, sem="release")\n'
    assert signal in src.text and str(streamk.SPIN_LIMIT) in src.text
    text = src.text.replace(signal, "").replace(str(streamk.SPIN_LIMIT), "8")
    err = interpreter.call(source_error, out, dataclasses.replace(src, text=text), directory=str(tmp_path))
    assert err == float("inf")


def test_stream_k_steps_a_convolution_window(interpreter, tmp_path):
    """An implicit-GEMM convolution: K is 9 window positions of one channel block each, and the
    shared ranges start and stop in the middle of the window."""
    out = workloads.conv2d_nchw(2, 16, 8, 8, 16, 3, 3, 1, 1, "float16").output
    plan = analyze(out)
    config = {**TILE, "BLOCK_N": 64, "STREAM_K": 1}
    assert plan.sizes == (1, 16, 128, 144) and len(plan.window) == 2
    dp, sk, programs = streamk.plan_sizes(2, 9, SMS, 1)  # 1 x 2 tiles of 9 steps on 4 programs
    assert (dp, sk, programs) == (0, 2, 4)
    assert "while sk_at < sk_end:" in generate(plan, config, GenOptions(interpret=True)).text
    assert interpreter.call(relative_error, out, config, directory=str(tmp_path)) < 1e-2
