"""Timing GPU work with CUDA events: warm-up and repeats by time, cold L2, graph replays.

`CudaTimer.time(fn)` works for any callable that launches work on the current CUDA
stream (a Triton kernel, PyTorch operations, CuPy on the legacy default stream). It

1. runs `fn` once (compilation, module loading, autotuning caches stay out of the numbers),
2. estimates one run from `estimate_repeats` timed runs,
3. warms up for `warmup_seconds`, then times as many runs as fit in `budget_seconds`
   (at least `min_repeats`, at most `max_repeats`),
4. with `flush_l2`, rewrites a buffer twice the size of the device's L2 cache before
   every run, outside the timed window, so every run starts with a cold cache, and
5. returns every run's time in seconds (`MeasureResult` takes the median and spread).

`setup` (if given) runs before every run, outside the timed window, before the flush:
the GPU runner restores arguments the kernel writes there.

Launching is kept out of the timed window too (CUDA clock): before each run the GPU is
given a lead, a spin of a few times the host's measured time to launch one run (at least
`lead_seconds`), so that the run's kernels are queued before the start event is reached.
Without it the events also timed the host's launching whenever it outlasted the flush: on
an H100, a 30 us split-K matmul (two launches) measured 0.10 ms on every first run and
0.13 to 0.28 ms on most candidates while 16 compile processes loaded the host
(docs/benchmarks/gpu_measure.md).

`cooldown` (CUDA clock only): after each timed run the GPU idles, on a spin kernel that
keeps the launch queue full, for that multiple of the estimated run time (by default as
long as the run). Long, power-hungry kernels otherwise hold the GPU at its power limit,
where its clock, and so their time, wanders: on an H100 a 4096^3 fp16 matmul's runs
spread 1.2% (median absolute deviation over median) without it and 0.24% with it and
the default 0.1 s warm-up (docs/benchmarks/gpu_measure.md). For a quick first pass over
many candidates, pass a smaller `budget_seconds` and `warmup_seconds`, and confirm the
near-ties with the default.

With `cuda_graph=True`, a batch of calls is captured once in a CUDA graph and each replay
is timed (divided by the batch), which removes the launch overhead that dominates
kernels of a few microseconds; the L2 is not flushed inside a replay. With
`clock="host"` the same procedure runs on the host clock (`time.perf_counter` around a
synchronised run), for CPU tensors and tests. torch is imported only when a timer runs.

Example (on a machine with a CUDA GPU):
    >>> import torch
    >>> a = torch.randn(4096, 4096, device="cuda")                 # doctest: +SKIP
    >>> times = CudaTimer(budget_seconds=0.05).time(lambda: a @ a)  # doctest: +SKIP
    >>> len(times) >= 5                                            # doctest: +SKIP
    True
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_FALLBACK_L2_BYTES = 128 * 1024 * 1024
_FLUSH_BUFFERS: dict[Any, Any] = {}  # device index -> torch buffer, made on first use


@dataclass(frozen=True)
class CudaTimer:
    """Times a callable's GPU work; picklable, so runners send it to worker processes."""

    budget_seconds: float = 0.1
    warmup_seconds: float = 0.1
    min_repeats: int = 5
    max_repeats: int = 10_000
    estimate_repeats: int = 5
    flush_l2: bool = True
    cuda_graph: bool = False
    graph_batch: int | None = None  # calls per captured graph; None: about 1 ms of work
    cooldown: float = 1.0  # GPU idle after each timed run, as a multiple of the estimated run time
    lead_seconds: float = 1e-4  # least GPU spin before each run, while the host queues it
    clock: str = "cuda"  # "cuda" (events) or "host" (perf_counter around synchronised runs)

    def __post_init__(self) -> None:
        if self.clock not in ("cuda", "host"):
            raise ValueError(f"clock must be 'cuda' or 'host', got {self.clock!r}")
        if self.min_repeats < 1 or self.max_repeats < self.min_repeats:
            raise ValueError(f"need 1 <= min_repeats <= max_repeats, got {self.min_repeats}, {self.max_repeats}")
        if self.budget_seconds < 0 or self.warmup_seconds < 0:
            raise ValueError("budget_seconds and warmup_seconds must not be negative")

    def time(self, fn: Callable[[], object], *, setup: Callable[[], object] | None = None,
             cutoff: float | None = None) -> tuple[float, ...]:
        """Seconds per run of `fn`, one value per timed run.

        `cutoff`: if the estimate of one run exceeds it (seconds), stop there and return
        the estimate's runs: a candidate far slower than the best so far needs no more.
        """
        clock = _make_clock(self.clock, self.flush_l2 and not self.cuda_graph)
        return self._time_with(clock, fn, setup, cutoff)

    def _time_with(self, clock: "_Clock", fn: Callable[[], object], setup: Callable[[], object] | None,
                   cutoff: float | None) -> tuple[float, ...]:
        prepare = setup or _nothing
        prepare()
        fn()
        clock.synchronize()
        lead = max(self.lead_seconds, LEAD_FACTOR * _launch_seconds(clock, fn, prepare)) if clock.queues else 0.0
        estimate_runs = _timed_runs(clock, fn, prepare, max(1, self.estimate_repeats), lead=lead)
        estimate = max(statistics.median(estimate_runs), 1e-9)
        if cutoff is not None and estimate > cutoff:
            return tuple(estimate_runs)
        if self.cuda_graph:
            return self._time_graph(clock, fn, prepare, estimate, lead)
        idle = self.cooldown * estimate if clock.cools else 0.0
        per_run = estimate + idle + lead
        warmup = min(self.max_repeats, int(self.warmup_seconds / per_run))
        if warmup > 0:
            _timed_runs(clock, fn, prepare, warmup, idle, lead)
        repeats = int(min(self.max_repeats, max(self.min_repeats, self.budget_seconds / per_run)))
        return tuple(_timed_runs(clock, fn, prepare, repeats, idle, lead))

    def _time_graph(self, clock: "_Clock", fn: Callable[[], object], prepare: Callable[[], object],
                    estimate: float, lead: float) -> tuple[float, ...]:
        batch = self.graph_batch or max(1, min(1000, int(1e-3 / estimate)))
        replay = clock.capture(fn, batch)
        replay_estimate = max(statistics.median(_timed_runs(clock, replay, prepare, 3, lead=lead)), 1e-9)
        warmup = int(self.warmup_seconds / (replay_estimate + lead))
        if warmup > 0:
            _timed_runs(clock, replay, prepare, min(warmup, self.max_repeats), lead=lead)
        repeats = int(min(self.max_repeats, max(self.min_repeats, self.budget_seconds / (replay_estimate + lead))))
        return tuple(t / batch for t in _timed_runs(clock, replay, prepare, repeats, lead=lead))


