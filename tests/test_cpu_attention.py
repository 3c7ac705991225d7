"""Fused attention on the CPU: the generated C kernel, its tuning, and the partition that keeps it whole."""

from __future__ import annotations

import numpy as np
import pytest

from tensortune import te
from tensortune.autoschedule.attention import (AttentionBuilder, AttentionKernel, AttentionProblem,
                                               AttentionSession)
from tensortune.backends.c_attention import AttentionCodegenError, check_config, generate_attention_c
from tensortune.backends.c_codegen import FLAGS
from tensortune.backends.c_compiler import CCompiler, load_function
from tensortune.backends.triton.patterns import analyze
from tensortune.db import Database, Target
from tensortune.measure import ErrorKind, Timer
from tensortune.te import workloads as W

FAST = Timer(warmup_seconds=0, min_repeats=2, max_repeats=3, budget_seconds=0)

# name: (b, h, sq, skv, d), options; lengths no block size divides
CASES = {
    "causal-gqa": ((2, 4, 37, 37, 16), {"causal": True, "kv_heads": 2}),
    "causal-fewer-queries": ((1, 2, 19, 45, 8), {"causal": True}),
    "causal-more-queries": ((1, 2, 45, 19, 8), {"causal": True}),  # the first rows see no key: zeros
    "float-mask": ((2, 3, 21, 50, 8), {"mask": "float", "mask_shape": (2, 1, 1, 50)}),
    "bool-mask": ((2, 2, 17, 33, 8), {"mask": "bool", "mask_shape": (2, 1, 17, 33)}),
    "bool-mask-causal": ((1, 2, 29, 29, 16), {"mask": "bool", "causal": True}),
    "value-width": ((1, 2, 20, 30, 8), {"dv": 24}),
    "decode-step": ((2, 4, 1, 77, 16), {"causal": True, "kv_heads": 2}),  # one query over a cache
}
CONFIGS = [{"BLOCK_M": 8, "BLOCK_N": 16, "ROWS": 4}, {"BLOCK_M": 13, "BLOCK_N": 40, "ROWS": 6},
           {"BLOCK_M": 64, "BLOCK_N": 1024, "ROWS": 8}, {"BLOCK_M": 1, "BLOCK_N": 32, "ROWS": 1}]


def _inputs(w, rng, masked_row=None):
    out = {}
    for t in w.inputs:
        if t.dtype == "bool":
            out[t.name] = rng.random(t.shape) < 0.6
            if masked_row is not None:
                out[t.name][..., masked_row, :] = False  # a query that keeps no key: zeros
        else:
            out[t.name] = rng.standard_normal(t.shape).astype(np.float32)
    return out


def _compiled(w, config):
    plan = analyze(w.output)
    args = list(w.inputs) + [w.output]
    lib = CCompiler().compile(generate_attention_c(plan, config, args), {}, FLAGS)
    fn = load_function(lib, "kernel", [f"{t.dtype}*" for t in args], restype="int")

    def call(arrays):
        out = np.full(w.output.shape, np.nan, np.float32)  # every element must be written
        assert fn(*[arrays[t.name].ctypes.data for t in w.inputs], out.ctypes.data) == 0
        return out
    return call


@pytest.mark.parametrize("name", list(CASES))
def test_the_fused_kernel_computes_what_the_stages_compute(name):
    shape, options = CASES[name]
    w = W.attention(*shape, "float32", **options)
    rng = np.random.default_rng(1)
    for config in CONFIGS:
        arrays = _inputs(w, rng, masked_row=3)
        got = _compiled(w, config)(arrays)
        want = te.evaluate(w.output, arrays)
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5, err_msg=f"{name} {config}")


def test_bfloat16_attention_is_read_rounded_and_written_as_the_stages_say():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    w = W.attention(1, 2, 19, 37, 16, "bfloat16", causal=True, kv_heads=1)
    rng = np.random.default_rng(3)
    arrays = {t.name: rng.standard_normal(t.shape).astype(ml_dtypes.bfloat16) for t in w.inputs}
    plan = analyze(w.output)
    assert plan.p_dtype == "bfloat16"  # the weights are rounded before they multiply the values
    args = list(w.inputs) + [w.output]
    lib = CCompiler().compile(generate_attention_c(plan, {"BLOCK_M": 8, "BLOCK_N": 16}, args), {}, FLAGS)
    fn = load_function(lib, "kernel", [f"{t.dtype}*" for t in args], restype="int")
    out = np.zeros(w.output.shape, ml_dtypes.bfloat16)
    assert fn(*[arrays[t.name].ctypes.data for t in w.inputs], out.ctypes.data) == 0
    want = te.evaluate(w.output, arrays).astype(np.float32)
    np.testing.assert_allclose(out.astype(np.float32), want, rtol=2e-2, atol=2e-2)


