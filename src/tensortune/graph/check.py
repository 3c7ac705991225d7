"""Checking a compiled graph against eager execution, and finding what is wrong.

`compare` measures each output's relative error (‖out − ref‖ / ‖ref‖) against the
graph run eagerly by torch, on the example inputs and on fresh random activations
(weights and buffers are kept: random weights would not exercise what the model does).
When a check fails, `wrong_kernels` recomputes every kernel from the values it read and
names those that disagree with their own expressions (a wrong kernel is that task's
error); `wrong_op` finds the first ATen op whose lowering disagrees with eager torch.

Example:
    >>> import torch
    >>> compare([torch.ones(4)], [torch.ones(4) * 1.0001])[0] < 1e-3
    True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

TOLERANCE = {"float32": 1e-3, "float64": 1e-6, "float16": 2e-2, "bfloat16": 4e-2}


def tolerance(dtype: Any) -> float:
    """Relative error allowed for an output of this dtype (integers must match exactly)."""
    return TOLERANCE.get(str(dtype).replace("torch.", ""), 0.0)


def relative_error(out: Any, ref: Any) -> float:
    """‖out − ref‖ / ‖ref‖ over the finite elements; inf when non-finite elements differ."""
    import torch
    if out.shape != ref.shape:
        return math.inf
    if not ref.dtype.is_floating_point:
        return 0.0 if torch.equal(out.to(ref.dtype), ref) else math.inf
    a, b = out.detach().double(), ref.detach().double()
    finite = torch.isfinite(b)
    if not torch.equal(finite, torch.isfinite(a)) or not torch.equal(a[~finite].nan_to_num(), b[~finite].nan_to_num()):
        return math.inf
    a, b = a[finite], b[finite]
    norm = float(b.norm())
    diff = float((a - b).norm())
    return diff / norm if norm > 0 else diff


def _tensors(x: Any) -> list[Any]:
    import torch
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors(v)]
    return []


def compare(outputs: Any, references: Any) -> list[float]:
    """The relative error of each tensor output."""
    return [relative_error(o, r) for o, r in zip(_tensors(outputs), _tensors(references))]


@dataclass(frozen=True)
class CheckResult:
    """The worst relative error on each kind of input, and the tolerance it was held to."""

    errors: tuple[tuple[str, float, float], ...]  # (inputs, worst error, tolerance)

    @property
    def ok(self) -> bool:
        return all(e <= tol for _, e, tol in self.errors)

    def describe(self) -> str:
        return "; ".join(f"{name}: {err:.2e} (tolerance {tol:.0e})" for name, err, tol in self.errors)


def random_like(captured: Any, seed: int) -> list[Any]:
    """The example inputs with every activation redrawn (floats from a normal distribution
    of the same mean and spread, integers from the same range); weights kept."""
    import torch
    g = torch.Generator(device="cpu").manual_seed(seed)
    out = []
    for k, x in enumerate(captured.example_inputs):
        if not isinstance(x, torch.Tensor) or captured.is_weight(k) or x.numel() == 0:
            out.append(x)
        elif x.dtype.is_floating_point:
            spread = float(x.float().std()) if x.numel() > 1 else 1.0
            r = torch.randn(x.shape, generator=g) * (spread if math.isfinite(spread) and spread > 0 else 1.0)
            out.append((r + float(x.float().mean())).to(x.dtype).to(x.device))
        elif x.dtype == torch.bool:
            out.append((torch.rand(x.shape, generator=g) < 0.5).to(x.device))
        else:
            lo, hi = int(x.min()), int(x.max())
            out.append(torch.randint(lo, hi + 1, x.shape, generator=g).to(x.dtype).to(x.device))
    return out


def check(run: Any, reference: Any, captured: Any, seed: int = 0) -> CheckResult:
    """`run` against `reference` (both callables on the graph's inputs) on the example
    inputs and on one set of fresh random activations."""
    rows = []
    for name, inputs in (("example inputs", captured.example_inputs), ("random inputs", random_like(captured, seed))):
        want = reference(*inputs)
        got = run(*inputs)
        refs = _tensors(want)
        errs = compare(got, want)
        worst, tol = 0.0, 0.0
        for e, r in zip(errs, refs):
            t = tolerance(r.dtype)
            if e / max(t, 1e-300) >= worst / max(tol, 1e-300) or not math.isfinite(e):
                worst, tol = e, t
        rows.append((name, worst, tol))
    return CheckResult(tuple(rows))


def wrong_kernels(plan: Any, kernels: Sequence[Any], inputs: Sequence[Any]) -> list[Any]:
    """The kernel steps whose output differs from their own expressions evaluated by torch
    on the same inputs (`kernels`: the plan's `KernelGraph`s by root)."""
    from ..backends.triton.reference import evaluate
    from .interpret import as_stored
    record: dict[int, Any] = {}
    plan.run(inputs, record=record)
    by_root = {k.spec.root: k for k in kernels}
    bad = []
    for step in plan.steps:
        k = by_root.get(getattr(step, "root", None))
        if k is None or getattr(step, "kind", "") != "kernel":
            continue
        graph = plan.graph
        values = {t.name: as_stored(record[i], graph.nodes[i].info.dtype).reshape(t.shape)
                  for t, i in zip(k.placeholders, k.spec.inputs)}
        want = evaluate(k.output, values)
        got = as_stored(record[step.root], graph.nodes[step.root].info.dtype)
        info = graph.nodes[step.root].info
        if relative_error(got.reshape(want.shape).to(want.dtype), want) > max(tolerance(info.dtype), 1e-3):
            bad.append(step)
    return bad


def wrong_op(graph: Any, captured: Any, inputs: Sequence[Any]) -> str | None:
    """The FX node of the first lowered op whose value differs from eager torch, or None."""
    import torch
    import torch.fx as fx

    from .interpret import run_graph
    eager: dict[str, Any] = {}

    class Recorder(fx.Interpreter):
        def run_node(self, n: Any) -> Any:
            value = super().run_node(n)
            eager[n.name] = value
            return value

    with torch.no_grad():
        Recorder(captured.gm).run(*inputs)
    values: dict[int, Any] = {}
    run_graph(graph, inputs, record=values)
    last: dict[str, int] = {}
    for n in graph:
        if n.kind == "te" and n.origin:
            last[n.origin] = n.id
    for origin, nid in sorted(last.items(), key=lambda kv: kv[1]):
        want = eager.get(origin)
        if not isinstance(want, torch.Tensor) or want.numel() != values[nid].numel():
            continue
        got = values[nid].reshape(want.shape)
        if relative_error(got.to(want.dtype), want) > max(tolerance(want.dtype), 1e-4) * 10:
            return origin
    return None
