"""Tree-structured Parzen estimator (Bergstra et al., 2011), over a space's choices.

After a space-filling random start, the measurements are split in two: the fastest
`gamma` share ("good", at most `max_good`) and the rest, failures included. Two Parzen
densities are fitted, l on the good points and g on the rest: one kernel per point plus a
uniform prior kernel of weight `prior_weight`; beyond the newest `flat_recent` points,
older points weigh less (linearly down to 1/n). The next point is the best by
log l - log g of `candidates` unmeasured draws from l.

With `learn_invalid=True` (the default) the draws are taken as they come, valid or not,
as Optuna's sampler proposes them: when the best is outside the space it joins g as a
failure (at no measurement's cost, and counted in the split like any other point) and the
choice is made again, so g learns where the space ends and the search stops proposing
there. With `learn_invalid=False` invalid draws are only redrawn. Either way, a space
too sparse for draws from l scores uniform valid points instead.

With `learn_repeats` (off by default) a best draw that was measured already is told again,
its time joining the history once more, and the choice is made again: what Optuna's loop
does when its sampler proposes a trial it has seen. The repeats pile up on the incumbent,
so l narrows around it. That is Optuna's lead on the H100 CUDA convolution at N=100, and
its loss on convolution_milo-A100 at N=200 (docs/benchmarks/strategies_experiments.md,
"Repeats told again").

With `corners` (a list of two-valued parameters, the space's switches), the good set
also takes the fastest point of every combination of those switches, a corner, whose
best is among the fastest `corner_quantile` of the measurements. The plain split lets one
corner's plateau of nearly equal points fill the good set, after which l proposes only
there; a corner whose start was a little slower, though its best is the space's best,
is then left after a few draws. Keeping each corner's best in l keeps proposing near it
(docs/benchmarks/strategies_experiments.md, "Corner bests in TPE's good set"). With `corner_fade` the
quantile is scaled by the share of the budget still to spend, so the corners' pull is
gone by the budget's end ("Corner bests that fade").

With `multivariate=True` (the default, and the only form Optuna 5.0 runs) a kernel is a
product over parameters centred on its point, so a draw is a good point with a few
parameters changed at once; with `multivariate=False` each parameter has its own density
and draws mix the good points' choices freely. Changing several parameters at once, scored
by a density ratio rather than a model's rank, is what leaves a trap that one-parameter
moves cannot (docs/benchmarks/strategies_experiments.md, "TPE in our own hands": the independent form
does worse there).

Example:
    >>> from tensortune.space import Space
    >>> from tensortune.measure import MeasureResult
    >>> s = TPESearch(Space({"x": list(range(16)), "y": list(range(16))}), seed=0, budget=60)
    >>> for _ in range(60):
    ...     s.tell([MeasureResult(c, (1.0 + abs(c["x"] - 11) + abs(c["y"] - 3),)) for c in s.ask(1)])
    >>> s.best.time <= 3.0
    True
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

import numpy as np

from ..space import Space
from .guided import initial_size
from .planned import PlannedSearch
from .points import Point, unique

Screen = Callable[[list[Point]], list[Point]]  # keeps the candidates worth scoring by l / g


class TPESearch(PlannedSearch):
    name = "tpe"

    def __init__(self, space: Space, seed: int | None = None, budget: int | None = None, *,
                 initial: int | None = None, gamma: float = 0.1, max_good: int = 25,
                 candidates: int = 24, prior_weight: float = 1.0, flat_recent: int = 25,
                 multivariate: bool = True, learn_invalid: bool = True, learn_repeats: bool = False,
                 plan_size: int = 1) -> None:
        super().__init__(space, seed, budget, plan_size)
        self.initial = initial if initial is not None else initial_size(budget)
        self.proposer = ParzenProposer(gamma=gamma, max_good=max_good, candidates=candidates,
                                       prior_weight=prior_weight, flat_recent=flat_recent,
                                       multivariate=multivariate, learn_invalid=learn_invalid,
                                       learn_repeats=learn_repeats)

    def plan(self, n: int) -> list[Point]:
        ok = sum(1 for t in self.measured.values() if math.isfinite(t))
        if len(self.measured) < self.initial or ok < 2:
            return self.space_filling(n)
        return self.proposer.propose(self, n)


class ParzenProposer:
    """TPE's proposals from the measurements of any planned search (so a model-guided
    search can draw part of its plans this way too).

    >>> from tensortune.space import Space
    >>> from tensortune.measure import MeasureResult
    >>> search = TPESearch(Space({"a": list(range(8))}), seed=0)
    >>> search.tell([MeasureResult(search.ops.config((i,)), (1.0 + i,)) for i in (0, 5, 7)])
    >>> len(ParzenProposer().propose(search, 2))
    2
    """

    def __init__(self, gamma: float = 0.1, max_good: int = 25, candidates: int = 24,
                 prior_weight: float = 1.0, flat_recent: int = 25, multivariate: bool = True,
                 learn_invalid: bool = True, invalid_tries: int = 50, corners: Sequence[int] = (),
                 corner_quantile: float = 0.25, corner_fade: bool = False, learn_repeats: bool = False) -> None:
        if not 0.0 < gamma < 1.0:
            raise ValueError(f"gamma must lie in (0, 1), got {gamma}")
        if candidates < 1 or max_good < 1 or flat_recent < 1:
            raise ValueError("candidates, max_good and flat_recent must be at least 1")
        if not prior_weight > 0.0:
            raise ValueError(f"prior_weight must be positive, got {prior_weight}")
        if learn_repeats and not learn_invalid:
            raise ValueError("learn_repeats needs learn_invalid: both tell choices without measuring them")
        if not 0.0 < corner_quantile <= 1.0:
            raise ValueError(f"corner_quantile must lie in (0, 1], got {corner_quantile}")
        self.gamma = gamma
        self.max_good = max_good
        self.candidates = candidates
        self.prior_weight = prior_weight
        self.flat_recent = flat_recent
        self.multivariate = multivariate
        self.learn_invalid = learn_invalid
        self.invalid_tries = invalid_tries
        self.corners = list(corners)
        self.corner_quantile = corner_quantile
        self.corner_fade = corner_fade
        self.learn_repeats = learn_repeats
        # points chosen and told without a measurement (invalid ones as failures, repeats
        # with their measured time), each with how many measurements preceded it
        self.learned: list[tuple[int, Point, float]] = []

    def propose(self, search: PlannedSearch, n: int, exclude: set[Point] | None = None,
                screen: Screen | None = None) -> list[Point]:
        """`n` unseen points (fewer if the space runs out), each the best by l / g of a
        fresh set of draws from l (of those that `screen` keeps, when given)."""
        chosen: list[Point] = []
        for _ in range(n):
            taken = set(chosen) | (exclude or set())
            point = self.learned_choice(search, taken, screen) if self.learn_invalid else None
            if point is None:
                good, bad = self.densities(search)
                pool = self.draws(search, good, taken)
                if not pool:
                    break
                point = self.best(screen(pool) if screen else pool, good, bad)
            chosen.append(point)
        return chosen

    def learned_choice(self, search: PlannedSearch, taken: set[Point], screen: Screen | None = None) -> Point | None:
        """The best of raw draws from l, as Optuna's loop chooses: when it is invalid it
        joins g as a failure (no measurement spent) and the choice is made again; with
        `learn_repeats`, a point measured already is told again (its time joins the
        history once more) and the choice is made again. None after `invalid_tries` such
        choices in a row."""
        # with repeats, only points proposed but not yet measured are off limits
        excluded = search.seen_points - search.measured.keys() if self.learn_repeats else search.seen_points
        for _ in range(self.invalid_tries):
            good, bad = self.densities(search)
            pool = unique(list(map(tuple, good.sample(self.candidates, search.rng).tolist())), excluded | taken)
            if not pool:
                return None
            point = self.best(screen(pool) if screen else pool, good, bad)
            if point in search.measured:
                self.learned.append((len(search.measured), point, search.measured[point]))
            elif search.ops.valid(point):
                return point
            else:
                self.learned.append((len(search.measured), point, math.inf))
        return None

    @staticmethod
    def best(pool: list[Point], good: "Parzen", bad: "Parzen") -> Point:
        rows = np.asarray(pool, dtype=np.int64)
        return pool[int(np.argmax(good.log_pdf(rows) - bad.log_pdf(rows)))]

    def history(self, search: PlannedSearch) -> tuple[list[Point], list[float]]:
        """Measured points and learned ones (invalid as failures, repeats), oldest first."""
        measured = list(search.measured.items())  # a dict keeps the order of measurement
        events = [(i, 1, point, time) for i, (point, time) in enumerate(measured)]
        events += [(before, 0, point, time) for before, point, time in self.learned]
        events.sort(key=lambda e: (e[0], e[1]))
        return [e[2] for e in events], [e[3] for e in events]

    def densities(self, search: PlannedSearch) -> tuple["Parzen", "Parzen"]:
        """The densities l (good points) and g (the rest) over the space's points."""
        order, history_times = self.history(search)
        times = np.asarray(history_times)
        weights = np.ones(len(times))
        old = len(times) - self.flat_recent
        if old > 0:
            weights[:old] = np.linspace(1.0 / len(times), 1.0, old)
        n_good = min(self.max_good, max(1, math.ceil(self.gamma * len(times))))
        is_good = np.zeros(len(times), dtype=bool)
        is_good[np.argsort(times, kind="stable")[:n_good]] = True
        points = np.asarray(order, dtype=np.int64).reshape(len(order), len(search.ops.sizes))
        if self.corners:
            is_good[self.corner_bests(points, times, self.corner_share(search))] = True
        make = JointParzen if self.multivariate else IndependentParzen
        sizes = search.ops.sizes
        return (make(points[is_good], weights[is_good], sizes, self.prior_weight),
                make(points[~is_good], weights[~is_good], sizes, self.prior_weight))

    def corner_share(self, search: PlannedSearch) -> float:
        """The share of the measurements a corner's best must rank in: `corner_quantile`,
        or with `corner_fade` that times the share of the budget still to spend (the
        quantile when the budget is unknown)."""
        if not self.corner_fade or not search.budget:
            return self.corner_quantile
        return self.corner_quantile * max(0.0, 1.0 - len(search.measured) / search.budget)

    def corner_bests(self, points: np.ndarray, times: np.ndarray, quantile: float) -> list[int]:
        """Rows of the fastest point of each corner whose best is among the fastest
        `quantile` of the successful measurements (none before five: a quantile of fewer
        says little)."""
        finite = np.isfinite(times)
        if finite.sum() < 5 or quantile <= 0.0:
            return []
        cut = np.quantile(times[finite], quantile)
        best: dict[tuple[int, ...], int] = {}
        for i in np.flatnonzero(finite & (times <= cut)).tolist():
            corner = tuple(points[i, self.corners].tolist())
            if corner not in best or times[i] < times[best[corner]]:
                best[corner] = i
        return list(best.values())

    def draws(self, search: PlannedSearch, good: "Parzen", exclude: set[Point], tries: int = 8) -> list[Point]:
        """Up to `candidates` distinct unseen valid points drawn from l; uniform valid
        points when l's draws are almost never valid."""
        pool: list[Point] = []
        taken = search.seen_points | exclude
        for _ in range(tries):
            rows = good.sample(4 * self.candidates, search.rng)
            drawn = [p for p in map(tuple, rows.tolist()) if search.ops.valid(p)]
            pool = unique(pool + drawn, taken)
            if len(pool) >= self.candidates:
                return pool[: self.candidates]
        return pool or search.fresh_random(self.candidates, exclude)


