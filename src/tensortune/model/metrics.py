"""How well a cost model ranks: Kendall's tau and top-k error.

Example:
    >>> kendall_tau([1, 2, 3, 4], [10, 20, 30, 40])
    1.0
    >>> top_k_error(scores=[0.9, 0.1, 0.5], times=[2.0, 1.0, 4.0], k=1)
    100.0
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def _count_swaps(values: list[float]) -> int:
    """Inversions needed to sort `values` (merge sort, O(n log n))."""
    swaps = 0
    width = 1
    a = list(values)
    n = len(a)
    while width < n:
        out: list[float] = []
        for lo in range(0, n, 2 * width):
            mid, hi = min(lo + width, n), min(lo + 2 * width, n)
            i, j = lo, mid
            while i < mid and j < hi:
                if a[j] < a[i]:
                    out.append(a[j])
                    swaps += mid - i
                    j += 1
                else:
                    out.append(a[i])
                    i += 1
            out.extend(a[i:mid])
            out.extend(a[j:hi])
        a = out
        width *= 2
    return swaps


def _tied_pairs(sorted_values: Sequence[float]) -> int:
    total, run = 0, 1
    for prev, cur in zip(sorted_values, sorted_values[1:]):
        if cur == prev:
            run += 1
        else:
            total += run * (run - 1) // 2
            run = 1
    return total + run * (run - 1) // 2


def kendall_tau(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's tau-b between two sequences (ties handled), in O(n log n)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if len(x) != len(y):
        raise ValueError(f"sequences differ in length: {len(x)} != {len(y)}")
    n = len(x)
    if n < 2:
        return math.nan
    order = np.lexsort((y, x))
    xs, ys = x[order].tolist(), y[order].tolist()
    pairs = n * (n - 1) // 2
    ties_x = _tied_pairs(xs)
    ties_xy = _tied_pairs(list(zip(xs, ys)))  # type: ignore[arg-type]
    swaps = _count_swaps(ys)
    ties_y = _tied_pairs(sorted(ys))
    denom = math.sqrt((pairs - ties_x) * (pairs - ties_y))
    if denom == 0:
        return math.nan
    return (pairs - ties_x - ties_y + ties_xy - 2 * swaps) / denom


def top_k_error(scores: Sequence[float], times: Sequence[float], k: int) -> float:
    """How much slower (in percent) the best of the model's top-k is than the true best."""
    scores = np.asarray(scores, dtype=np.float64)
    times = np.asarray(times, dtype=np.float64)
    finite = times[np.isfinite(times)]
    if not len(finite):
        return math.nan
    top = np.argsort(-scores, kind="stable")[:k]
    found = times[top].min()
    return float(100.0 * (found / finite.min() - 1.0)) if math.isfinite(found) else math.inf