LEAD_FACTOR = 3.0  # the lead covers this many times the slowest of a few measured launches


def _nothing() -> None:
    return None


def _launch_seconds(clock: "_Clock", fn: Callable[[], object], prepare: Callable[[], object],
                    tries: int = 3) -> float:
    """The host's time to queue one run (its setup, the flush and `fn`), the slowest of `tries`."""
    slowest = 0.0
    for _ in range(tries):
        start = time.perf_counter()
        prepare()
        clock.flush()
        fn()
        slowest = max(slowest, time.perf_counter() - start)
    clock.synchronize()
    return slowest


def _timed_runs(clock: "_Clock", fn: Callable[[], object], prepare: Callable[[], object],
                n: int, idle: float = 0.0, lead: float = 0.0) -> list[float]:
    marks = []
    for _ in range(n):
        if lead > 0:
            clock.idle(lead)  # the GPU spins while the host queues the run below
        prepare()
        clock.flush()
        start = clock.mark()
        fn()
        marks.append((start, clock.mark()))
        if idle > 0:
            clock.idle(idle)
    clock.synchronize()
    return [clock.seconds(a, b) for a, b in marks]


class _Clock:
    """Where times come from; one per `time()` call."""

    cools = True  # whether `cooldown` applies (a GPU's power limit; not the host's)
    queues = True  # whether work is queued asynchronously, so a run needs a lead (not on the host clock)

    def synchronize(self) -> None:
        raise NotImplementedError

    def mark(self) -> Any:
        raise NotImplementedError

    def seconds(self, start: Any, end: Any) -> float:
        raise NotImplementedError

    def flush(self) -> None:
        raise NotImplementedError

    def capture(self, fn: Callable[[], object], batch: int) -> Callable[[], object]:
        raise NotImplementedError

    def idle(self, seconds: float) -> None:
        time.sleep(seconds)


