"""Whole models compiled for the CPU and checked against eager torch.

Small configurations of real Hugging Face architectures (random weights from their
configs) and plain torch modules, each tuned with a budget of a few trials (speed is
the benchmarks' business) and compared with eager execution on fresh inputs.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import tensortune  # noqa: E402
from tensortune.graph.check import relative_error  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """torch.compile's caches are per process: tests that compile the same module class
    must not see each other's graphs (or hit dynamo's recompile limit)."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _models():
    from transformers import (BertConfig, BertModel, GPT2Config, GPT2Model, LlamaConfig, LlamaModel, ResNetConfig,
                              ResNetModel)
    gpt2 = GPT2Model(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=32, use_cache=False))
    llama = LlamaModel(LlamaConfig(num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=64, use_cache=False))
    bert = BertModel(BertConfig(num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=2,
                                vocab_size=64))
    resnet = ResNetModel(ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                                      layer_type="bottleneck"))
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 16),
                              torch.nn.LayerNorm(16))
    cnn = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                              torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 8, 3, padding=1, groups=8),
                              torch.nn.Conv2d(8, 16, 1), torch.nn.SiLU(), torch.nn.AdaptiveAvgPool2d(1),
                              torch.nn.Flatten(), torch.nn.Linear(16, 10))
    ids = lambda b, s: torch.randint(0, 64, (b, s))  # noqa: E731
    return {
        "gpt2": (gpt2, lambda: [ids(2, 8)]),
        "llama": (llama, lambda: [ids(1, 8)]),
        "bert": (bert, lambda: [ids(2, 8), torch.tensor([[1] * 8, [1] * 5 + [0] * 3])]),
        "resnet": (resnet, lambda: [torch.randn(2, 3, 16, 16)]),
        "mlp": (mlp, lambda: [torch.randn(4, 16)]),
        "cnn": (cnn, lambda: [torch.randn(2, 3, 8, 8)]),
    }


def outputs(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if hasattr(x, "to_tuple"):
        x = x.to_tuple()
    return [t for v in x for t in outputs(v)] if isinstance(x, (tuple, list)) else []


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt2", "llama", "bert", "resnet", "mlp", "cnn"])
def test_model_compiles_for_the_cpu_and_matches_eager(name, tmp_path):
    torch.manual_seed(0)
    model, make = _models()[name]
    model.eval()
    fast = tensortune.compile(model, make(), budget=1, db=str(tmp_path / "records.db"), progress=False)
    report = fast.report
    assert report.kernels > 0 and not report.fallbacks, report.table()
    assert all(t.source == "tuned" for t in report.tasks), report.table()
    with torch.no_grad():
        for _ in range(2):  # fresh inputs, twice: buffers planned once must not leak between calls
            inputs = make()
            got, want = outputs(fast(*inputs)), outputs(model(*inputs))
            assert len(got) == len(want)
            for g, w in zip(got, want):
                assert relative_error(g, w) < 1e-4, name


def test_compiling_again_builds_from_the_records_without_measuring(tmp_path):
    torch.manual_seed(0)
    model, make = _models()["mlp"]
    model.eval()
    db = str(tmp_path / "records.db")
    first = tensortune.compile(model, make(), budget=4, db=db, progress=False)
    assert sum(t.trials for t in first.report.tasks) >= 2
    again = tensortune.compile(model, make(), db=db, progress=False)
    assert [t.source for t in again.report.tasks] == ["records"] * len(again.report.tasks)
    assert sum(t.trials for t in again.report.tasks) == 0
    x = make()[0]
    assert relative_error(again(x), model(x)) < 1e-5


class _Broken(torch.nn.Module):
    """Two graphs (a graph break between them) sharing one kernel, each with one of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.first, self.shared, self.last = (torch.nn.Linear(16, 16) for _ in range(3))

    def forward(self, x):
        x = torch.relu(self.shared(torch.tanh(self.first(x))))
        torch._dynamo.graph_break()
        return torch.sigmoid(self.last(torch.relu(self.shared(x))))


def test_a_model_of_several_graphs_is_tuned_under_one_budget(tmp_path):
    torch.manual_seed(0)
    model = _Broken().eval()
    fast = tensortune.compile(model, [torch.randn(4, 16)], budget=6, db=str(tmp_path / "r.db"), progress=False)
    assert len(fast.reports) == 2
    trials = {t.key: t.trials for r in fast.reports for t in r.tasks}
    shared = set.intersection(*({t.key for t in r.tasks} for r in fast.reports))
    assert shared and len(trials) > len(shared)  # a kernel in both graphs, and kernels of their own
    assert sum(trials.values()) <= 6  # the budget is the model's, not each graph's
    assert fast.joint_tuning_seconds > 0 and fast.tuning_seconds >= fast.joint_tuning_seconds
    assert all(t.source == "tuned" for r in fast.reports for t in r.tasks)
    x = torch.randn(4, 16)
    with torch.no_grad():
        assert relative_error(fast(x), model(x)) < 1e-5


class _NormThenTwo(torch.nn.Module):
    """An RMS norm (written as Llama writes it) read by two matmuls: its scaling is a
    prologue of both, or a kernel of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(32))
        self.a, self.b = torch.nn.Linear(32, 48, bias=False), torch.nn.Linear(32, 48, bias=False)

    def forward(self, x):
        h = self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
        return self.a(h) * torch.sigmoid(self.b(h))