def test_the_fused_kernel_matches_torch_sdpa():
    torch = pytest.importorskip("torch")
    w = W.attention(2, 4, 33, 33, 16, "float32", causal=True, kv_heads=2, mask="float", mask_shape=(2, 1, 1, 33))
    arrays = _inputs(w, np.random.default_rng(2))
    got = _compiled(w, {"BLOCK_M": 16, "BLOCK_N": 16, "ROWS": 8})(arrays)
    q, k, v, m = (torch.from_numpy(arrays[n]) for n in ("q", "k", "v", "mask"))
    k, v = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    causal = torch.ones(33, 33, dtype=torch.bool).tril()
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m.masked_fill(~causal, -torch.inf))
    np.testing.assert_allclose(got, want.numpy(), rtol=2e-5, atol=2e-5)


def test_configurations_the_kernel_cannot_take_are_named():
    plan = analyze(W.attention(1, 2, 16, 16, 8, "float32").output)
    with pytest.raises(AttentionCodegenError, match="ROWS=3 must be one of"):
        check_config(plan, {"ROWS": 3})
    with pytest.raises(AttentionCodegenError, match="BLOCK_M=0 must be an integer"):
        check_config(plan, {"BLOCK_M": 0})
    with pytest.raises(AttentionCodegenError, match="unknown attention parameter"):
        check_config(plan, {"BLOCK_K": 16})
    big = analyze(W.attention(1, 1, 64, 4096, 256, "float32").output)
    with pytest.raises(AttentionCodegenError, match="bytes of tiles per thread"):
        check_config(big, {"BLOCK_M": 64, "BLOCK_N": 4096})
    with pytest.raises(AttentionCodegenError, match="float16"):
        generate_attention_c(analyze(W.attention(1, 2, 8, 8, 8, "float16").output), {})


class _WrongForFourRows(AttentionBuilder):
    """Builds a kernel that forgets the running sum's rescaling when ROWS is 4."""

    def schedule_source(self, config):
        steps, src = super().schedule_source(config)
        if config["ROWS"] == 4:
            src = src.replace("lrow[i] = lrow[i] * alpha + sum;", "lrow[i] = lrow[i] + sum;")
        return steps, src


def test_tuning_checks_every_candidate_and_a_wrong_one_is_its_own_failure(tmp_path):
    from tensortune.frontends.callable import open_db
    w = W.attention(1, 2, 40, 100, 8, "float32", causal=True)
    problem = AttentionProblem.of(w.output)
    session = AttentionSession(problem, open_db(str(tmp_path / "r.db")), Target.cpu(), seed=0, timer=FAST)
    session.builder = session.tuner.builder = _WrongForFourRows(problem, jobs=2)
    results = session.tune(12)
    several_blocks = [r for r in results if r.config["BLOCK_N"] < 100]  # one block: no rescaling to forget
    wrong = [r for r in several_blocks if r.config["ROWS"] == 4]
    assert wrong and all(r.error == ErrorKind.WRONG_RESULT for r in wrong), [(dict(r.config), r.error) for r in results]
    assert all(r.ok for r in results if r.config["ROWS"] != 4)
    kernel = session.finish(confirm=2, rounds=2)
    assert kernel.config["ROWS"] != 4 or kernel.config["BLOCK_N"] >= 100
    arrays = _inputs(w, np.random.default_rng(5))
    np.testing.assert_allclose(kernel(arrays["q"], arrays["k"], arrays["v"]), te.evaluate(w.output, arrays),
                               rtol=2e-5, atol=2e-5)


