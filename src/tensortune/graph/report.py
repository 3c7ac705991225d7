"""What compiling a model did: its tasks, what fell back to ATen, and where the time goes.

`profile` times every step of a plan (kernels, ATen calls, buffer reshapes) over a few
calls (the profiler's device time on the GPU; on the CPU the wall time of each step as
the plan runs, its C kernels timed inside their native sequence) and the
report adds them up per task and per fallback, so a user sees which share of the
model's time runs in tensortune's kernels and what the rest is.

Example:
    >>> r = CompileReport("cpu", tasks=[TaskReport("mm 4x8", 2, 8, 1e-6, "tuned", 2e-6)],
    ...                   fallbacks=[FallbackReport("aten.cumsum.default", "no lowering rule", 1, 1e-6)])
    >>> round(r.kernel_share, 3)
    0.667
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class TaskReport:
    """One distinct kernel: how often it runs, how it was found, its time in the model."""

    label: str
    weight: int
    trials: int
    best_time: float  # seconds, as measured while tuning (nan when built from records without a time)
    source: str  # tuned | records | torch (reason)
    time: float = 0.0  # seconds per model call, all occurrences (profiled)
    key: str = ""


@dataclass(frozen=True)
class FallbackReport:
    """An op run by ATen: why, how often, its time per model call."""

    op: str
    reason: str
    count: int
    time: float = 0.0


@dataclass
class CompileReport:
    """Tasks, fallbacks, time shares, tuning time and the check (see the module docstring)."""

    target: str
    tasks: list[TaskReport] = field(default_factory=list)
    fallbacks: list[FallbackReport] = field(default_factory=list)
    other_time: float = 0.0  # reshapes and dtype conversions between steps
    tuning_seconds: float = 0.0
    compile_seconds: float = 0.0
    kernels: int = 0
    nodes: int = 0
    check: str = ""
    graphs: int = 1
    decisions: list[str] = field(default_factory=list)  # cuts chosen by measurement (`prologues="measure"`)

    @property
    def kernel_time(self) -> float:
        return sum(t.time for t in self.tasks if not t.source.startswith("torch"))

    @property
    def total_time(self) -> float:
        return self.kernel_time + sum(t.time for t in self.tasks if t.source.startswith("torch")) + \
            sum(f.time for f in self.fallbacks) + self.other_time

    @property
    def kernel_share(self) -> float:
        """The share of the model's time spent in kernels tensortune generated and tuned."""
        total = self.total_time
        return self.kernel_time / total if total > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(kernel_time=self.kernel_time, total_time=self.total_time, kernel_share=self.kernel_share)
        return d

    def table(self) -> str:
        from ..progress import format_time
        lines = [f"{self.kernels} kernels ({len(self.tasks)} tasks) from {self.nodes} stages on {self.target}; "
                 f"tuned in {self.tuning_seconds:.1f} s, compiled in {self.compile_seconds:.1f} s",
                 f"{self.kernel_share:.1%} of {format_time(self.total_time)} per call in tensortune kernels; "
                 f"check: {self.check}"] + [f"cut: {d}" for d in self.decisions]
        total = self.total_time or 1.0
        for t in sorted(self.tasks, key=lambda t: -t.time):
            lines.append(f"  {t.time / total:6.1%}  x{t.weight:<3d} {t.label:40s} {t.trials:4d} trials  "
                         f"{format_time(t.best_time):>12s}  {t.source}")
        for f in sorted(self.fallbacks, key=lambda f: -f.time):
            lines.append(f"  {f.time / total:6.1%}  x{f.count:<3d} {f.op:40s} ATen ({f.reason})")
        if self.other_time:
            lines.append(f"  {self.other_time / total:6.1%}  reshapes and conversions")
        return "\n".join(lines)


def profile(plan: Any, inputs: Sequence[Any], device: str, runs: int = 5) -> dict[int, float]:
    """Seconds of each step of `plan` (by position) per call: on the GPU the device time of
    the kernels each step launches (torch's profiler), so the host's time between launches
    (which a CUDA graph removes) is no step's; on the CPU the median wall time of the step."""
    if device == "cuda":
        try:
            return _profile_cuda(plan, inputs, runs)
        except Exception:  # noqa: BLE001 - a profiler that cannot run here: time with events instead
            pass
    return _profile_wall(plan, inputs, device, runs)


def _profile_cuda(plan: Any, inputs: Sequence[Any], runs: int) -> dict[int, float]:
    import torch
    from torch.profiler import ProfilerActivity, profile as torch_profile, record_function

    plan.run(inputs)  # warm-up outside the profile
    torch.cuda.synchronize()
    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            plan.run(inputs, around=lambda pos: record_function(f"tensortune_step_{pos}"))
        torch.cuda.synchronize()
    totals: dict[int, float] = {pos: 0.0 for pos in range(len(plan.steps))}
    for e in prof.events():
        if e.name.startswith("tensortune_step_"):
            pos = int(e.name.rsplit("_", 1)[1])
            totals[pos] += float(getattr(e, "device_time_total", getattr(e, "cuda_time_total", 0.0))) * 1e-6
    if not any(totals.values()):
        raise RuntimeError("the profiler saw no device time")
    return {pos: t / runs for pos, t in totals.items()}


def _profile_wall(plan: Any, inputs: Sequence[Any], device: str, runs: int) -> dict[int, float]:
    import contextlib

    import torch

    times: dict[int, list[float]] = {}
    if device == "cpu":  # the plan as it runs: C kernels timed in C, the other steps around their Python
        plan.run(inputs)
        for _ in range(runs):
            seconds: dict[int, float] = {}
            plan.run(inputs, seconds=seconds)
            for pos, t in seconds.items():
                times.setdefault(pos, []).append(t)
        return {pos: statistics.median(v) for pos, v in times.items()}

    @contextlib.contextmanager
    def timed(pos: int) -> Any:
        start = time.perf_counter()
        yield
        if device == "cuda":
            torch.cuda.synchronize()
        times.setdefault(pos, []).append(time.perf_counter() - start)

    for _ in range(runs):
        plan.run(inputs, around=timed)
    return {pos: statistics.median(v) for pos, v in times.items()}
