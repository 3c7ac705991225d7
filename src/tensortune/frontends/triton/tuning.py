"""Tune one key of a Triton kernel: search, confirm the winner, record it as final.

The search is the common `Tuner` loop (every result committed to the database the
moment it exists, earlier records of the key told to the strategy first). Afterwards
the candidates within 3% of the best are re-timed interleaved (`confirm_winners`) and
the winner's confirming times are written as the key's *final* record, which is what
later processes read instead of measuring.

Example (under TRITON_INTERPRET=1 see tests/test_triton_autotune.py):
    >>> from tensortune.tuner import Budget
    >>> default_budget(space_size=216, listed=True)
    Budget(trials=216, seconds=None)
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from dataclasses import dataclass
from typing import Any

from ...db import Database, Target, Workload
from ...measure import Builder, MeasureResult
from ...space import Config, Space
from ...tuner import Budget, TuneResult, Tuner
from .compat import AutotunerError
from .runner import LaunchRunner

SPACE_DEFAULT_TRIALS = 100


class TuningFailed(AutotunerError, RuntimeError):
    """Every candidate of a key failed; the message lists why, per configuration (a Triton
    `AutotunerError`, so code that catches Triton's errors catches it)."""


def default_budget(space_size: int, listed: bool) -> Budget:
    """A list of configurations is measured whole (as triton.autotune does); a space gets
    at most SPACE_DEFAULT_TRIALS measurements."""
    return Budget(trials=space_size if listed else min(space_size, SPACE_DEFAULT_TRIALS))


def with_free_rejections(budget: Budget) -> Budget:
    """A budget whose unset `free_rejections` is its trials: a candidate the compiler rejects
    (too much shared memory for the device, a compile error) is not a measurement, so up
    to as many again as the trials may be rejected without using any up.

    Example:
        >>> with_free_rejections(Budget(trials=32)).free_rejections
        32
    """
    if budget.free_rejections is not None or budget.trials is None:
        return budget
    return dataclasses.replace(budget, free_rejections=budget.trials)


class WeakCheck(UserWarning):
    """The candidates of a key could not be checked well (no reference function, and no two
    configurations agreed, or only one ran)."""


@dataclass(frozen=True)
class KeyTuning:
    """The outcome of tuning one key."""

    config: Config
    result: TuneResult
    final: MeasureResult
    check: str = ""  # how the candidates were checked ("consensus: 3 of 3 configurations agreed; ...")


def tune_key(space: Space, runner: LaunchRunner, *, workload: Workload, target: Target, db: Database,
             budget: Budget, strategy: Any = "auto", seed: int | None = 0, builder: Builder | None = None,
             batch_size: int | None = None, progress: bool = False, description: str = "",
             confirm: bool = True, executor: Any = None) -> KeyTuning:
    """Search `space` for `workload` on `target`, confirm the winner and record it.
    `executor`: where the candidates are compiled and measured (the tuner's)."""
    size = space.size if space.size_is_exact else math.inf
    covers = budget.trials is not None and budget.trials >= size
    remote = executor not in (None, "local") and getattr(executor, "name", executor) != "local"
    if batch_size is None and not remote:  # on a cluster: the executor's parallelism
        batch_size = int(budget.trials) if covers and budget.trials else 8
    start = time.perf_counter()
    first: list[float] = []

    def on_result(r: MeasureResult) -> None:
        if not first:
            first.append(time.perf_counter() - start)

    tuner = Tuner(space, runner, workload=workload, target=target, db=db, builder=builder,
                  strategy=strategy, budget=with_free_rejections(budget), seed=seed, batch_size=batch_size,
                  progress=progress, description=description or workload.name, callbacks=[on_result],
                  executor=executor)
    result = tuner.run()
    ok = [r for r in result.history if r.ok]
    if not ok:
        raise TuningFailed(_failure_report(workload, result))
    searched = time.perf_counter() - start
    check = str(getattr(runner, "check_note", "") or "")
    if check.startswith("weak"):
        warnings.warn(f"{workload.name} {workload.key}: the configurations were checked only weakly ({check}); "
                      "give reference= to check them against known results", WeakCheck, stacklevel=4)
    final = _confirm(runner, ok, enabled=confirm)
    final = MeasureResult(final.config, final.times, compile_seconds=final.compile_seconds,
                          run_seconds=final.run_seconds,
                          extra={**final.extra, "final": True, "trials": result.trials,
                                 "reused": result.reused, "failures": result.failures,
                                 "strategy": tuner.strategy.name or "custom",
                                 "first_result_seconds": round(first[0], 3) if first else None,
                                 "search_seconds": round(searched, 3), "check": check,
                                 "worker_ready_seconds": getattr(runner, "ready_seconds", None),
                                 "tuning_seconds": round(time.perf_counter() - start, 3)})
    db.add(workload, target, final, strategy=tuner.strategy.name, session=result.session)
    return KeyTuning(final.config, result, final, check)


CONTENDERS_WITHIN = 0.10  # re-time every candidate whose fastest run is this close to the best median
CONTENDERS_LIMIT = 8


def contenders(ok: list[MeasureResult]) -> list[MeasureResult]:
    """The candidates to re-time once the search is over, best first, each ranked by its
    fastest run. Runs measured while compiles load the CPU are late by the host's launch
    delay (an upward error, large for kernels of tens of microseconds), so a candidate
    whose fastest run is near the best median may be the true winner."""
    by_config: dict[Config, MeasureResult] = {}
    for r in ok:  # the latest result per configuration
        by_config[r.config] = r
    best = min(r.time for r in by_config.values())
    near = [r for r in by_config.values() if min(r.times) <= best * (1 + CONTENDERS_WITHIN)]
    near.sort(key=lambda r: min(r.times))
    return [MeasureResult(r.config, (min(r.times),), extra=r.extra) for r in near[:CONTENDERS_LIMIT]]


def _confirm(runner: Any, ok: list[MeasureResult], enabled: bool) -> MeasureResult:
    """Re-time the contenders interleaved (`runner.confirm`); the winner's result says how sure."""
    by_config = {r.config: r for r in ok}
    best = min(by_config.values(), key=lambda r: r.time)
    if not enabled or not callable(getattr(runner, "confirm", None)):
        return best
    try:
        confirmation = runner.confirm(contenders(ok), within=CONTENDERS_WITHIN, rounds=3,
                                      limit=CONTENDERS_LIMIT)
    except Exception as exc:  # noqa: BLE001 - keep the search's winner, say why it was not confirmed
        return MeasureResult(best.config, best.times, extra={"confirmed": False,
                                                             "confirm_error": f"{type(exc).__name__}: {exc}"})
    if confirmation is None:
        return best
    winner = confirmation.winner
    times = confirmation.times.get(winner) or by_config[winner].times
    return MeasureResult(winner, tuple(times), extra=confirmation.as_extra())


def _failure_report(workload: Workload, result: TuneResult) -> str:
    lines = [f"every configuration of {workload.id_text} failed ({len(result.history)} tried):"]
    for r in result.history[:20]:
        lines.append(f"  {r.config.to_json()}: {r.error}: {r.message.splitlines()[0] if r.message else ''}")
    if len(result.history) > 20:
        lines.append(f"  ... and {len(result.history) - 20} more (see `tensortune db show`)")
    return "\n".join(lines)
