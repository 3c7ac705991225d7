"""Wave-aware matmul tiles (TAIL_SPLIT): the last wave's tiles split along K, run under TRITON_INTERPRET=1.

In the interpreter the GPU holds 4 programs at once, so a 6-tile product runs 4 tiles
whole and splits the last 2; a 3-tile product splits them all. Persistent kernels (4
programs) take the whole tiles and then the shares in turn. The partial tiles are
added by whichever program arrives last, and the counters it resets must serve the
next launch of the same module.
"""

from __future__ import annotations

import importlib.util

import pytest

torch = pytest.importorskip("torch")
if importlib.util.find_spec("triton") is None:
    pytest.skip("triton is not installed", allow_module_level=True)

from tensortune.backends.triton import CodegenError, analyze, generate, sketch  # noqa: E402
from tensortune.backends.triton.check import relative_error  # noqa: E402
from tensortune.te import workloads  # noqa: E402


TILE = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16}
CASES = [
    ("tail-of-2", lambda: workloads.matmul_bias_relu(48, 32, 96, "float16").output,
     {**TILE, "TAIL_SPLIT": 4, "GROUP_M": 2}),
    ("uneven-shares-and-edges", lambda: workloads.matmul(40, 24, 80, "float16").output, {**TILE, "TAIL_SPLIT": 3}),
    ("every-tile-split", lambda: workloads.matmul(48, 16, 64, "float16").output, {**TILE, "TAIL_SPLIT": 2}),
    ("epilogue-halves", lambda: workloads.matmul_bias_relu(48, 64, 64, "float16").output,
     {**TILE, "BLOCK_N": 32, "TAIL_SPLIT": 2, "EPILOGUE_SPLIT": 2}),
    ("tma", lambda: workloads.matmul(48, 32, 64, "float16").output, {**TILE, "TAIL_SPLIT": 4, "TMA": True}),
    ("persistent", lambda: workloads.matmul_bias_relu(80, 16, 64, "float16").output,
     {**TILE, "TAIL_SPLIT": 3, "PERSISTENT": True}),
    ("persistent-tma-grouped", lambda: workloads.matmul(48, 48, 64, "float16").output,
     {**TILE, "TAIL_SPLIT": 2, "PERSISTENT": True, "TMA": True, "GROUP_M": 2}),
    ("bf16", lambda: workloads.matmul(48, 32, 64, "bfloat16").output, {**TILE, "TAIL_SPLIT": 2}),
    ("fp32", lambda: workloads.matmul(48, 32, 64, "float32").output, {**TILE, "TAIL_SPLIT": 2}),
]


@pytest.mark.parametrize("name,make,config", CASES, ids=[c[0] for c in CASES])
def test_tail_split_matches_numpy_interpreter(name, make, config, interpreter, tmp_path):
    err = interpreter.call(relative_error, make(), config, directory=str(tmp_path))
    assert err < 1e-2, f"{name}: relative error {err:.3g}"


def launched_twice(directory):
    """In the interpreter worker: the same module launched twice on new inputs; both results
    right, and the arrival counters back at zero after each launch."""
    import os

    from tensortune.backends.triton import GenOptions
    from tensortune.backends.triton.generate import load

    out = workloads.matmul(48, 32, 64, "float32").output
    src = generate(analyze(out), {**TILE, "TAIL_SPLIT": 3}, GenOptions(interpret=True))
    module = load(src.save(os.path.join(directory, "tail.py")))
    errors, counters = [], []
    for seed in (1, 2):
        g = torch.Generator().manual_seed(seed)
        a, b = torch.randn(48, 64, generator=g), torch.randn(64, 32, generator=g)
        c = torch.full((48, 32), float("nan"))
        module.launch(a, b, c)
        errors.append(float((c - a @ b).abs().max()))
        counters.append(int(module._tail_counters(c, 6).abs().sum()))
    return errors, counters


def test_tail_counters_are_reset_for_the_next_launch(interpreter, tmp_path):
    errors, counters = interpreter.call(launched_twice, str(tmp_path))
    assert max(errors) < 1e-3 and counters == [0, 0]


def test_broken_tail_reduction_is_caught(interpreter, tmp_path):
    """The check sees a tail that adds one partial too few."""
    import dataclasses

    from tensortune.backends.triton.check import source_error
    from tensortune.backends.triton import GenOptions

    out = workloads.matmul(48, 32, 64, "float16").output
    src = generate(analyze(out), {**TILE, "TAIL_SPLIT": 4}, GenOptions(interpret=True))
    assert "tl.static_range(1, 4)" in src.text
    broken = dataclasses.replace(src, text=src.text.replace("tl.static_range(1, 4)", "tl.static_range(1, 3)"))
    assert interpreter.call(source_error, out, broken, directory=str(tmp_path)) > 0.05


def test_tail_split_is_searched_where_the_last_wave_idles():
    sk = sketch(analyze(workloads.matmul(3072, 3072, 3072, "float16").output))
    assert "TAIL_SPLIT" in sk.space.names
    # 288 tiles of 128x256 on 132 SMs: a last wave of 24 (after the stream-K seeds of the same tiles)
    assert any(s["TAIL_SPLIT"] > 1 for s in sk.seeds[:8])
    sample = sk.space.sample(300, seed=0) + list(sk.seeds)
    assert any(c["TAIL_SPLIT"] > 1 for c in sample)
    for c in sample:  # every point of the space is one the generator accepts
        if c["TAIL_SPLIT"] > 1:
            assert c["SPLIT_K"] == 1 and not c["TMA_STORE"]
            assert c["TAIL_SPLIT"] * c["BLOCK_K"] <= 3072
    # no waves to balance: a batched product, a short K, or too few tiles
    for w in (workloads.batch_matmul(4, 1024, 1024, 1024, "float16"), workloads.matmul(3072, 3072, 256, "float16"),
              workloads.matmul(256, 256, 4096, "float16")):
        assert "TAIL_SPLIT" not in sketch(analyze(w.output)).space.names


def test_tail_split_rejects_what_it_cannot_combine():
    plan = analyze(workloads.matmul(64, 64, 64, "float16").output)
    for bad in ({"SPLIT_K": 2}, {"TMA": True, "TMA_STORE": True}):
        with pytest.raises(CodegenError, match="TAIL_SPLIT"):
            generate(plan, {**TILE, "TAIL_SPLIT": 2, **bad})
    with pytest.raises(CodegenError, match="exceeds the 4 steps"):
        generate(plan, {**TILE, "TAIL_SPLIT": 8})
    with pytest.raises(CodegenError, match="without batch"):
        generate(analyze(workloads.batch_matmul(2, 32, 32, 32, "float16").output), {**TILE, "TAIL_SPLIT": 2})
