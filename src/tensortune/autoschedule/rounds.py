"""A search kept between the rounds of a task scheduler.

The CPU auto-scheduler's and the fused attention kernel's sessions share it.

Example:
    >>> from tensortune.autoschedule.api import _Session
    >>> from tensortune.autoschedule.attention import AttentionSession
    >>> issubclass(_Session, TunerRounds) and issubclass(AttentionSession, TunerRounds)
    True
"""

from __future__ import annotations

import time

from ..measure import MeasureResult
from ..tuner import Budget, Tuner


class TunerRounds:
    """A search kept between the rounds of a task scheduler: `run` measures up to a budget
    more candidates with the session's `tuner`, going on where the last round stopped."""

    tuner: Tuner
    results: list[MeasureResult]
    seconds: float

    def run(self, budget: Budget) -> list[MeasureResult]:
        """Measure up to the budget more candidates (the search goes on where it stopped)."""
        start = time.perf_counter()
        try:
            self.tuner.budget = budget
            result = self.tuner.run()
            new = list(result.history[result.reused:])
            self.results.extend(new)
            return new
        finally:
            self.seconds += time.perf_counter() - start

    def tune(self, trials: int) -> list[MeasureResult]:
        """Measure up to `trials` more candidates."""
        return self.run(Budget(trials=trials))
