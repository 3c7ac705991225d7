"""Which values a kernel's inputs should take when it is checked on random data.

A kernel that gathers (`W[idx[i], j]`, an embedding) must be checked on indices that
stay inside the table: random inputs for such an argument are drawn from `[0, extent)`
of every dimension it indexes (the smallest one), and from `[-8, 8)` otherwise. A float
input that reaches a square root or a logarithm (a batch norm's running variance) is
drawn non-negative (`positive_inputs`), so the reference is not NaN where any kernel
may compute anything.

Example:
    >>> from tensortune import te
    >>> W = te.placeholder((10, 8), name="W")
    >>> idx = te.placeholder((4,), "int32", name="idx")
    >>> E = te.compute((4, 8), lambda i, j: W[idx[i], j], name="E")
    >>> input_ranges(E)
    {'idx': (0, 10)}
"""

from __future__ import annotations

from collections.abc import Iterable

from .expr import Call, Cast, TensorRead
from .tensor import Tensor, graph
from .visit import reads, walk

DEFAULT_RANGE = (-8, 8)


def input_ranges(outputs: Tensor | Iterable[Tensor]) -> dict[str, tuple[int, int]]:
    """`[low, high)` for every int32 placeholder of the graph (see the module docstring)."""
    tensors = graph(outputs)
    ranges = {t.name: DEFAULT_RANGE for t in tensors if t.op is None and t.dtype == "int32"}
    for t in tensors:
        if t.op is None:
            continue
        for r in reads(t.op.body):
            for d, ix in enumerate(r.indices):
                while isinstance(ix, Cast):
                    ix = ix.value
                if isinstance(ix, TensorRead) and ix.tensor.name in ranges:
                    lo, hi = ranges[ix.tensor.name]
                    extent = r.tensor.shape[d]
                    ranges[ix.tensor.name] = (0, extent if (lo, hi) == DEFAULT_RANGE else min(hi, extent))
    return ranges


def positive_inputs(outputs: Tensor | Iterable[Tensor]) -> set[str]:
    """Float placeholders read, directly or through other stages, by the argument of a
    square root or a logarithm."""
    found: set[str] = set()

    def collect(e: object, seen: set[int]) -> None:
        for r in reads(e):
            t = r.tensor
            if t.op is None:
                if t.dtype != "int32":
                    found.add(t.name)
            elif id(t) not in seen:
                seen.add(id(t))
                collect(t.op.body, seen)

    for t in graph(outputs):
        if t.op is None:
            continue
        for node in walk(t.op.body):
            if isinstance(node, Call) and node.name in ("sqrt", "log"):
                collect(node.args[0], set())
    return found
