"""Frozen records of building and measuring one candidate.

Example:
    >>> from tensortune.space import Config
    >>> r = MeasureResult(Config(a=1), times=(2e-3, 1e-3, 3e-3))
    >>> r.ok, r.time
    (True, 0.002)
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from ..space import Config
from .errors import ErrorKind


@dataclass(frozen=True)
class BuildResult:
    """A compiled candidate (`artifact` is whatever the runner needs: a path, a kernel)."""

    config: Config
    artifact: Any = None
    error: ErrorKind | None = None
    message: str = ""
    compile_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class MeasureResult:
    """Every timed run of one candidate in seconds, or why it failed."""

    config: Config
    times: tuple[float, ...] = ()
    error: ErrorKind | None = None
    message: str = ""
    compile_seconds: float = 0.0
    run_seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.times)

    @property
    def rejected_by_build(self) -> bool:
        """Failed before running: the builder rejected it (a compile error, or more of a
        resource than the device has); it cost compile time but no measurement."""
        return not self.ok and self.extra.get("stage") == "build"

    @property
    def time(self) -> float:
        """Median time in seconds; infinity for a failed candidate."""
        return statistics.median(self.times) if self.ok else math.inf

    @property
    def spread(self) -> float:
        """Median absolute deviation over the median (0.01 = 1%)."""
        if not self.ok or len(self.times) < 2:
            return 0.0
        med = self.time
        mad = statistics.median(abs(t - med) for t in self.times)
        return mad / med if med > 0 else 0.0

    @staticmethod
    def failed(config: Config, kind: ErrorKind, message: str, **kw: Any) -> "MeasureResult":
        return MeasureResult(config, (), kind, message[:4000], **kw)
