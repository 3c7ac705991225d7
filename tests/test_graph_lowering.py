"""Every lowering rule against eager torch: capture, lower, evaluate the te stages with torch.

Nothing is compiled here: `run_graph` evaluates each stage with the torch reference the
GPU backend checks candidates against, so these tests check the rules' semantics fast.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from tensortune.graph.capture import capture  # noqa: E402
from tensortune.graph.check import relative_error  # noqa: E402
from tensortune.graph.interpret import run_graph  # noqa: E402
from tensortune.graph.lower import lower  # noqa: E402
from tensortune.graph.simplify import sink_views  # noqa: E402


def lowered(fn, *inputs):
    [cap] = capture(fn, list(inputs))
    return sink_views(lower(cap.gm, cap.example_inputs).pruned()), cap


def assert_lowers(fn, *inputs, fallbacks=0, tol=1e-5):
    g, cap = lowered(fn, *inputs)
    assert sum(n.kind == "torch" for n in g) == fallbacks, g.describe()
    got = run_graph(g, cap.example_inputs)
    with torch.no_grad():
        want = cap.gm(*cap.example_inputs)
    for o, r in zip(got, want):
        assert o.dtype == r.dtype and o.shape == r.shape
        limit = {torch.float16: 2e-3, torch.bfloat16: 1e-2}.get(r.dtype, tol)  # one rounding of the output
        assert relative_error(o, r) <= limit, (relative_error(o, r), g.describe())
    return g


x = torch.randn(3, 4, 5)
CASES = {
    "add_sub_mul_div": (lambda a, b: (a + b * 2 - 1) / (b.abs() + 1), x, torch.randn(4, 5)),
    "broadcast_scalar_alpha": (lambda a: torch.add(a, a[0], alpha=0.5).sub(2, alpha=3), x),
    "math": (lambda a: torch.exp(a) + torch.log(a.abs() + 1) + torch.sqrt(a.abs()) + torch.tanh(a) +
             torch.sigmoid(a) + torch.erf(a) + torch.cos(a) + torch.sin(a) + torch.rsqrt(a.abs() + 1), x),
    "activations": (lambda a: F.gelu(a) + F.gelu(a, approximate="tanh") + F.silu(a) + F.relu(a) + F.mish(a) +
                    F.hardswish(a) + F.leaky_relu(a, 0.1) + F.elu(a) + F.softplus(a) + F.hardtanh(a), x),
    "pow": (lambda a: a ** 2 + a ** 3 + a.abs() ** 0.5 + a.abs() ** 1.7 + 2.0 ** a + (a.abs() + 1) ** -1, x),
    "compare_where": (lambda a, b: torch.where((a > 0) & ~(b < 0.5), a, b * 2) + (a == a).float(), x, x * 0.3),
    "clamp_min_max": (lambda a, b: a.clamp(-0.5, 0.5) + torch.maximum(a, b) + torch.minimum(a, b), x, x.flip(0)),
    "casts": (lambda a: a.half().float() + a.to(torch.int32).float() + (a > 0).to(torch.float32), x),
    "reductions": (lambda a: (a.sum(-1), a.mean((0, 2)), a.amax(1, keepdim=True), a.amin(), a.var(-1),
                              a.std(0, keepdim=True), (a > 0).any(-1), (a > -5).all(1),
                              torch.logsumexp(a, -1)), x),
    "softmax": (lambda a: (torch.softmax(a, -1), torch.log_softmax(a, 1), torch.softmax(a.half(), 0)), x),
    "views": (lambda a: (a.view(12, 5).t() + 1, a.reshape(3, 20)[:, 5:15:2], a.permute(2, 0, 1).unsqueeze(1),
                         a.transpose(0, 1).contiguous().view(-1), a[1], a.expand(2, 3, 4, 5).sum(0)), x),
    "cat_stack_split": (lambda a: (torch.cat([a, a * 2], 1), torch.stack([a, -a], -1),
                                   *torch.split(a, [1, 3], 1), *torch.chunk(a, 3, 0), *a.unbind(2)), x),
    "pad_repeat": (lambda a: (F.pad(a, (1, 2, 0, 1), value=0.5), a.repeat(2, 1, 1)), x),
    "layer_norm": (lambda a, w, b: F.layer_norm(a, (5,), w, b) + F.layer_norm(a, (4, 5)), x, torch.randn(5),
                   torch.randn(5)),
    "rms_norm_by_hand": (lambda a, w: a * torch.rsqrt(a.pow(2).mean(-1, keepdim=True) + 1e-6) * w, x,
                         torch.randn(5)),
    "group_norm": (lambda a, w, b: F.group_norm(a, 2, w, b), torch.randn(2, 4, 3, 3), torch.randn(4),
                   torch.randn(4)),
    "batch_norm_eval": (lambda a, m, v, w, b: F.batch_norm(a, m, v, w, b, False, 0.1, 1e-5),
                        torch.randn(2, 4, 3, 3), torch.randn(4), torch.rand(4) + 0.5, torch.randn(4),
                        torch.randn(4)),
    "matmuls": (lambda a, w, b: (a @ w, torch.addmm(b, a[0], w, beta=0.5, alpha=2.0),
                                 torch.bmm(a, w.expand(3, 5, 6)), F.linear(a, w.t(), b)), x,
                torch.randn(5, 6), torch.randn(6)),
    "embedding_gather": (lambda w, i: (F.embedding(i, w), torch.gather(w, 1, i[:, :2] % 3), w[i[0]]),
                         torch.randn(10, 3), torch.randint(0, 10, (4, 5))),
    "arange_full": (lambda a: a + torch.arange(5) * 0.5 + torch.full((4, 5), 2.0) + torch.ones_like(a), x),
    "pooling": (lambda a: (F.max_pool2d(a, 2), F.max_pool2d(a, 3, 2, 1), F.avg_pool2d(a, 2),
                           F.adaptive_avg_pool2d(a, 1), F.avg_pool2d(a, 3, 1, 1)), torch.randn(2, 3, 8, 8)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rule_matches_eager(name):
    fn, *inputs = CASES[name]
    assert_lowers(fn, *inputs)


CONVS = [dict(), dict(stride=2), dict(padding=1), dict(padding=2, dilation=2), dict(groups=2, padding=1),
         dict(groups=4, padding=1), dict(stride=2, padding=1, groups=4)]


@pytest.mark.parametrize("kw", CONVS, ids=[str(k) for k in CONVS])
def test_convolutions_match_eager(kw):
    groups = kw.get("groups", 1)
    w = torch.randn(8, 4 // groups, 3, 3)
    assert_lowers(lambda a, w, b: F.conv2d(a, w, b, **kw), torch.randn(2, 4, 9, 9), w, torch.randn(8))


def test_conv1d_matches_eager():
    assert_lowers(lambda a, w: F.conv1d(a, w, padding=1, stride=2), torch.randn(2, 4, 11), torch.randn(6, 4, 3))


@pytest.mark.parametrize("kind", ["plain", "causal", "float_mask", "bool_mask", "gqa", "scale"])
def test_attention_matches_eager(kind):
    q = torch.randn(2, 4, 6, 8)
    kv = torch.randn(2, 2 if kind == "gqa" else 4, 7 if kind != "causal" else 6, 8)
    args: dict = {}
    if kind == "causal":
        args["is_causal"] = True
    if kind == "float_mask":
        args["attn_mask"] = torch.randn(1, 1, 6, 7)
    if kind == "bool_mask":
        mask = torch.rand(2, 1, 6, 7) < 0.7
        mask[0, 0, 1] = False  # a row with every key masked: zeros, as torch's math path gives
        args["attn_mask"] = mask
    if kind == "gqa":
        args["enable_gqa"] = True
    if kind == "scale":
        args["scale"] = 0.3
    g = assert_lowers(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **args), q, kv, kv.clone())
    assert any(n.op == "attention.scores" for n in g)


@pytest.mark.parametrize("past", [0, 3])
@pytest.mark.parametrize("kind", ["bool", "min", "-inf"])
def test_a_causal_mask_built_from_positions_becomes_a_bound_not_data(kind, past):
    """Hugging Face builds causal masks from position tensors; folded, they are constants the
    attention kernel would load. Recognised, they become the bound `j <= i + past`."""
    def attend(q, k, v):
        rows = torch.arange(past, past + q.shape[2])
        keep = torch.arange(k.shape[2])[None, :] <= rows[:, None]
        if kind == "bool":
            mask = keep[None, None].expand(q.shape[0], 1, -1, -1)
        else:
            low = torch.finfo(q.dtype).min if kind == "min" else float("-inf")
            mask = torch.where(keep, 0.0, low)[None, None]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    q, kv = torch.randn(2, 4, 6, 8), torch.randn(2, 4, 6 + past, 8)
    g = assert_lowers(attend, q, kv, kv.clone())
    [logits] = [n for n in g if n.op == "attention.logits"]
    assert [g.nodes[i].op for i in logits.inputs] == ["attention.scores"]


def test_causal_offset_declines_what_is_not_one_causal_bound():
    from tensortune.graph.lowering.attention import causal_offset
    tril = torch.ones(5, 7, dtype=torch.bool).tril(1)
    assert causal_offset(tril, 5, 7) == 1
    assert causal_offset(tril.tril(-1), 5, 7) == -1  # boolean: a row with no key stays a row of zeros
    assert causal_offset(torch.where(tril.tril(-1), 0.0, float("-inf")), 5, 7) is None  # additive: would differ
    assert causal_offset(torch.where(tril, 0.0, -1.0), 5, 7) is None  # a bias, not a mask
    per_batch = torch.stack([tril, tril.tril(0)])
    assert causal_offset(per_batch, 5, 7) is None
    assert causal_offset(tril, 5, 8) is None  # another shape
    assert causal_offset(tril.int(), 5, 7) is None


def test_rms_norm_lowers_whole_its_in_place_epsilon_included():
    assert_lowers(lambda a, w: F.rms_norm(a, (5,), w), x, torch.randn(5))


def test_empty_inputs_to_cat_are_skipped():
    assert_lowers(lambda a, b: torch.cat([b, a], 1), torch.randn(2, 3), torch.randn(2, 0))


def test_op_without_a_rule_falls_back_to_aten_with_the_reason():
    g = assert_lowers(lambda a: torch.cumsum(a, 1) * 2, x, fallbacks=1)
    [fb] = [n for n in g if n.kind == "torch"]
    assert "cumsum" in fb.op and fb.reason == "no lowering rule"


def test_a_rule_that_declines_falls_back_with_its_reason():
    g = assert_lowers(lambda a: F.conv_transpose2d(a, torch.ones(4, 2, 3, 3)), torch.randn(1, 4, 5, 5), fallbacks=1)
    [fb] = [n for n in g if n.kind == "torch"]
    assert fb.reason == "transposed convolution"


def test_constant_subgraphs_are_folded_at_compile_time():
    g, _ = lowered(lambda a: a + torch.arange(5).float().cos().unsqueeze(0), torch.randn(4, 5))
    assert [n.op for n in g if n.kind == "te"] == ["aten.add.Tensor"]
    assert sum(n.kind == "constant" for n in g) == 1


def test_reshapes_move_after_elementwise_work():
    g, _ = lowered(lambda a, w, r: (a @ w).view(2, 3, 4) + r, torch.randn(6, 5), torch.randn(5, 4),
                   torch.randn(2, 3, 4))
    add = next(n for n in g if n.op == "aten.add.Tensor" and n.kind == "te")
    assert add.info.shape == (6, 4)


def test_bfloat16_values_lower_to_bfloat16_stages():
    g = assert_lowers(lambda a, w: F.gelu(a @ w), torch.randn(4, 8).bfloat16(), torch.randn(8, 3).bfloat16(),
                      tol=1e-2)
    assert {n.info.dtype for n in g if n.kind == "te"} == {"bfloat16"}