class _CudaEventClock(_Clock):
    def __init__(self, flush: bool) -> None:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("CudaTimer(clock='cuda') needs a CUDA GPU; use clock='host' on the CPU")
        self.torch = torch
        self.device = torch.cuda.current_device()
        self.buffer = l2_flush_buffer(self.device) if flush else None

    def synchronize(self) -> None:
        self.torch.cuda.synchronize(self.device)

    def mark(self) -> Any:
        event = self.torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, start: Any, end: Any) -> float:
        return start.elapsed_time(end) / 1e3

    def flush(self) -> None:
        if self.buffer is not None:
            self.buffer.zero_()

    def capture(self, fn: Callable[[], object], batch: int) -> Callable[[], object]:
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # let lazy initialisation happen outside the capture
            fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(batch):
                fn()
        self.synchronize()
        return graph.replay

    def idle(self, seconds: float) -> None:
        self.torch.cuda._sleep(max(1, int(seconds * _cycles_per_second(self.device))))


_CYCLES: dict[int, float] = {}


def _cycles_per_second(device: int) -> float:
    """GPU clock cycles per second as `torch.cuda._sleep` counts them (measured once)."""
    if device not in _CYCLES:
        import torch

        torch.cuda._sleep(100_000)  # wake the clock up
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(2_000_000)
        end.record()
        end.synchronize()
        _CYCLES[device] = 2_000_000 / max(start.elapsed_time(end) / 1e3, 1e-9)
    return _CYCLES[device]


class _HostClock(_Clock):
    """perf_counter around runs; synchronises CUDA when torch has initialised it."""

    cools = False
    queues = False

    def __init__(self) -> None:
        import sys

        torch = sys.modules.get("torch")
        self._sync = (torch.cuda.synchronize
                      if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized()
                      else _nothing)

    def synchronize(self) -> None:
        self._sync()

    def mark(self) -> Any:
        self._sync()
        return time.perf_counter()

    def seconds(self, start: Any, end: Any) -> float:
        return end - start

    def flush(self) -> None:
        return None

    def capture(self, fn: Callable[[], object], batch: int) -> Callable[[], object]:
        def replay() -> None:
            for _ in range(batch):
                fn()
        return replay


def _make_clock(kind: str, flush: bool) -> _Clock:
    return _CudaEventClock(flush) if kind == "cuda" else _HostClock()


def l2_cache_bytes(device: int | None = None) -> int:
    """The L2 cache size of a CUDA device in bytes (128 MiB if torch does not say)."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device() if device is None else device)
    return int(getattr(props, "L2_cache_size", 0) or _FALLBACK_L2_BYTES)


def l2_flush_buffer(device: int) -> Any:
    """A device buffer of at least twice the L2 size (made once per device and process)."""
    import torch

    buffer = _FLUSH_BUFFERS.get(device)
    if buffer is None:
        nbytes = max(2 * l2_cache_bytes(device), 64 * 1024 * 1024)
        buffer = torch.empty(nbytes // 4, dtype=torch.int32, device=f"cuda:{device}")
        _FLUSH_BUFFERS[device] = buffer
    return buffer
