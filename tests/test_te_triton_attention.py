"""The fused attention kernel under TRITON_INTERPRET=1 on the CPU: every configuration
checked against the NumPy interpreter of the same graph (`te.evaluate`), a kernel
broken by hand caught, and `autoschedule_cuda` end to end against torch's
scaled_dot_product_attention."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("torch")
if importlib.util.find_spec("triton") is None:  # not imported here: Triton decides at import whether it
    pytest.skip("triton is not installed", allow_module_level=True)  # interprets (the kernels run in workers)

from tensortune.backends.triton import analyze, generate  # noqa: E402
from tensortune.backends.triton.check import relative_error, source_error  # noqa: E402
from tensortune.te import workloads as W  # noqa: E402
from test_te_attention import exp_scaled_graph, scaled_q_graph  # noqa: E402

SMALL = {"BLOCK_M": 16, "BLOCK_N": 16}


def attn(b, h, sq, skv, d, **kw):
    return lambda: W.attention(b, h, sq, skv, d, **kw).output


CASES = [
    ("plain-partial-blocks", attn(1, 2, 20, 24, 16), SMALL),
    ("causal", attn(1, 2, 40, 40, 16, causal=True), SMALL),
    ("causal-one-loop-reversed", attn(1, 2, 40, 40, 16, causal=True), {**SMALL, "MASK_SPLIT": False,
                                                                       "REVERSE_M": True}),
    ("causal-fewer-queries", attn(1, 2, 20, 45, 16, causal=True), SMALL),
    ("causal-more-queries", attn(1, 2, 45, 20, 16, causal=True), SMALL),  # rows without keys: zeros
    ("gqa", attn(2, 4, 16, 32, 16, kv_heads=2, causal=True), SMALL),
    ("bool-padding-mask", attn(2, 2, 16, 24, 16, mask="bool", mask_shape=(2, 1, 1, 24)), SMALL),
    ("float-mask-causal", attn(1, 2, 16, 24, 16, mask="float", causal=True), SMALL),
    ("float32", attn(1, 2, 16, 24, 16, dtype="float32", causal=True), SMALL),
    ("head-dims-not-powers-of-two", attn(1, 2, 16, 32, 12, dv=20), SMALL),
    ("blocks-not-dividing", attn(1, 1, 50, 70, 32, causal=True), {"BLOCK_M": 32, "BLOCK_N": 64}),
    ("decode-split-kv", attn(1, 2, 1, 100, 16), {**SMALL, "SPLIT_KV": 3}),
    ("causal-split-kv", attn(1, 2, 20, 60, 16, causal=True), {**SMALL, "SPLIT_KV": 2}),
    ("tma-causal-gqa", attn(2, 4, 40, 40, 16, causal=True, kv_heads=2), {**SMALL, "TMA": True}),
    ("tma-padded-head-dims", attn(1, 2, 20, 24, 24, dv=40), {**SMALL, "TMA": True}),
    ("tma-split-kv-mask", attn(1, 2, 1, 100, 16, mask="bool"), {**SMALL, "TMA": True, "SPLIT_KV": 3}),
    ("ahead-causal-gqa", attn(2, 4, 40, 40, 16, causal=True, kv_heads=2), {**SMALL, "SCORES_AHEAD": True}),
    ("ahead-float-mask-partial-block", attn(2, 2, 16, 40, 16, mask="float"), {**SMALL, "SCORES_AHEAD": True}),
    ("ahead-one-whole-block", attn(1, 2, 16, 20, 16), {**SMALL, "SCORES_AHEAD": True}),
    ("ahead-tma-causal-reversed", attn(1, 2, 48, 48, 16, causal=True), {**SMALL, "SCORES_AHEAD": True, "TMA": True,
                                                                       "REVERSE_M": True}),
    ("ahead-tma-split-kv", attn(1, 2, 1, 100, 16), {**SMALL, "SCORES_AHEAD": True, "TMA": True, "SPLIT_KV": 3}),
    ("scale-on-q-normalised-after", lambda: scaled_q_graph(), SMALL),
    ("scale-in-exponent-added-mask", lambda: exp_scaled_graph(), SMALL),
]


@pytest.mark.parametrize("name,make,config", CASES, ids=[c[0] for c in CASES])
def test_fused_attention_matches_numpy_interpreter(name, make, config, interpreter, tmp_path):
    out = make()
    assert analyze(out).kind == "attention"
    err = interpreter.call(relative_error, out, config, directory=str(tmp_path))
    assert err < 1e-2, f"{name}: relative error {err:.3g}"


def test_bfloat16_storage(interpreter, tmp_path):
    out = W.attention(1, 2, 16, 32, 16, causal=True).output
    err = interpreter.call(relative_error, out, SMALL, half="bfloat16", directory=str(tmp_path))
    assert err < 3e-2


def test_fully_masked_rows_give_zeros_as_torch_does(interpreter, tmp_path):
    w = W.attention(1, 2, 16, 40, 16, mask="bool", mask_shape=(1, 1, 16, 40))
    mask = np.random.default_rng(0).random((1, 1, 16, 40)) < 0.5
    mask[..., [0, 5, 15], :] = False
    mask[..., 7, :] = False
    mask[..., 7, 39] = True  # only the key of the partial last block
    for config in (SMALL, {**SMALL, "SPLIT_KV": 2}):
        err = interpreter.call(relative_error, w.output, config, directory=str(tmp_path), inputs={"mask": mask})
        assert err < 1e-2, config


def test_a_kernel_broken_by_hand_fails_the_check(interpreter, tmp_path):
    out = W.attention(1, 2, 16, 64, 16).output
    src = generate(analyze(out), SMALL)
    assert "acc = acc * alpha[:, None]" in src.text
    good = interpreter.call(source_error, out, src, directory=str(tmp_path))
    broken = src.text.replace("acc = acc * alpha[:, None]", "acc = acc")  # no rescale when the max grows
    bad = interpreter.call(source_error, out, type(src)(broken, src.args, src.dtypes, src.kernels, src.config),
                           directory=str(tmp_path))
    assert good < 1e-2 < bad


def test_causal_kernels_skip_the_blocks_above_the_diagonal():
    text = generate(analyze(W.attention(1, 2, 64, 64, 16, causal=True).output), SMALL).text
    assert "hi = tl.maximum(tl.minimum(tl.minimum((pid_m + 1) * 16, 64) + 0, 64), 0)" in text
    full, masked = text.split("for start in range(full_hi, hi, 16):")
    assert "for start in range(lo, full_hi, 16):" in full and "<= m0" not in full.split("range(lo, full_hi")[1]
    assert "<= m0" in masked


def test_scores_ahead_issue_the_next_product_before_the_softmax():
    text = generate(analyze(W.attention(1, 2, 64, 64, 16).output), {**SMALL, "SCORES_AHEAD": True}).text
    loop = text.split("for start in range(0 + 16, 64, 16):")[1].split("if 64 > 0:")[0]
    assert loop.index("s_nxt = tl.dot(q,") < loop.index("tl.math.exp2") < loop.index("s_cur = s_nxt")
    assert "v_row" not in loop and "prev = start - 16" in loop  # the values of the block whose scores are done
    assert text.count("tl.dot(q,") == 2  # the first block before the loop, the next one in it


SCRIPT = textwrap.dedent("""
    import json, sys
    import torch
    import torch.nn.functional as F
    from tensortune.db import Database
    from tensortune.te import workloads
    from tensortune.backends.triton import autoschedule_cuda

    def main():
        db_path, cache = sys.argv[1:3]
        w = workloads.attention(1, 4, 16, 24, 16, "float16", causal=True, kv_heads=2, mask="bool",
                                mask_shape=(1, 1, 16, 24))
        kernel = autoschedule_cuda(w, budget=4, db=db_path, cache_dir=cache, progress=False)
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(s, generator=g).half() for s in ((1, 4, 16, 16), (1, 2, 24, 16), (1, 2, 24, 16)))
        mask = torch.rand((1, 1, 16, 24), generator=g) < 0.8
        mask[..., 3, :] = False
        given = {"q": q, "k": k, "v": v, "mask": mask}
        got = kernel(*(given[n] for n in kernel.input_names)).float()
        keep = mask & torch.ones(16, 24, dtype=torch.bool).tril(24 - 16)
        want = F.scaled_dot_product_attention(q.float(), k.float().repeat_interleave(2, 1),
                                              v.float().repeat_interleave(2, 1), attn_mask=keep)
        db = Database(db_path)
        records = sum(len(db.records(wl)) for wl, _, _ in db.workloads())
        print(json.dumps({"source": kernel.tuning.source, "trials": kernel.tuning.trials, "records": records,
                          "kind": kernel.plan.kind, "err": float((got - want).abs().max() / want.abs().max()),
                          "row3": float(got[0, :, 3].abs().max()), "config": dict(kernel.config)}))

    if __name__ == "__main__":
        main()
""")


def test_autoschedule_cuda_tunes_attention_end_to_end(tmp_path):
    script = tmp_path / "run_attention.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, TRITON_INTERPRET="1", TENSORTUNE_PROGRESS="0")
    args = [sys.executable, str(script), str(tmp_path / "records.db"), str(tmp_path / "cache")]
    runs = []
    for _ in range(2):
        proc = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["kind"] == "attention" and first["source"] == "search" and first["trials"] == 4
    assert first["records"] == 4 and first["err"] < 1e-2 and first["row3"] == 0.0
    assert second["source"] == "database" and second["records"] == 4 and second["config"] == first["config"]
    assert second["err"] < 1e-2