def test_te_autoschedule_gives_one_fused_kernel_and_rebuilds_it_from_the_records(tmp_path):
    w = W.attention(2, 2, 24, 24, 8, "float32", causal=True, mask="float", mask_shape=(2, 1, 1, 24))
    db = tmp_path / "r.db"
    kernel = te.autoschedule(w, target="cpu", budget=5, db=db, progress=False, timer=FAST, confirm=2,
                             confirm_rounds=2)
    assert isinstance(kernel, AttentionKernel) and kernel.trials == 5 and not kernel.from_db
    assert kernel.source.count("int kernel(") == 1
    [confirmed] = [r for r in Database(db).records(kernel.workload, Target.cpu()) if r.strategy == "confirm"]
    assert confirmed.config == kernel.config and confirmed.time == kernel.time
    assert confirmed.extra["confirmed"] and confirmed.extra["rounds"] == 2 and "margin" not in confirmed.extra
    again = te.autoschedule(w, target="cpu", budget=5, db=db, progress=False)
    assert again.from_db and again.trials == 0 and again.config == kernel.config
    arrays = _inputs(w, np.random.default_rng(6))
    got = again(*[arrays[t.name] for t in w.inputs])
    np.testing.assert_allclose(got, te.evaluate(w.output, arrays), rtol=2e-5, atol=2e-5)


def test_graphs_that_are_not_attention_are_not_taken():
    from tensortune.autoschedule.attention import fused_attention_problem
    assert fused_attention_problem(W.matmul(16, 16, 16)) is None
    assert fused_attention_problem(W.attention(1, 2, 8, 8, 8, "float16")) is None  # no float16 C kernel
    with pytest.raises(AttentionCodegenError, match="not attention"):
        AttentionProblem.of(W.matmul(16, 16, 16).outputs[0])


# -- the CPU partition -------------------------------------------------------------------------------------------

def _small_models():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    llama = transformers.LlamaModel(transformers.LlamaConfig(
        num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=64, use_cache=False)).eval()
    bert = transformers.BertModel(transformers.BertConfig(num_hidden_layers=2, hidden_size=32, intermediate_size=64,
                                                          num_attention_heads=2, vocab_size=64)).eval()
    return {"llama": (llama, lambda: [torch.randint(0, 64, (1, 8))]),
            "bert": (bert, lambda: [torch.randint(0, 64, (2, 8)), torch.tensor([[1] * 8, [1] * 5 + [0] * 3])])}


def _attention_kernels(model, inputs, target):
    from tensortune.graph.capture import capture
    from tensortune.graph.compiler import lower_graph
    from tensortune.graph.partition import default_partition
    found = []
    for captured in capture(model, inputs):
        g = lower_graph(captured)
        for prologues in (True, False):
            partition = default_partition(g, target.legal, multi_anchor=target.multi_anchor, prologues=prologues)
            for spec in partition.kernels(g):
                ops = {g.nodes[i].op for i in spec.nodes}
                if any(op.startswith("attention.") for op in ops):
                    assert target.legal(g, frozenset(spec.nodes))
                    found.append(sorted(op for op in ops if op.startswith("attention.")))
    return found


@pytest.mark.parametrize("name", ["llama", "bert"])
def test_the_cpu_partition_keeps_each_attention_as_one_kernel(name):
    from tensortune.graph.targets import CpuTarget
    torch = pytest.importorskip("torch")
    torch._dynamo.reset()
    model, make = _small_models()[name]
    stages = sorted(["attention.scores", "attention.logits", "attention.max", "attention.exp", "attention.sum",
                     "attention.probs", "attention.output"])
    fused = _attention_kernels(model, make(), CpuTarget())
    assert fused == [stages] * 4, fused  # two layers, under both cuts of the norms' scaling
    torch._dynamo.reset()
    apart = _attention_kernels(model, make(), CpuTarget(fused_attention=False))
    assert len(apart) == 12 and all(k != stages for k in apart)  # scores, softmax, weighted sum
    torch._dynamo.reset()


@pytest.mark.slow
def test_a_model_with_fused_attention_runs_it_as_one_task_and_matches_eager(tmp_path):
    import tensortune
    from tensortune.graph.check import relative_error
    torch = pytest.importorskip("torch")
    torch._dynamo.reset()
    model, make = _small_models()["llama"]  # causal, grouped-query heads, rotary embedding in the loads
    fast = tensortune.compile(model, make(), budget=1, db=str(tmp_path / "r.db"), progress=False)
    attention = [t for t in fast.report.tasks if t.label.startswith("attention")]
    assert len(attention) == 1 and attention[0].weight == 2 and attention[0].source == "tuned", \
        fast.report.table()
    with torch.no_grad():
        inputs = make()
        assert relative_error(fast(*inputs).last_hidden_state, model(*inputs).last_hidden_state) < 1e-4
    torch._dynamo.reset()