@pytest.mark.parametrize("prologues", ["fuse", "materialize", "measure"])
def test_a_norm_read_by_matmuls_is_fused_materialized_or_decided_by_measurement(prologues, tmp_path):
    torch.manual_seed(0)
    model = _NormThenTwo().eval()
    fast = tensortune.compile(model, [torch.randn(1, 16, 32)], budget=12, db=str(tmp_path / "r.db"),
                              progress=False, prologues=prologues)
    report = fast.report
    own_kernel = any(t.label == "mul 1x16x32" for t in report.tasks)  # the scaling, written once
    assert own_kernel == (prologues == "materialize") or prologues == "measure", report.table()
    if prologues == "measure":
        [decision] = report.decisions
        assert "prologues fused" in decision and "prologues materialized" in decision
        assert decision.startswith("prologues materialized" if own_kernel else "prologues fused")
    else:
        assert not report.decisions
    x = torch.randn(1, 16, 32)
    with torch.no_grad():
        assert relative_error(fast(x), model(x)) < 1e-5


def test_an_unknown_prologues_choice_is_named():
    with pytest.raises(ValueError, match="prologues must be one of"):
        tensortune.compile(_NormThenTwo().eval(), [torch.randn(1, 4, 32)], prologues="sometimes")


def test_the_torch_compile_backend_is_found_by_name(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
    compiled = torch.compile(model, backend="tensortune",
                             options={"budget": 1, "db": str(tmp_path / "r.db"), "progress": False})
    x = torch.randn(3, 8)
    with torch.no_grad():
        assert relative_error(compiled(x), model(x)) < 1e-5


def test_a_graph_dynamo_made_shape_generic_is_compiled_per_shape(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh()).eval()
    compiled = torch.compile(model, backend="tensortune", dynamic=True,
                             options={"budget": 1, "db": str(tmp_path / "r.db"), "progress": False})
    with torch.no_grad():
        for rows in (3, 5, 3):
            x = torch.randn(rows, 8)
            assert relative_error(compiled(x), model(x)) < 1e-5


def test_a_graph_captured_with_gradients_runs_eagerly_with_a_warning(tmp_path):
    model = torch.nn.Linear(8, 8)
    compiled = torch.compile(model, backend="tensortune", options={"db": str(tmp_path / "r.db")})
    x = torch.randn(3, 8)
    with pytest.warns(UserWarning, match="inference graphs"):
        out = compiled(x)
    out.sum().backward()
    assert model.weight.grad is not None


def test_unknown_options_are_named():
    model = torch.nn.Linear(8, 8).eval()
    with pytest.raises(ValueError, match="unknown tensortune option.*'budgett'"):
        tensortune.compile(model, [torch.randn(2, 8)], budgett=3)


def test_a_bad_model_or_bad_example_inputs_are_named():
    model = torch.nn.Linear(8, 8).eval()
    with pytest.raises(TypeError, match="model must be a torch.nn.Module or a function, not int"):
        tensortune.compile(5, [torch.randn(2, 8)])
    with pytest.raises(TypeError, match=r"example_inputs must be a tuple or list .* not Tensor \(one tensor x: pass"):
        tensortune.compile(model, torch.randn(2, 8))
    with pytest.raises(TypeError, match="example_inputs must be a tuple or list .* not str"):
        tensortune.compile(model, "x")


def test_ops_outside_coverage_run_as_aten_and_the_report_says_so(tmp_path):
    class Cumulative(torch.nn.Module):
        def forward(self, x):
            return torch.relu(torch.cumsum(x @ x.T, 1))

    fast = tensortune.compile(Cumulative().eval(), [torch.randn(6, 6)], budget=2, db=str(tmp_path / "r.db"),
                              progress=False)
    [fb] = fast.report.fallbacks
    assert "cumsum" in fb.op and fb.reason == "no lowering rule" and fb.count == 1
    x = torch.randn(6, 6)
    assert relative_error(fast(x), torch.relu(torch.cumsum(x @ x.T, 1))) < 1e-5
    assert "cumsum" in fast.report.table()


def test_a_kernel_wrong_on_the_models_data_is_that_tasks_error(tmp_path, monkeypatch):
    """A tuned kernel that disagrees with its expressions is replaced by torch's evaluation
    of them; the model stays right and the report names the task."""
    from tensortune.graph import targets

    real = targets.CpuSearch.step

    def broken(self, built, root, reads, name):
        step = real(self, built, root, reads, name)
        if "relu" in name:
            run = step.run
            step.run = lambda inputs, out: (run(inputs, out), out.mul_(1.5))
        return step
    monkeypatch.setattr(targets.CpuSearch, "step", broken)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)).eval()
    fast = tensortune.compile(model, [torch.randn(3, 8)], budget=2, db=str(tmp_path / "r.db"), progress=False)
    wrong = [t for t in fast.report.tasks if "relu" in t.label]
    assert wrong and wrong[0].source.startswith("torch (the kernel was wrong"), fast.report.table()
    x = torch.randn(3, 8)
    assert relative_error(fast(x), model(x)) < 1e-5


