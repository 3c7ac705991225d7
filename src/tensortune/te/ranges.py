"""Which values an integer input may take: the bounds of the dimensions it indexes.

A kernel that gathers (`W[idx[i], j]`, an embedding) must be checked on indices that
stay inside the table: random inputs for such an argument are drawn from `[0, extent)`
of every dimension it indexes (the smallest one), and from `[-8, 8)` otherwise.

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

from .expr import Cast, TensorRead
from .tensor import Tensor, graph
from .visit import reads

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
