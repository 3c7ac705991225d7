"""Uniform random sampling without replacement.

Points are drawn uniformly from the space (which samples constrained spaces exactly)
and repeats are rejected, so every unseen configuration is equally likely; once draws
keep hitting configurations already seen, a small space lists its unseen rest.

Example:
    >>> from tensortune.space import Space
    >>> s = RandomSearch(Space({"a": list(range(10))}), seed=1)
    >>> len(set(s.ask(10))), s.ask(1)
    (10, [])
"""

from __future__ import annotations

from .planned import PlannedSearch
from .points import Point


class RandomSearch(PlannedSearch):
    name = "random"

    def plan(self, n: int) -> list[Point]:
        return self.fresh_random(n)
