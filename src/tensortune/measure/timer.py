"""Timing host code: warm-up by time, repeats by time, median and spread.

Example:
    >>> t = Timer(warmup_seconds=0.001, min_repeats=3, budget_seconds=0.01)
    >>> times = t.time(lambda: sum(range(1000)))
    >>> len(times) >= 3
    True
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Timer:
    """Times a callable on the host clock (`time.perf_counter`).

    Runs it for `warmup_seconds` first (at least once), then repeats until both
    `min_repeats` runs and `budget_seconds` are reached, stopping at `max_repeats`.
    With `flush_cache_bytes`, a buffer of that size is rewritten before every run so
    each run starts with a cold cache.
    """

    warmup_seconds: float = 0.02
    min_repeats: int = 5
    max_repeats: int = 200
    budget_seconds: float = 0.2
    flush_cache_bytes: int = 0

    def time(self, fn: Callable[[], object]) -> tuple[float, ...]:
        flush = _CacheFlusher(self.flush_cache_bytes) if self.flush_cache_bytes else None
        start = time.perf_counter()
        fn()
        while time.perf_counter() - start < self.warmup_seconds:
            fn()
        times: list[float] = []
        begin = time.perf_counter()
        while len(times) < self.max_repeats and (
            len(times) < self.min_repeats or time.perf_counter() - begin < self.budget_seconds
        ):
            if flush:
                flush()
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return tuple(times)


class _CacheFlusher:
    def __init__(self, nbytes: int) -> None:
        self.buffer = np.zeros(max(1, nbytes // 8), dtype=np.float64)

    def __call__(self) -> None:
        self.buffer += 1.0
