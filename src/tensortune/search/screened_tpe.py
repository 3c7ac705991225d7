"""TPE whose candidates the cost model screens first: the two ways of choosing, in turn.

Each next point comes from `tpe`'s proposer (raw draws near the fastest measurements,
invalid ones learned as failures), except that of every set of candidates only the share
`keep` that the cost model, refitted on every measurement, ranks highest is scored by
l / g. The model throws out what it is sure is slow; TPE's density ratio, not the
model's rank, chooses among the rest, so a fast configuration whose neighbours are slow,
which the model alone would rank low, is still found when it ranks in the better half
(docs/benchmarks/strategies_experiments.md, "TPE screened by the cost model": convolution_milo-A100
at N=100 goes from 0.849 with `evolutionary` and 0.896 with `tpe` to 0.901).

TPE's good set also keeps the fastest point of each combination of the two-valued
parameters (`corner_bests`) whose best ranks in the fastest `corner_quantile` of the
measurements (`ParzenProposer`'s `corners`), so one corner's plateau cannot crowd another
corner's promising start out of l. With `corner_fade` (the default) that share shrinks
with the budget left, to none at its end: corners are explored early and the incumbent's
corner finished late (docs/benchmarks/strategies_experiments.md, "Corner bests that fade":
convolution_milo-A100 at N=100 goes from 0.894 to 0.906 over 600 seeds, and N=200 holds;
kept all the way, corners cost 0.018 at N=200).

One point per plan by default: the model and the densities learn from each measurement
before the next choice (batches of up to 8 lose most of the gain). That costs a refit
per measurement, tens of milliseconds, against the seconds a measurement takes.

Example:
    >>> from tensortune.space import Space
    >>> from tensortune.measure import MeasureResult
    >>> s = ScreenedTPESearch(Space({"x": list(range(16)), "y": list(range(16))}), seed=0, budget=40)
    >>> for _ in range(40):
    ...     s.tell([MeasureResult(c, (1.0 + abs(c["x"] - 11) + abs(c["y"] - 3),)) for c in s.ask(1)])
    >>> s.best.time <= 3.0
    True
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..space import Space
from .guided import ModelGuidedSearch
from .points import Point
from .tpe import ParzenProposer


class ScreenedTPESearch(ModelGuidedSearch):
    name = "screened_tpe"

    def __init__(self, space: Space, seed: int | None = None, budget: int | None = None, *,
                 keep: float = 0.5, plan_size: int | None = 1, gamma: float = 0.1, max_good: int = 25,
                 candidates: int = 24, prior_weight: float = 1.0, flat_recent: int = 25,
                 multivariate: bool = True, learn_invalid: bool = True, corner_bests: bool = True,
                 corner_quantile: float = 0.25, corner_fade: bool = True, learn_repeats: bool = False,
                 **options: Any) -> None:
        super().__init__(space, seed, budget, plan_size=plan_size, **options)
        if not 0.0 < keep <= 1.0:
            raise ValueError(f"keep must lie in (0, 1], got {keep}")
        self.keep = keep
        self.proposer = ParzenProposer(gamma=gamma, max_good=max_good, candidates=candidates,
                                       prior_weight=prior_weight, flat_recent=flat_recent,
                                       multivariate=multivariate, learn_invalid=learn_invalid,
                                       corners=self.ops.switches() if corner_bests else (),
                                       corner_quantile=corner_quantile, corner_fade=corner_fade,
                                       learn_repeats=learn_repeats)

    def plan_with_model(self, n: int) -> list[Point]:
        return self.proposer.propose(self, n, screen=self.model_screen)

    def model_screen(self, pool: list[Point]) -> list[Point]:
        """The share `keep` of `pool` the model ranks highest, best first (a pool of two
        or fewer passes whole: there is nothing to screen)."""
        if len(pool) <= 2:
            return pool
        order = np.argsort(-self.acquisition(pool))[: max(1, int(len(pool) * self.keep))]
        return [pool[i] for i in order]
