"""The float32 reference on the GPU: a torch evaluator of expression graphs.

Candidates are checked where they run, on the device's tensors, against the same
expressions evaluated stage by stage with torch in float32 (float16 and bfloat16
inputs widened; explicit casts still round). A stage whose body is a sum of a product
of two factors is a contraction: each factor is materialised over its own axes and
multiplied with `torch.einsum` (TF32 off), so a 4096^3 matmul or an implicit-GEMM
convolution costs one library call; every other stage is evaluated over its index grid
in chunks of at most `STAGE_CHUNK` elements (over as many leading axes as that takes),
reads clamped into range (a `select` masks what a clamp would have changed). A stage's
value is dropped once the last stage reading it is computed, so attention's
[B, H, Sq, Skv] intermediates are alive two at a time, not all six.
`te.evaluate` (NumPy, float64) is what this evaluator is tested against.

Example:
    >>> import torch
    >>> from tensortune.te import workloads
    >>> w = workloads.matmul(8, 4, 16)
    >>> a, b = torch.randn(8, 16), torch.randn(16, 4)
    >>> bool(torch.allclose(evaluate(w.output, {"A": a, "B": b}), a @ b, atol=1e-5))
    True
"""

from __future__ import annotations

import hashlib
import itertools
import math
import string
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ...te.dtype import TEError
from ...te.expr import Binary, Call, Cast, Compare, Const, Expr, IterVar, Logical, Not, Reduce, Select, TensorRead
from ...te.tensor import Tensor, graph
from ...te.visit import itervars
from .patterns import describe_graph

CHUNK_ELEMENTS = 1 << 26
STAGE_CHUNK = 1 << 24  # elements of one chunk of a stage's index grid (each temporary is one)


def evaluate(output: Tensor, inputs: Mapping[str, Any]) -> Any:
    """The output's value in float32 (a torch tensor on the inputs' device)."""
    import torch

    values: dict[str, Any] = {}
    order = graph(output)
    last_use = {p.name: t.name for t in order if t.op is not None for p in t.op.inputs}
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for t in order:
            if t.op is None:
                if t.name not in inputs:
                    raise TEError(f"no value given for input {t.name!r}")
                x = inputs[t.name]
                if tuple(x.shape) != t.shape:
                    raise TEError(f"input {t.name!r} has shape {tuple(x.shape)}, expected {t.shape}")
                values[t.name] = x.float() if x.dtype.is_floating_point else x if x.dtype == torch.bool else x.long()
            else:
                values[t.name] = _stage(t, values)
                for p in t.op.inputs:
                    if last_use[p.name] == t.name and p is not output:
                        del values[p.name]
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev
    return values[output.name]


def _device(values: Mapping[str, Any]) -> Any:
    for v in values.values():
        return v.device
    return "cpu"


def _stage(t: Tensor, values: dict[str, Any]) -> Any:
    op = t.op
    assert op is not None
    body = op.body
    if isinstance(body, Reduce) and body.combiner == "sum":
        fast = _contraction(t, body, values)
        if fast is not None:
            return fast
    import torch

    axes = list(op.axes) + list(op.reduce_axes)
    src = body.source if isinstance(body, Reduce) else body
    device = _device(values)
    out = None
    for fixed, (c0, c1) in _chunks([a.extent for a in axes], len(op.axes)):
        depth = len(fixed)
        env = _grid(axes, device, fixed, (c0, c1))
        v = _Eval(values, env).go(src)
        shape = (1,) * depth + (c1 - c0,) + tuple(a.extent for a in axes[depth + 1:])
        v = torch.broadcast_to(torch.as_tensor(v, device=device), shape)
        if isinstance(body, Reduce):
            dims = tuple(range(len(op.axes), len(axes)))
            v = {"sum": lambda x: x.sum(dims), "max": lambda x: x.amax(dims),
                 "min": lambda x: x.amin(dims)}[body.combiner](v.float() if v.dtype == torch.bool else v)
        if out is None:
            out = torch.empty(t.shape, dtype=v.dtype, device=device)
        out[fixed + (slice(c0, c1),)] = v.reshape(v.shape[depth:])
    return out


