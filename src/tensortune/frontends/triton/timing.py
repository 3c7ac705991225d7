"""Timers for Triton candidates: the GPU timer, Triton-style `do_bench`, the interpreter.

A timer has `time(fn) -> tuple[float, ...]` (seconds per run). The callable it gets
is a `Launch` that carries the candidate's configuration as `.config`, so a fake timer
in a test can answer by configuration without a GPU.

Example:
    >>> t = DoBenchTimer(lambda fn, quantiles: [fn() or 2.0, 1.0, 3.0])
    >>> t.time(lambda: None)
    (0.001, 0.002, 0.003)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from ...measure import Timer


class DoBenchTimer:
    """Adapts a Triton-style `do_bench(fn, quantiles)` (milliseconds) to a timer; what it
    returned for each configuration is kept in `returned` (Triton's `configs_timings`)."""

    def __init__(self, do_bench: Callable[..., Any]) -> None:
        self.do_bench = do_bench
        self.returned: dict[Any, Any] = {}

    def time(self, fn: Callable[[], object]) -> tuple[float, ...]:
        out = self.do_bench(fn, quantiles=(0.5, 0.2, 0.8))
        config = getattr(fn, "config", None)
        if config is not None:
            self.returned[config] = out
        values = [float(v) for v in (out if isinstance(out, (list, tuple)) else [out])]
        return tuple(sorted(v / 1e3 for v in values))


def interpreter_timer() -> Timer:
    """One timed run: the interpreter is slow and its times mean little."""
    return Timer(warmup_seconds=0.0, min_repeats=1, max_repeats=1, budget_seconds=0.0)


def gpu_timer() -> Any:
    """The search's timer: CUDA events, cold L2, 10 ms of repeats per candidate, no
    cool-down (many candidates, each ranked by its fastest run; the near-ties are re-timed
    with `confirm_timer`)."""
    from ...measure.cuda_timer import CudaTimer

    return CudaTimer(budget_seconds=0.01, warmup_seconds=0.003, min_repeats=5, max_repeats=500, cooldown=0.0)


def confirm_timer() -> Any:
    """The timer that re-times near-ties: longer, with the GPU cooling down after each run
    (steady clocks for power-bound kernels, see docs/gpu_measurement.md)."""
    from ...measure.cuda_timer import CudaTimer

    return CudaTimer(budget_seconds=0.03, warmup_seconds=0.01, min_repeats=5, max_repeats=500, cooldown=1.0)


def resolve_timer(timer: Any, do_bench: Callable[..., Any] | None, interpreted: bool) -> Any:
    if timer is not None and do_bench is not None:
        raise ValueError("give either timer= or do_bench=, not both")
    if timer is not None:
        if not callable(getattr(timer, "time", None)):
            raise TypeError(f"timer must have a time(fn) method returning seconds, got {timer!r}")
        return timer
    if do_bench is not None:
        return DoBenchTimer(do_bench)
    return interpreter_timer() if interpreted else gpu_timer()


def accepts_keyword(timer: Any, name: str) -> bool:
    try:
        params = inspect.signature(timer.time).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