class Parzen(ABC):
    """A Parzen density over points of choice indices: one kernel per observed point
    (weighted) plus a uniform prior kernel."""

    def __init__(self, points: np.ndarray, weights: np.ndarray, sizes: list[int], prior_weight: float) -> None:
        self.points = points
        self.sizes = np.asarray(sizes, dtype=np.int64)
        w = np.append(weights, prior_weight)
        self.weights = w / w.sum()
        self.prior_weight = prior_weight

    @abstractmethod
    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """`n` points drawn from the density (valid or not)."""

    @abstractmethod
    def log_pdf(self, points: np.ndarray) -> np.ndarray:
        """The log density at each of `points`."""


class IndependentParzen(Parzen):
    """Each parameter on its own: the weight of the points with that choice, plus the
    prior's weight spread evenly over the choices (no array as long as a parameter, so a
    parameter with millions of values costs nothing)."""

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        kernel = rng.choice(len(self.weights), size=(n, len(self.sizes)), p=self.weights)
        uniform = (rng.random((n, len(self.sizes))) * self.sizes).astype(np.int64)
        if len(self.points) == 0:
            return uniform
        observed = self.points[np.minimum(kernel, len(self.points) - 1), np.arange(len(self.sizes))]
        return np.where(kernel == len(self.points), uniform, observed)

    def log_pdf(self, points: np.ndarray) -> np.ndarray:
        same = points[:, None, :] == self.points[None, :, :]  # candidates x kernels x parameters
        mass = np.einsum("ckp,k->cp", same, self.weights[:-1]) + self.weights[-1] / self.sizes
        return np.log(mass).sum(axis=1)


