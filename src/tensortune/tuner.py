"""The tuning loop: ask the strategy, build in parallel, run, record on arrival, tell.

Every frontend (plain callables, Triton kernels, tensor expressions) describes what is
tuned with a space, a builder and a runner, and hands them to a `Tuner`.

Example:
    >>> from tensortune.space import Space
    >>> from tensortune.measure import CallableRunner, Timer
    >>> from tensortune.db import Database, Workload, Target
    >>> space = Space({"n": [100, 1000, 10000]})
    >>> runner = CallableRunner(lambda n: sum(range(n)), Timer(min_repeats=2, budget_seconds=0))
    >>> result = Tuner(space, runner, workload=Workload.make("sum"), target=Target.make("cpu", "x"),
    ...                db=Database(":memory:"), progress=False).run()
    >>> result.best_config["n"], result.trials
    (100, 3)
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .db import Database, Target, Workload
from .db.writer import RecordWriter
from .measure import Builder, Executor, MeasureResult, NullBuilder, Runner, make_executor
from .progress import TuneProgress
from .search import SearchStrategy, create_strategy
from .space import Config, Space
from .tuner_scope import adopt


@dataclass(frozen=True)
class Budget:
    """Stop after `trials` unique configurations measured in this run, or after `seconds`.

    A candidate the builder rejects (it fails to compile, or needs more shared memory than
    the device has) is recorded as a failure like any other, but the first
    `free_rejections` of them do not use up trials: they cost compile time, never a
    measurement. None (the default) means 0 to the Tuner, which counts every candidate (as
    the replay benchmarks do); the Triton frontend reads it as `trials`.

    Example:
        >>> from tensortune.measure import ErrorKind
        >>> b = Budget.of({"trials": 32, "free_rejections": 8})
        >>> rejected = MeasureResult.failed(Config(a=1), ErrorKind.OUT_OF_RESOURCES, "", extra={"stage": "build"})
        >>> b.charges(rejected, rejections_before=7), b.charges(rejected, rejections_before=8)
        (False, True)
    """

    trials: int | None = None
    seconds: float | None = None
    free_rejections: int | None = None

    def __post_init__(self) -> None:
        if self.trials is None and self.seconds is None:
            raise ValueError("a budget needs trials, seconds, or both")
        for name in ("trials", "free_rejections"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral)):
                raise ValueError(f"budget {name} must be a whole number, got {value!r}")
        if self.seconds is not None and (isinstance(self.seconds, bool) or not isinstance(self.seconds, numbers.Real)
                                         or math.isnan(self.seconds)):
            raise ValueError(f"budget seconds must be a number, got {self.seconds!r}")
        if self.trials is not None and self.trials < 1:
            raise ValueError(f"budget trials must be at least 1, got {self.trials}")
        if self.seconds is not None and self.seconds <= 0:
            raise ValueError(f"budget seconds must be positive, got {self.seconds}")
        if self.free_rejections is not None and self.free_rejections < 0:
            raise ValueError(f"budget free_rejections must be at least 0, got {self.free_rejections}")

    def charges(self, result: MeasureResult, rejections_before: int) -> bool:
        """Whether `result` uses up a trial, after `rejections_before` rejections this run."""
        return not (result.rejected_by_build and rejections_before < (self.free_rejections or 0))

    @staticmethod
    def of(value: "Budget | int | float | dict[str, Any] | None", default_trials: int = 100) -> "Budget":
        if value is None:
            return Budget(trials=default_trials)
        if isinstance(value, Budget):
            return value
        if isinstance(value, dict):
            unknown = sorted(set(value) - {"trials", "seconds", "free_rejections"})
            if unknown:
                raise ValueError(f"unknown budget key(s) {unknown}; known: trials, seconds, free_rejections")
            return Budget(**value)
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return Budget(trials=int(value))
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            return Budget(seconds=float(value))
        raise ValueError(f"a budget is a number of trials (int), of seconds (float), a dict or a Budget; "
                         f"got {value!r}")


ENVIRONMENT_RETRIES = 2  # times one run measures a candidate again after the environment failed it
ENVIRONMENT_GIVE_UP = 8  # environment failures in a row, with nothing else, that stop a run


class TuningFailed(RuntimeError):
    """Nothing could be measured: every candidate failed, or the environment did. The
    message says why, per candidate, and what to do."""


@dataclass(frozen=True)
class TuneResult:
    """The outcome of a tuning run; `history` holds earlier records of the workload too.

    `trials`: candidates measured by this run (environment failures and amendments of
    earlier results not counted). `stopped`: why the run stopped before its budget, if
    the environment stopped it ("" otherwise).
    """

    best: MeasureResult | None
    history: tuple[MeasureResult, ...]
    trials: int
    seconds: float
    session: str = ""
    reused: int = 0
    from_db: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    stopped: str = ""

    @property
    def best_config(self) -> Config | None:
        return self.best.config if self.best else None

    @property
    def best_time(self) -> float:
        return self.best.time if self.best else math.inf

    @property
    def failures(self) -> int:
        return sum(1 for r in self.history if not r.ok)

    @property
    def environment_failures(self) -> int:
        return sum(1 for r in self.history if r.environment)

    def failure_report(self, name: str, limit: int = 12) -> str:
        """Why nothing succeeded: the environment's failures, then each failed candidate."""
        lines = [f"{name}: nothing ran correctly ({self.trials} measured in this run, {self.reused} recorded before)"]
        if self.stopped:
            lines.append(f"  stopped: {self.stopped}")
        failed = [r for r in self.history if not r.ok]
        for r in failed[:limit]:
            cause = f" [environment: {r.environment}]" if r.environment else ""
            first = r.message.splitlines()[0] if r.message else ""
            lines.append(f"  {r.config.to_json()}: {r.error}{cause}: {first[:200]}")
        if len(failed) > limit:
            lines.append(f"  ... and {len(failed) - limit} more (see `tensortune db show`)")
        if self.environment_failures:
            lines.append("  the environment's failures are measured again by the next run once it is fixed")
        return "\n".join(lines)