def _chunks(extents: list[int], spatial: int) -> Iterator[tuple[tuple[int, ...], tuple[int, int]]]:
    """(fixed leading indices, range of the next axis): pieces of the index grid of at
    most STAGE_CHUNK points, never cutting the reduce axes (the last `len - spatial`)."""
    depth = 0
    while depth < spatial - 1 and math.prod(extents[depth + 1:]) > STAGE_CHUNK:
        depth += 1
    inner = math.prod(extents[depth + 1:])
    rows = max(1, STAGE_CHUNK // max(1, inner))
    for fixed in itertools.product(*(range(n) for n in extents[:depth])):
        for c0 in range(0, extents[depth], rows):
            yield tuple(fixed), (c0, min(extents[depth], c0 + rows))


def _grid(axes: list[IterVar], device: Any, fixed: tuple[int, ...] = (),
          chunk: tuple[int, int] | None = None) -> dict[IterVar, Any]:
    """Index tensors of the axes, broadcastable against each other: the first `len(fixed)`
    at one index each, the next over `chunk`, the rest whole."""
    import torch

    env = {}
    for d, ax in enumerate(axes):
        if d < len(fixed):
            lo, hi = fixed[d], fixed[d] + 1
        elif d == len(fixed) and chunk is not None:
            lo, hi = chunk
        else:
            lo, hi = 0, ax.extent
        env[ax] = torch.arange(lo, hi, device=device).reshape([-1 if k == d else 1 for k in range(len(axes))])
    return env


def _contraction(t: Tensor, body: Reduce, values: dict[str, Any]) -> Any:
    """`sum(fa * fb)`: each factor over its own axes, then einsum."""
    import torch

    src = body.source
    while isinstance(src, Cast):
        src = src.value
    if not (isinstance(src, Binary) and src.op == "mul"):
        return None
    axes = list(t.op.axes) + list(t.op.reduce_axes)
    if not set(t.op.axes) <= itervars(src.a) | itervars(src.b):
        return None  # an output axis neither factor reads (a kept unit dimension): not an einsum
    letters = dict(zip(axes, string.ascii_letters))
    operands, specs = [], []
    for factor in (src.a, src.b):
        used = [a for a in axes if a in itervars(factor)]
        if math.prod(a.extent for a in used) > 8 * CHUNK_ELEMENTS:
            return None
        env = _grid(used, _device(values))
        v = _Eval(values, env).go(factor)
        v = torch.broadcast_to(torch.as_tensor(v, device=_device(values)), tuple(a.extent for a in used))
        operands.append(v.float())
        specs.append("".join(letters[a] for a in used))
    spec = ",".join(specs) + "->" + "".join(letters[a] for a in t.op.axes)
    return torch.einsum(spec, *operands)


class _Eval:
    def __init__(self, values: Mapping[str, Any], env: Mapping[IterVar, Any]) -> None:
        self.values, self.env = values, env

    def go(self, x: Expr) -> Any:
        import torch

        if isinstance(x, Const):
            return x.value
        if isinstance(x, IterVar):
            return self.env[x]
        if isinstance(x, TensorRead):
            arr = self.values[x.tensor.name]
            idx = tuple(torch.clamp(torch.as_tensor(self.go(i)), 0, n - 1) for i, n in zip(x.indices, arr.shape))
            return arr[idx]
        if isinstance(x, Binary):
            a, b = self.go(x.a), self.go(x.b)
            if x.op == "floordiv":
                return torch.div(torch.as_tensor(a), b, rounding_mode="floor")
            if x.op == "mod":
                return torch.remainder(torch.as_tensor(a), b)
            if x.op in ("min", "max"):
                a, b = torch.as_tensor(a), torch.as_tensor(b)
                return torch.minimum(a, b) if x.op == "min" else torch.maximum(a, b)
            return {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b, "div": lambda: a / b}[x.op]()
        if isinstance(x, Compare):
            a, b = torch.as_tensor(self.go(x.a)), self.go(x.b)
            return {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b, "eq": a == b, "ne": a != b}[x.op]
        if isinstance(x, Logical):
            a, b = torch.as_tensor(self.go(x.a)), torch.as_tensor(self.go(x.b))
            return a & b if x.op == "and" else a | b
        if isinstance(x, Not):
            return ~torch.as_tensor(self.go(x.a))
        if isinstance(x, Select):
            return torch.where(torch.as_tensor(self.go(x.cond)), torch.as_tensor(self.go(x.then)),
                               torch.as_tensor(self.go(x.other)))
        if isinstance(x, Call):
            v = torch.as_tensor(self.go(x.args[0]), dtype=torch.float32)
            if x.name == "erf":
                return torch.special.erf(v)
            return getattr(torch, x.name)(v)
        if isinstance(x, Cast):
            v = torch.as_tensor(self.go(x.value))
            if x.dtype == "int32":
                return torch.trunc(v).long() if v.dtype.is_floating_point else v.long()
            if x.dtype in ("float16", "bfloat16"):
                return v.to(getattr(torch, x.dtype)).float()
            return v.float()
        raise TEError(f"cannot evaluate {x!r}")


@dataclass(frozen=True)
class TorchReference:
    """A picklable reference for the GPU runner: `ref(*inputs, output)` -> expected output."""

    output: Tensor
    names: tuple[str, ...]

    def __call__(self, *args: Any) -> Any:
        value = evaluate(self.output, dict(zip(self.names, args)))
        return value.to(args[len(self.names)].dtype)

    def __repr__(self) -> str:
        digest = hashlib.sha256(describe_graph(self.output).encode()).hexdigest()[:16]
        return f"TorchReference({self.output.name}@{digest})"
