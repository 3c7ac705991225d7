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
    """A compiled candidate (`artifact` is whatever the runner needs: a path, a kernel).

    `environment`: why the environment failed the build ("" when the candidate did)."""

    config: Config
    artifact: Any = None
    error: ErrorKind | None = None
    message: str = ""
    compile_seconds: float = 0.0
    environment: str = ""

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
    def environment(self) -> str:
        """Why the environment, not the candidate, failed ("" for the candidate's own
        failure or a success): such a failure is retried rather than taken as the
        candidate's result (see `errors.environment_cause`)."""
        return "" if self.ok else str(self.extra.get("environment", ""))

    @property
    def requeued(self) -> bool:
        """A failure of the environment that only says the machine measuring it was lost
        (a Ray node or actor, with the candidate in flight): measured again elsewhere,
        and no sign that the environment keeps failing (the tuner's give-up streak)."""
        return bool(self.environment and self.extra.get("requeued"))

    @property
    def amends(self) -> bool:
        """A correction of an earlier result of the same configuration, not a new
        measurement: the candidate was found to have crashed its worker after it had
        returned (see `measure.attribution`)."""
        return bool(self.extra.get("amends"))

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
    def failed(config: Config, kind: ErrorKind, message: str, environment: str = "", **kw: Any) -> "MeasureResult":
        """A failed result; `environment` names why the environment failed it, if it did."""
        if environment:
            kw["extra"] = {**kw.get("extra", {}), "environment": environment}
        return MeasureResult(config, (), kind, message[:4000], **kw)


def failed_build(build: BuildResult) -> MeasureResult:
    """The result of a candidate that did not build: its build's error, as a measurement."""
    assert build.error is not None
    return MeasureResult.failed(build.config, build.error, build.message, build.environment,
                                compile_seconds=build.compile_seconds, extra={"stage": "build"})
