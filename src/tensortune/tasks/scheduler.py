"""Many tasks under one budget: round-robin, or Ansor's gradient-based allocation.

The gradient policy (Zheng et al., OSDI 2020, section 6) spends each round on the task
whose next trials are expected to reduce the objective (by default the weighted sum of
the tasks' best latencies) the most. For task i with best latency g_i after t_i rounds:

    dF/dt_i ~ dF/dg_i * (alpha * backward_i + (1 - alpha) * forward_i)

where backward_i is the latency's slope over the last `window` rounds, and forward_i an
optimistic guess of the next round's gain: min(g_i - g_i / t_i, beta * flops_i / best
throughput among the tasks of its group) - g_i. Every task first gets one warm-up round.
A task that has nothing left to measure, or has not improved in `patience` trials, is
dropped from the allocation.

With `concurrency` k > 1 (an executor that measures more candidates at once than one
round holds, such as a Ray cluster: `concurrent_rounds`), up to k rounds of distinct
tasks run at once, each in a thread of its own, so that every node is busy: whenever one
ends, its results are taken in and the task ranked first among those not running gets
the next round (no round waits for a slower one to end).

Example:
    >>> from tensortune.measure import MeasureResult
    >>> from tensortune.space import Config
    >>> def curve(scale):
    ...     state = {"n": 0}
    ...     def tune(n):
    ...         out = [MeasureResult(Config(i=state["n"] + k), (scale * (1 + 1 / (state["n"] + k + 1)),))
    ...                for k in range(n)]
    ...         state["n"] += n
    ...         return out
    ...     return tune
    >>> tasks = [Task("big", curve(10.0)), Task("small", curve(0.1))]
    >>> result = TaskScheduler(tasks, budget=40, trials_per_round=4).run()
    >>> result.trials["big"] > result.trials["small"]
    True
"""

from __future__ import annotations

import contextvars
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

import numpy as np

from ..measure import MeasureResult
from ..tuner import Budget
from .task import Task

UNMEASURED = 1e10  # latency (s) of a task with no successful measurement yet, as in Ansor
Objective = Callable[[Sequence[float]], float]


@dataclass(frozen=True)
class TaskRound:
    """One round of the schedule: which task got how many trials, and its best after."""

    task: str
    trials: int
    best: float
    objective: float
    seconds: float
    started: float = 0.0  # seconds from the schedule's start to this round's (rounds overlap with concurrency > 1)


@dataclass(frozen=True)
class ScheduleResult:
    """Per-task best latencies and trial counts, and the rounds in order."""

    best: dict[str, float]
    trials: dict[str, int]
    rounds: tuple[TaskRound, ...]
    objective: float
    seconds: float
    best_results: dict[str, MeasureResult | None] = field(default_factory=dict)

    @property
    def total_trials(self) -> int:
        return sum(self.trials.values())


def concurrent_rounds(parallelism: int, trials_per_round: int, tasks: int) -> int:
    """How many tasks' rounds to run at once so that `parallelism` candidates (what the
    executor measures at once) are in flight: at least one, at most the tasks.

    Example:
        >>> concurrent_rounds(parallelism=40, trials_per_round=8, tasks=3), concurrent_rounds(4, 8, 3)
        (3, 1)
    """
    return max(1, min(tasks, math.ceil(parallelism / max(1, trials_per_round))))


def weighted_latency(weights: Sequence[float]) -> Objective:
    w = np.asarray(weights, dtype=np.float64)
    return lambda latencies: float(np.dot(w, np.asarray(latencies, dtype=np.float64)))


