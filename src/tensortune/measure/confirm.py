"""Confirming a winner: near-ties are re-timed interleaved before one is declared best.

A single timing pass can pick the wrong winner when candidates are within noise of each
other (clock drift, thermal state, a neighbour's work). `confirm_winners` takes the
candidates within `within` (3%) of the best, times them in `rounds` interleaved rounds
(every round times each contender once, in a fresh shuffled order, so slow drifts hit
all of them alike), and declares the one with the lowest median over all rounds. The
`Confirmation` says how sure that is: `confidence` is the share of rounds the winner won,
`margin` how far the runner-up's median is behind.

Example:
    >>> import time
    >>> from tensortune.measure import Timer
    >>> fast, slow = (lambda: time.sleep(0.001)), (lambda: time.sleep(0.003))
    >>> c = confirm_winners({"fast": fast, "slow": slow}, Timer(min_repeats=3, budget_seconds=0),
    ...                     within=None, rounds=3)
    >>> c.winner, c.confidence
    ('fast', 1.0)
"""

from __future__ import annotations

import dataclasses
import random
import statistics
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .result import MeasureResult


class TimesCallables(Protocol):
    def time(self, fn: Callable[[], object]) -> tuple[float, ...]: ...


@dataclass(frozen=True)
class Confirmation:
    """The outcome of interleaved re-timing (times in seconds)."""

    winner: Any
    confidence: float  # share of rounds in which the winner had the lowest median, 0..1
    margin: float  # runner-up median / winner median - 1 (0 with a single contender)
    medians: dict[Any, float] = field(default_factory=dict)
    times: dict[Any, tuple[float, ...]] = field(default_factory=dict)
    rounds: int = 0

    def as_extra(self) -> dict[str, Any]:
        """What goes into a record's `extra` to say how the winner was chosen."""
        return {"confirmed": True, "confidence": round(self.confidence, 4),
                "margin": round(self.margin, 5), "contenders": len(self.medians), "rounds": self.rounds}


def near_ties(results: Sequence[MeasureResult], within: float = 0.03,
              limit: int = 8) -> list[MeasureResult]:
    """The successful results whose median is within `within` of the best (at most `limit`)."""
    ok = sorted((r for r in results if r.ok), key=lambda r: r.time)
    if not ok:
        return []
    bound = ok[0].time * (1.0 + within)
    return [r for r in ok if r.time <= bound][:limit]


def confirm_winners(candidates: Mapping[Hashable, Callable[[], object]], timer: TimesCallables, *,
                    prior: Mapping[Hashable, float] | None = None, within: float | None = 0.03,
                    rounds: int = 5, seed: int = 0,
                    setup: Mapping[Hashable, Callable[[], object]] | None = None) -> Confirmation:
    """Re-time the candidates near the best interleaved and return the confirmed winner.

    `candidates` maps a key (a Config, a name) to a callable that runs it once. With
    `prior` times (seconds) and a `within` fraction, only candidates within that fraction
    of the best prior time are re-timed; `within=None` re-times all. `setup` optionally
    maps keys to a callable run before each of their runs outside the timed window (the
    timer must accept `setup=`, as `CudaTimer` does).
    """
    if not candidates:
        raise ValueError("confirm_winners needs at least one candidate")
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    keys = list(candidates)
    if prior is not None and within is not None:
        known = {k: prior[k] for k in keys if k in prior}
        if known:
            bound = min(known.values()) * (1.0 + within)
            keys = [k for k in keys if k not in known or known[k] <= bound]
    if len(keys) == 1:
        only = keys[0]
        return Confirmation(only, 1.0, 0.0, {only: prior.get(only, 0.0) if prior else 0.0}, {}, 0)
    rng = random.Random(seed)
    per_round: list[dict[Hashable, float]] = []
    all_times: dict[Hashable, list[float]] = {k: [] for k in keys}
    for _ in range(rounds):
        order = keys[:]
        rng.shuffle(order)
        medians = {}
        for k in order:
            if setup and k in setup:
                times = timer.time(candidates[k], setup=setup[k])  # type: ignore[call-arg]
            else:
                times = timer.time(candidates[k])
            all_times[k].extend(times)
            medians[k] = statistics.median(times)
        per_round.append(medians)
    medians = {k: statistics.median(v) for k, v in all_times.items()}
    ranked = sorted(keys, key=lambda k: medians[k])
    winner = ranked[0]
    wins = sum(1 for m in per_round if min(m, key=m.__getitem__) == winner)
    margin = medians[ranked[1]] / medians[winner] - 1.0 if medians[winner] > 0 else 0.0
    return Confirmation(winner, wins / rounds, margin, medians,
                        {k: tuple(v) for k, v in all_times.items()}, rounds)


def shorter(timer: Any, rounds: int) -> Any:
    """The same timer with its time budget split across `rounds` (dataclass timers only)."""
    if dataclasses.is_dataclass(timer) and hasattr(timer, "budget_seconds"):
        return dataclasses.replace(timer, budget_seconds=timer.budget_seconds / max(1, rounds))
    return timer