def test_a_lowering_that_disagrees_with_aten_falls_back_for_that_op(tmp_path, monkeypatch):
    from tensortune import te
    from tensortune.graph.lowering import RULES, rule_for

    rule_for(None)
    aten = torch.ops.aten
    monkeypatch.setitem(RULES, aten.relu.default,
                        lambda ctx, x: ctx.elementwise(lambda v: te.maximum(v, -0.5), [x], ctx.out_dtype))
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
    fast = tensortune.compile(model, [torch.randn(16, 8)], budget=2, db=str(tmp_path / "r.db"), progress=False)
    [fb] = fast.report.fallbacks
    assert fb.op == "aten.relu.default" and "disagreed with ATen" in fb.reason
    x = torch.randn(16, 8)
    assert relative_error(fast(x), model(x)) < 1e-5


def test_outputs_are_fresh_tensors_and_buffers_are_reused(tmp_path):
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh()) for _ in range(4)])
    fast = tensortune.compile(model.eval(), [torch.randn(4, 16)], budget=1, db=str(tmp_path / "r.db"),
                              progress=False)
    plan = fast.graphs[0].plan
    kernels = len([s for s in plan.steps if not isinstance(s, tuple)])
    assert len({id(b) for b in plan.buffers.values()}) < kernels - 1  # four layers, two buffers taking turns
    x1, x2 = torch.randn(4, 16), torch.randn(4, 16)
    y1 = fast(x1)
    keep = y1.clone()
    fast(x2)
    assert torch.equal(y1, keep)