class TaskScheduler:
    """Allocates a budget of trials among tasks, round by round (`concurrency` rounds of
    distinct tasks at once)."""

    POLICIES = ("gradient", "round-robin")
    STALL = 0.01  # a relative improvement over `window` rounds below this is no progress

    def __init__(self, tasks: Sequence[Task], *, budget: Budget | int | float | None = None,
                 policy: str = "gradient", trials_per_round: int = 16,
                 objective: Objective | None = None, alpha: float = 0.2, beta: float = 2.0,
                 window: int = 3, patience: int | None = None, seed: int | None = 0,
                 callbacks: Sequence[Callable[[TaskRound], None]] = (), concurrency: int = 1) -> None:
        if not tasks:
            raise ValueError("the task scheduler needs at least one task")
        names = [t.name for t in tasks]
        if len(set(names)) != len(names):
            raise ValueError(f"task names must be unique, got {names}")
        if policy not in self.POLICIES:
            raise ValueError(f"unknown task scheduling policy {policy!r}; known: {', '.join(self.POLICIES)}")
        if trials_per_round < 1:
            raise ValueError(f"trials_per_round must be at least 1, got {trials_per_round}")
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self.tasks = list(tasks)
        self.budget = Budget.of(budget, default_trials=trials_per_round * len(tasks) * 4)
        self.policy = policy
        self.trials_per_round = trials_per_round
        self.concurrency = concurrency
        self.objective = objective or weighted_latency([t.weight for t in tasks])
        self._linear = objective is None  # the weighted latency: its derivative is the weight
        self.alpha, self.beta, self.window, self.patience = alpha, beta, window, patience
        self.rng = np.random.default_rng(seed)
        self.callbacks = list(callbacks)
        n = len(tasks)
        self.best_costs = [UNMEASURED] * n
        self.best_results: list[MeasureResult | None] = [None] * n
        self.rounds_done = [0] * n
        self.trials_done = [0] * n
        self.cost_history: list[list[float]] = [[] for _ in range(n)]
        self.last_improved = [0] * n  # trials_done when the best last improved
        self.dead = [False] * n
        self._next_rr = 0

    # ---- the loop -------------------------------------------------------------------------
    def run(self) -> ScheduleResult:
        start = time.perf_counter()
        rounds: list[TaskRound] = []
        if self.concurrency > 1:
            self._run_at_once(start, rounds)
        else:
            order = list(range(len(self.tasks)))  # warm-up: every task once
            while not self._exhausted(start):
                i = order.pop(0) if order else self.next_task()
                if i is None:
                    break
                began = time.perf_counter() - start
                rounds.append(self._record_round(i, *self._timed_tune(i, self._round_trials(0, 1)), began))
        return ScheduleResult(
            best={t.name: c if c < UNMEASURED else math.inf for t, c in zip(self.tasks, self.best_costs)},
            trials={t.name: n for t, n in zip(self.tasks, self.trials_done)},
            rounds=tuple(rounds), objective=self.current_objective(),
            seconds=time.perf_counter() - start,
            best_results={t.name: r for t, r in zip(self.tasks, self.best_results)})

    def _run_at_once(self, start: float, rounds: list[TaskRound]) -> None:
        """Up to `concurrency` rounds of distinct tasks in flight; a task is picked as soon
        as a round ends, with what every round that has ended told."""
        order = list(range(len(self.tasks)))  # warm-up: every task once
        running: dict[Future[tuple[list[MeasureResult], float]], tuple[int, int, float]] = {}
        with ThreadPoolExecutor(self.concurrency, thread_name_prefix="task-round") as pool:
            while True:
                while len(running) < self.concurrency and not self._exhausted(start):
                    reserved = sum(n for _, n, _ in running.values())
                    n = self._round_trials(reserved, self.concurrency - len(running))
                    if n < 1:
                        break
                    busy = [i for i, _, _ in running.values()]
                    i = order.pop(0) if order else self.next_task(exclude=busy)
                    if i is None:
                        break
                    # a round runs in the context of the caller (its tuner scope: tuner_scope.py)
                    round_ = pool.submit(contextvars.copy_context().run, self._timed_tune, i, n)
                    running[round_] = (i, n, time.perf_counter() - start)
                if not running:
                    return
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in sorted(done, key=lambda f: running[f][2]):
                    i, _, began = running.pop(future)
                    rounds.append(self._record_round(i, *future.result(), began))

    def _round_trials(self, reserved: int, free: int) -> int:
        """Trials of the next round: `trials_per_round`, or, when the trial budget has fewer
        left beyond the `reserved` trials of rounds in flight, a share of what is left among
        the `free` places for rounds (0: none left)."""
        if self.budget.trials is None:
            return self.trials_per_round
        left = self.budget.trials - sum(self.trials_done) - reserved
        return 0 if left < 1 else max(1, min(self.trials_per_round, left // max(1, free)))

    def _timed_tune(self, i: int, n: int) -> tuple[list[MeasureResult], float]:
        round_start = time.perf_counter()
        results = self.tasks[i].tune(n)
        return results, time.perf_counter() - round_start

    def _record_round(self, i: int, results: list[MeasureResult], seconds: float, started: float) -> TaskRound:
        if not results:
            self.dead[i] = True
        self.trials_done[i] += len(results)
        self.rounds_done[i] += 1
        for r in results:
            if r.ok and r.time < self.best_costs[i]:
                self.best_costs[i] = r.time
                self.best_results[i] = r
                self.last_improved[i] = self.trials_done[i]
        self.cost_history[i].append(self.best_costs[i])
        if self.patience is not None and self.trials_done[i] - self.last_improved[i] >= self.patience:
            self.dead[i] = True
        record = TaskRound(self.tasks[i].name, len(results), self.best_costs[i], self.current_objective(),
                           seconds, started)
        for cb in self.callbacks:
            cb(record)
        return record

    def _exhausted(self, start: float) -> bool:
        if all(self.dead):
            return True
        if self.budget.trials is not None and sum(self.trials_done) >= self.budget.trials:
            return True
        return self.budget.seconds is not None and time.perf_counter() - start >= self.budget.seconds

    def current_objective(self) -> float:
        return self.objective(self.best_costs)

    # ---- the policies -----------------------------------------------------------------------
    def next_task(self, exclude: Sequence[int] = ()) -> int | None:
        """The task to give the next round (none of `exclude`, which already have one)."""
        alive = [i for i in range(len(self.tasks)) if not self.dead[i] and i not in exclude]
        if not alive:
            return None
        if self.policy == "round-robin":
            for k in range(len(self.tasks)):
                i = (self._next_rr + k) % len(self.tasks)
                if not self.dead[i] and i not in exclude:
                    self._next_rr = i + 1
                    return i
        gradients = {i: self.gradient(i) for i in alive}
        values = list(gradients.values())
        if max(values) == min(values):
            return int(self.rng.choice(alive))
        return min(gradients, key=lambda i: gradients[i])

    def stalled(self, i: int) -> bool:
        """Whether task i's best improved by less than `STALL` over its last `window` rounds.

        A similar task's throughput promises what this task might reach; once its own
        search has stopped getting closer, that promise no longer earns it more rounds
        (otherwise one task with a low-throughput shape, a convolution reading 3 channels
        among wide ones, takes every round left).
        """
        history = self.cost_history[i]
        if len(history) <= self.window or history[-1 - self.window] >= UNMEASURED:
            return False
        return history[-1] > (1 - self.STALL) * history[-1 - self.window]

    def gradient(self, i: int) -> float:
        """The estimated change of the objective per round spent on task i (negative = gain)."""
        if self._linear:  # exact: a finite difference vanishes beside an unmeasured task's 1e10
            chain = self.tasks[i].weight
        else:
            delta = 1e-4 * self.best_costs[i] if self.best_costs[i] < UNMEASURED else 1e-4
            lowered = list(self.best_costs)
            lowered[i] -= delta
            chain = (self.objective(self.best_costs) - self.objective(lowered)) / delta
        history, t = self.cost_history[i], self.rounds_done[i]
        backward = 0.0
        if t - 1 - self.window >= 0 and t - 1 < len(history):
            backward = (history[t - 1] - history[t - 1 - self.window]) / self.window
        g = self.best_costs[i]
        g_next = g - g / max(1, t)
        peers = [j for j, task in enumerate(self.tasks)
                 if self.tasks[i].group and task.group == self.tasks[i].group and j != i]
        if peers and self.tasks[i].flops > 0 and not self.stalled(i):
            throughputs = [self.tasks[j].flops / self.best_costs[j] for j in peers + [i]
                           if self.best_costs[j] < UNMEASURED and self.tasks[j].flops > 0]
            if throughputs:
                g_next = min(g_next, self.beta * self.tasks[i].flops / max(throughputs))
        forward = g_next - g
        return chain * (self.alpha * backward + (1 - self.alpha) * forward)
