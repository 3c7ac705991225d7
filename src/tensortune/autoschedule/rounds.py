"""A search kept between the rounds of a task scheduler, finished by re-timing its finalists.

The CPU auto-scheduler's and the fused attention kernel's sessions share it: both search
with a `Tuner`, then re-time the finalists interleaved in their isolated runner, record
the winner (strategy "confirm", extra `confirmed`, `finalists`, `rounds`,
`best_run_median`) and build it. A session says only how a configuration becomes its
kernel (`build_kernel`, `rebuild_kernel`), how finalists are ranked and what its
messages say.

Example:
    >>> from tensortune.autoschedule.api import _Session
    >>> from tensortune.autoschedule.attention import AttentionSession
    >>> issubclass(_Session, TunerRounds) and issubclass(AttentionSession, TunerRounds)
    True
    >>> _Session.finalist_ranks, AttentionSession.finalist_ranks
    (('median', 'fastest'), ('fastest',))
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

from ..db import Database, Record, Target
from ..measure import MeasureResult
from ..space import Config
from ..tuner import Budget, Tuner, TuningFailed
from .measure import CheckSpec, SketchBuilder, SketchRunner, time_interleaved

KernelT = TypeVar("KernelT")

RANKS: dict[str, Callable[[Record], float]] = {
    "median": lambda r: r.time,  # the record's median time
    "fastest": lambda r: min(r.times),  # its fastest run, which a busy machine does not hide
}


def pick_finalists(records: Sequence[Record], k: int, ranks: Sequence[str],
                   within: float = 0.15) -> list[Record]:
    """Up to `k` records by each rank (a name in `RANKS`) that are within `within` of the
    best by that rank, in the order found, each once."""
    finalists: list[Record] = []
    for rank in ranks:
        key = RANKS[rank]
        ranked = sorted(records, key=key)
        bound = key(ranked[0]) * (1 + within)
        for r in ranked[:k]:
            if key(r) <= bound and r not in finalists:
                finalists.append(r)
    return finalists


def confirmed_winner(records: Sequence[Record], per_round: Sequence[Sequence[tuple[float, ...]]], rounds: int,
                     margin: bool) -> MeasureResult:
    """The result to record for the winner of an interleaved re-timing: `per_round[i]` holds
    the times of `records[i]` in each round. The winner has the lowest median, over
    rounds, of its fastest run in a round (a neighbour's load only makes a run slower);
    `margin` adds how much slower the runner-up's score is, as a fraction."""
    scores = [statistics.median(min(times) for times in rounds_) for rounds_ in per_round]
    win = int(np.argmin(scores))
    extra = {**records[win].extra, "confirmed": True, "finalists": len(records), "rounds": rounds,
             "best_run_median": scores[win]}
    if margin:
        ranked = sorted(scores)
        extra["margin"] = round(ranked[1] / ranked[0] - 1, 4) if len(ranked) > 1 else 0.0
    return MeasureResult(records[win].config, tuple(t for times in per_round[win] for t in times), extra=extra)


class TunerRounds(Generic[KernelT]):
    """A search kept between the rounds of a task scheduler: `run` measures up to a budget
    more candidates with the session's `tuner`, going on where the last round stopped;
    `finish` re-times the finalists and returns the winner's kernel.

    A subclass sets the attributes below and gives `build_kernel`, `rebuild_kernel` and
    `failure_message`."""

    problem: Any  # its `name` and `workload`
    db: Database
    target: Target
    spec: CheckSpec
    runner: SketchRunner
    builder: SketchBuilder
    tuner: Tuner
    results: list[MeasureResult]
    seconds: float

    finalist_ranks: tuple[str, ...] = ("median", "fastest")  # names in `RANKS`
    records_margin = True  # the confirm record says the winner's margin over the runner-up
    winner_fallback = ""  # added to the warning when the confirmed winner cannot be built

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

    def build_kernel(self, config: Config, best_time: float, trials: int, seconds: float) -> KernelT:
        """`config` built and verified as this session's kernel."""
        raise NotImplementedError

    def rebuild_kernel(self, trials: int, seconds: float) -> KernelT | None:
        """The best recorded configuration built and verified, or None."""
        raise NotImplementedError

    def failure_message(self) -> str:
        """What `finish` raises when no recorded configuration builds."""
        raise NotImplementedError

    def finish(self, confirm: int = 4, rounds: int = 5) -> KernelT:
        """Re-time up to `confirm` finalists by each rank over `rounds` (when `confirm` > 1),
        close the runner and return the winner built, else the best record that builds."""
        start = time.perf_counter()
        try:
            best = self.confirm(confirm, rounds) if confirm > 1 else None
        finally:
            self.runner.close()
        self.seconds += time.perf_counter() - start
        if best is not None:
            try:
                return self.build_kernel(best.config, best.time, len(self.results), self.seconds)
            except Exception as exc:  # noqa: BLE001 - fall back on the other records, said why
                warnings.warn(f"{self.problem.name}: the confirmed winner could not be rebuilt ({exc})"
                              f"{self.winner_fallback}", stacklevel=2)
        kernel = self.rebuild_kernel(len(self.results), self.seconds)
        if kernel is None:
            raise TuningFailed(self.failure_message())
        return kernel

    def confirm(self, k: int, rounds: int, within: float = 0.15) -> MeasureResult | None:
        """Re-time the finalists interleaved and record the winner.

        Finalists are the candidates within 15% of the best by each of `finalist_ranks`
        (the fastest run: a good kernel measured while the machine was busy keeps a fast
        run); the winner is `confirmed_winner`'s."""
        results = [r for r in self.db.records(self.problem.workload, self.target) if r.ok and "same_source_as"
                   not in r.extra and r.strategy != "confirm"]
        if not results:
            return None
        libs, records = [], []
        for r in pick_finalists(results, k, self.finalist_ranks, within):
            b = self.builder.build([r.config])[0]
            if b.ok:
                libs.append(b.artifact.library)
                records.append(r)
        if not libs:
            return None
        per_round = self.runner.worker.call(time_interleaved, libs, "kernel", self.spec, self.runner.timer,
                                            rounds, 7)
        result = confirmed_winner(records, per_round, rounds, self.records_margin)
        self.db.add(self.problem.workload, self.target, result, strategy="confirm")
        return result
