"""A CPU plan's consecutive C kernels run from one C call (`graph.native`), and agree
with the same plan run step by step from Python."""

from __future__ import annotations

import ctypes

import pytest

torch = pytest.importorskip("torch")

import tensortune  # noqa: E402
from tensortune.backends.c_compiler import CCompiler, load_function  # noqa: E402
from tensortune.graph.check import relative_error  # noqa: E402
from tensortune.graph.native import MAX_ARGS, NativeSequence  # noqa: E402
from tensortune.graph.runtime import KernelStep, _Segment  # noqa: E402

SOURCE = """
int add_one(float* x, float* y) { for (int i = 0; i < 4; i++) y[i] = x[i] + 1; return 0; }
int refuse(float* x) { return x[0] > 100 ? 1 : 0; }
"""


def _address(name: str, argtypes: list[str]) -> int:
    lib = CCompiler().compile(SOURCE)
    return ctypes.cast(load_function(lib, name, argtypes, restype="int"), ctypes.c_void_p).value


def test_a_sequence_runs_its_kernels_in_order_and_names_the_one_that_failed():
    add_one, refuse = _address("add_one", ["float*", "float*"]), _address("refuse", ["float*"])
    x, y, z = torch.zeros(4), torch.empty(4), torch.full((4,), -1.0)
    seq = NativeSequence([(add_one, (0, 1)), (refuse, (1,)), (add_one, (1, 2))], slots=3)
    for k, t in enumerate((x, y, z)):
        seq.set(k, t.data_ptr())
    assert seq.run() == 0
    assert z.tolist() == [2.0] * 4
    x.fill_(200.0)  # the second kernel now returns 1: the third does not run
    z.fill_(-1.0)
    assert seq.run() == 2
    assert y.tolist() == [201.0] * 4 and z.tolist() == [-1.0] * 4


def test_a_sequence_refuses_kernels_it_cannot_call():
    add_one = _address("add_one", ["float*", "float*"])
    with pytest.raises(ValueError, match="outside the table"):
        NativeSequence([(add_one, (0, 3))], slots=2)
    with pytest.raises(ValueError, match="cannot be called natively"):
        NativeSequence([(add_one, tuple(range(MAX_ARGS + 1)))], slots=MAX_ARGS + 1)


class _Split(torch.nn.Module):
    """Kernels, an op outside coverage (cumsum) between them, an integer input read by two
    kernels, and an intermediate that is both a graph output and read by a later kernel."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

    def forward(self, x, idx):
        h = torch.tanh(self.a(x)) + idx.float()
        g = torch.cumsum(h, 1)
        y = self.b(g.reshape(4, 8)).reshape(2, 16) * idx.float().reshape(2, 16)
        return h, torch.relu(y + h.reshape(2, 16))


def test_a_compiled_model_runs_its_kernels_natively_and_agrees_with_the_step_by_step_plan(tmp_path):
    model = _Split().eval()
    x, idx = torch.randn(4, 8), torch.randint(0, 3, (4, 8))
    with torch.no_grad():
        fast = tensortune.compile(model, [x, idx], budget=4, db=str(tmp_path / "r.db"), progress=False)
        [graph] = fast.graphs
        plan = graph.plan
        segments = [s for _, s in plan.segments() if isinstance(s, _Segment)]
        kernels = [s for s in plan.steps if isinstance(s, KernelStep)]
        assert len(segments) == 2 and sum(len(s.kernels) for s in segments) == len(kernels)
        assert any(isinstance(s, tuple) and s[0] == "torch" for _, s in plan.segments())  # cumsum between them
        x2, idx2 = torch.randn(4, 8), torch.randint(0, 3, (4, 8))
        h, out = fast(x2, idx2)
        plan.native = False
        h_steps, out_steps = fast(x2, idx2)
        plan.native = True
        assert torch.equal(h, h_steps) and torch.equal(out, out_steps)
        h_ref, out_ref = model(x2, idx2)
        assert relative_error(h, h_ref) < 1e-5 and relative_error(out, out_ref) < 1e-5
        h_again, _ = fast(torch.randn(4, 8), idx2)
        assert not torch.equal(h, h_again) and h.data_ptr() != h_again.data_ptr()  # outputs are fresh
        seconds: dict[int, float] = {}
        plan.run(plan_inputs(fast, x2, idx2), seconds=seconds)  # each kernel timed in C, the cumsum in Python
        timed = {pos for pos, s in enumerate(plan.steps) if isinstance(s, KernelStep) or s[0] == "torch"}
        assert timed <= set(seconds) and all(seconds[pos] > 0 for pos in timed)
        assert {t.label for t in fast.report.tasks if t.time > 0} == {t.label for t in fast.report.tasks}


def plan_inputs(fast, *args):
    """The arguments the model's plan receives for `args`."""
    plan, seen = fast.graphs[0].plan, []
    real = plan.run
    plan.run = lambda a, *rest, **kw: (seen.append(list(a)), real(a, *rest, **kw))[1]
    try:
        fast(*args)
    finally:
        plan.run = real
    return seen[0]


def test_a_replaced_kernel_function_is_called_instead_of_the_native_one(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
    x = torch.randn(3, 8)
    with torch.no_grad():
        fast = tensortune.compile(model, [x], budget=2, db=str(tmp_path / "r.db"), progress=False)
        plan = fast.graphs[0].plan
        [step] = [s for s in plan.steps if isinstance(s, KernelStep)]
        assert step.runs_natively
        run = step.run
        step.run = lambda inputs, out: (run(inputs, out), out.mul_(2.0))
        plan._segments = None
        assert not step.runs_natively
        assert relative_error(fast(x), 2 * model(x)) < 1e-5


def test_calls_from_several_threads_each_get_their_own_result(tmp_path):
    """Calls share the planned buffers and the sequence's pointer table: they run one at a time."""
    import threading

    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Tanh(), torch.nn.Linear(256, 256), torch.nn.Tanh(),
                                torch.nn.Linear(256, 64)).eval()
    with torch.no_grad():
        fast = tensortune.compile(model, [torch.randn(32, 64)], budget=4, db=str(tmp_path / "r.db"), progress=False)
        xs = [torch.randn(32, 64) for _ in range(4)]
        refs = [fast(x) for x in xs]
        wrong = []

        def hammer(k: int) -> None:
            for _ in range(100):
                if not torch.equal(fast(xs[k]), refs[k]):
                    wrong.append(k)
        threads = [threading.Thread(target=hammer, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not wrong


def test_a_kernel_of_more_arguments_than_the_sequence_takes_is_called_from_python(tmp_path, monkeypatch):
    from tensortune.graph import native

    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)).eval()
    monkeypatch.setattr(native, "MAX_ARGS", 2)  # the first kernel (input, weight, bias, output) takes 4
    x = torch.randn(3, 8)
    with torch.no_grad():
        fast = tensortune.compile(model, [x], budget=2, db=str(tmp_path / "r.db"), progress=False)
        plan = fast.graphs[0].plan
        assert not any(isinstance(s, _Segment) for _, s in plan.segments())
        assert relative_error(fast(x), model(x)) < 1e-5