class JointParzen(Parzen):
    """A mixture of products: a point's kernel keeps each parameter's choice with
    probability (1 + a) / (1 + a s) and spreads the rest evenly over the s choices, with
    a = prior_weight / (kernels), as Optuna's multivariate TPE does for categorical values."""

    def __init__(self, *args) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args)
        self.a = self.prior_weight / (len(self.points) + 1)
        self.keep = 1.0 / (1.0 + self.a * self.sizes)  # chance a draw keeps the kernel's choice

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        kernel = rng.choice(len(self.weights), size=n, p=self.weights)
        uniform = (rng.random((n, len(self.sizes))) * self.sizes).astype(np.int64)
        prior = kernel == len(self.points)
        if len(self.points) == 0:
            return uniform
        centre = self.points[np.minimum(kernel, len(self.points) - 1)]
        keep = (rng.random((n, len(self.sizes))) < self.keep) & ~prior[:, None]
        return np.where(keep, centre, uniform)

    def log_pdf(self, points: np.ndarray) -> np.ndarray:
        denominator = 1.0 + self.a * self.sizes
        log_in = np.log((1.0 + self.a) / denominator)
        log_out = np.log(self.a / denominator)
        same = points[:, None, :] == self.points[None, :, :]  # candidates x kernels x parameters
        per_kernel = np.where(same, log_in, log_out).sum(axis=2) + np.log(self.weights[:-1])
        prior = np.full((len(points), 1), -np.log(self.sizes.astype(np.float64)).sum() + np.log(self.weights[-1]))
        return np.logaddexp.reduce(np.concatenate([per_kernel, prior], axis=1), axis=1)