def standing(results: Sequence[MeasureResult]) -> dict[Config, MeasureResult]:
    """Each configuration's latest result that says something about the candidate: a
    failure of the environment does not; a later failure of the candidate itself (such as
    a crash found after it had returned) overrides an earlier success."""
    return {r.config: r for r in results if not r.environment}


def best_of(results: Sequence[MeasureResult]) -> MeasureResult | None:
    """The fastest success among the configurations whose standing is a success."""
    good = {c for c, r in standing(results).items() if r.ok}
    ok = [r for r in results if r.ok and r.config in good]
    return min(ok, key=lambda r: r.time) if ok else None


class Tuner:
    """Drives one workload's search on one target; results go to the database on arrival.

    Each result is handed to a `RecordWriter` (a thread that commits at once when idle,
    and in one transaction whatever arrived during its previous commit) and to the
    callbacks; results are committed before the strategy is told of them, before more
    candidates are asked for and before `run` returns. An executor that streams (Ray)
    asks for more candidates as its slots free up instead of at each batch's end.

    `executor`: where each batch is built and measured: "local" (the builder's processes,
    then the runner's worker; the default), "ray" (Ray tasks and actors on the cluster at
    `ray_address`, docs/distributed.md), or an `Executor` object (the caller closes it;
    one named by a string is closed at the end of each run). `batch_size` (default: the
    executor's parallelism) is how many candidates the strategy is asked for at once."""

    def __init__(
        self,
        space: Space,
        runner: Runner,
        *,
        workload: Workload,
        target: Target,
        db: Database | None = None,
        builder: Builder | None = None,
        strategy: str | SearchStrategy = "auto",
        strategy_options: dict[str, Any] | None = None,
        budget: Budget | int | float | None = None,
        seed: int | None = None,
        batch_size: int | None = None,
        progress: bool = True,
        description: str | None = None,
        callbacks: Sequence[Callable[[MeasureResult], None]] = (),
        transfer: bool = True,
        retune: bool = False,
        retry_failed: bool = False,
        executor: str | Executor | None = None,
        ray_address: str | None = None,
    ) -> None:
        self.space = space
        self.runner = runner
        self.builder = builder or NullBuilder()
        self.workload = workload
        self.target = target
        self.db = db
        self.budget = Budget.of(budget)
        # where candidates are built and measured: "local" (this machine's pools, the default)
        # or "ray"; an executor named here is the tuner's own, closed at the end of each run
        self.executor = make_executor(executor, ray_address)
        self._owns_executor = executor is None or isinstance(executor, str)
        self.batch_size = batch_size  # None: the executor's parallelism
        self.strategy = create_strategy(strategy, space, seed=seed, budget=self.budget.trials,
                                        **(strategy_options or {}))
        self.progress = progress
        self.description = description or workload.name
        self.callbacks = list(callbacks)
        self.transfer = transfer
        self.retune = retune  # measure again what is recorded (the records stay)
        self.retry_failed = retry_failed  # measure again the candidates recorded as failed
        self.seed = seed
        self.transferred_from = 0  # records of other shapes or devices the search started from
        self._heard: dict[Config, tuple[Any, ...]] = {}  # what the strategy was told of each configuration
        adopt(self)  # made inside a `tuner_scope` (a fleet job that tunes itself): its hook adapts this tuner

    def run(self) -> TuneResult:
        asked: dict[Config, None] = {}  # proposed by the strategy in this run, in order
        measured: set[Config] = set()  # of those, the ones with a result of their own
        try:
            return self._run(asked, measured)
        finally:
            try:
                if self._owns_executor:
                    self.executor.close()
            finally:
                self.strategy.run_ended([c for c in asked if c not in measured])

    def _run(self, asked: dict[Config, None], measured: set[Config]) -> TuneResult:
        start = time.perf_counter()
        self._use_transfer()
        prior = self._prior_results()
        # a tuner run again (a task scheduler's next round) tells only what its strategy has not heard
        self._tell([r for r in prior if self._heard.get(r.config) != _standing(r)])
        session = (self.db.start_session(self.workload, self.target, self.strategy.name or "custom",
                                         {"trials": self.budget.trials, "seconds": self.budget.seconds})
                   if self.db else "")
        new: list[MeasureResult] = []
        charged = rejected = 0  # trials used up; builder rejections seen
        best = best_of(prior)
        status = "interrupted"
        retry: list[Config] = []  # failed by the environment: measured again in a later batch
        pending: set[Config] = set()  # handed to the executor, no result yet
        told: list[MeasureResult] = []  # results the strategy has not heard of yet
        proposed: list[Config] = []  # asked of the strategy, not handed to the executor yet
        tries: dict[Config, int] = {}
        streak = 0  # environment failures in a row
        stopped = ""
        writer = (RecordWriter(self.db, self.workload, self.target, self.strategy.name, session)
                  if self.db is not None else None)
        try:
            with TuneProgress(self._planned_trials(prior), self.description, self.progress) as bar:
                if best:
                    bar.update(best.time, advance=0)
                batch = self.batch_size or self.executor.parallelism(self.builder, self.target)

                def ask(n: int) -> list[Config]:
                    """Up to `n` candidates (those to measure again first), within the trials
                    left once the ones in flight are counted; the strategy first hears of every
                    result so far, each recorded before it does."""
                    nonlocal retry
                    if stopped or self._out_of_time(start):
                        return []
                    if told:
                        if writer is not None:
                            writer.flush()
                        self._tell(told)
                        told.clear()
                    room = math.inf if self.budget.trials is None else self.budget.trials - charged - len(pending)
                    n = int(min(n, room))
                    if n <= 0:
                        return []
                    configs, retry = retry[:n], retry[n:]
                    if len(configs) < n and not proposed:
                        # the strategy is asked for whole batches, handed out as slots free up, so
                        # that a seeded search proposes the same candidates however the slots free up
                        fresh = self.strategy.ask(int(min(batch, room - len(configs))))
                        asked.update(dict.fromkeys(fresh))
                        proposed.extend(fresh)
                    taken = proposed[:n - len(configs)]
                    del proposed[:len(taken)]
                    configs += taken
                    pending.update(configs)
                    return configs

                # an executor that streams asks for more as its slots free up (no batch barrier)
                more = ask if getattr(self.executor, "streams", False) else None
                while not stopped and not self._exhausted(charged, start):
                    configs = ask(batch)
                    if not configs:
                        break
                    measure = (self.executor.measure(self.builder, self.runner, configs, self.target, more=more)
                               if more is not None else
                               self.executor.measure(self.builder, self.runner, configs, self.target))
                    for result in measure:
                        if writer is not None:
                            writer.add(result)  # committed by the writer's thread at once, or with the next group
                        new.append(result)
                        if not result.amends:
                            pending.discard(result.config)
                        if result.amends:  # an earlier success turned out to crash its worker
                            told.append(result)
                            best = best_of(tuple(prior) + tuple(new))
                            bar.update(best.time if best else math.inf, failed=True, advance=0)
                        elif result.environment:  # not the candidate's doing: try it again later
                            streak += 0 if result.requeued else 1  # a lost node says nothing of the others
                            tries[result.config] = tries.get(result.config, 0) + 1
                            if tries[result.config] <= ENVIRONMENT_RETRIES:
                                retry.append(result.config)
                            bar.update(best.time if best else math.inf, failed=True, advance=0)
                            if streak >= ENVIRONMENT_GIVE_UP:
                                stopped = (f"the environment failed {streak} candidates in a row "
                                           f"({result.environment}): {result.message.splitlines()[0][:200]}")
                        else:
                            streak = 0
                            measured.add(result.config)
                            cost = int(self.budget.charges(result, rejected))
                            charged += cost
                            rejected += int(result.rejected_by_build)
                            told.append(result)
                            if result.ok and (best is None or result.time < best.time):
                                best = result
                            bar.update(best.time if best else math.inf, failed=not result.ok, advance=cost)
                        for cb in self.callbacks:
                            cb(result)
                        if self._out_of_time(start):
                            break
                    if writer is not None:
                        writer.flush()  # durable before the strategy hears of the batch and the next is asked for
                    self._tell(told)
                    told.clear()
                    pending.clear()  # a run left early (out of time) took its candidates with it
                late = self.executor.late_results(self.runner)
                for result in late:  # amendments that showed only after the last candidate
                    if writer is not None:
                        writer.add(result)
                    new.append(result)
                    for cb in self.callbacks:
                        cb(result)
                if writer is not None:
                    writer.flush()
                if late:
                    self._tell(late)
                    best = best_of(tuple(prior) + tuple(new))
                bar.finish()
            status = "finished" if not stopped else "environment"
        finally:
            try:
                if writer is not None:
                    writer.close()  # what arrived before an interruption is committed too
            finally:
                if self.db and session:
                    self.db.finish_session(session, status)
        measured = sum(1 for r in new if not r.amends and not r.environment)
        return TuneResult(best, tuple(prior) + tuple(new), measured, time.perf_counter() - start,
                          session, reused=len(prior), stopped=stopped)

    def _planned_trials(self, prior: Sequence[MeasureResult]) -> int | None:
        """The trials the progress bar counts to: the budget's, or fewer when the space has
        fewer configurations left; None for a time budget alone (no total is known)."""
        if self.budget.trials is None:
            return None
        try:
            if not self.space.size_is_exact:  # an estimate: the budget's number, ended at the real total
                return self.budget.trials
            left = self.space.size - len({r.config for r in prior})
        except Exception:  # noqa: BLE001 - a space that cannot count itself: the budget's number
            return self.budget.trials
        return max(0, min(self.budget.trials, left))

    def _use_transfer(self) -> None:
        """Give a model-guided strategy a cost model pre-trained on the database's records
        of this kernel's other shapes and of this shape on other devices."""
        if self.db is None or not self.transfer or not self.strategy.accepts_prior:
            return
        from .model.features import FeatureExtractor
        from .model.pretrain import model_of_records, transfer_records

        extractor = FeatureExtractor(self.space, self.workload.key)
        records = transfer_records(self.db, self.workload, self.target)
        model = model_of_records(records, extractor, seed=self.seed)
        # knowledge from this device (other shapes) is trusted; from other devices only, the
        # fastest region may have moved, so the search still explores a little first
        other_devices_only = all(r.target != self.target for r in records)
        if model is not None and self.strategy.use_prior(model, self.workload.key, explore=other_devices_only):
            self.transferred_from = model.trained_rows

    def _tell(self, results: Sequence[MeasureResult]) -> None:
        if results:
            self.strategy.tell(results)
            self._heard.update((r.config, _standing(r)) for r in results)

    def _prior_results(self) -> list[MeasureResult]:
        """The recorded standing of each configuration of the space: what the search is
        told it need not measure again. Environment failures are left out (measured
        again); with `retry_failed` all failures, with `retune` everything."""
        if self.db is None or self.retune:
            return []
        records = self.db.measured_configs(self.workload, self.target).values()
        results = [r.to_result() for r in records if self._in_space(r.config)]
        if self.retry_failed:
            results = [r for r in results if r.ok]
        return results

    def _in_space(self, config: Config) -> bool:
        """Whether a recorded configuration belongs to the space (a record of another
        version of the space, or a damaged or crafted one, does not)."""
        try:
            return self.space.is_valid(config)
        except Exception:  # noqa: BLE001 - a value the space cannot even compare is not in it
            return False

    def _out_of_time(self, start: float) -> bool:
        return self.budget.seconds is not None and time.perf_counter() - start >= self.budget.seconds

    def _exhausted(self, charged: int, start: float) -> bool:
        if self.budget.trials is not None and charged >= self.budget.trials:
            return True
        return self._out_of_time(start)


def _standing(result: MeasureResult) -> tuple[Any, ...]:
    """What a strategy learns of a configuration from a result (its time or its failure)."""
    return (result.time if result.ok else None, result.error)

