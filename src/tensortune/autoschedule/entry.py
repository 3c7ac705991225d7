"""`te.autoschedule` and `te.autoschedule_many`: thin entry points that import the
auto-scheduler only when called (importing `tensortune.te` stays light and acyclic).

Example:
    >>> from tensortune import te
    >>> te.autoschedule.__doc__.splitlines()[0]
    'Search for a fast schedule of the expressions and return it compiled and verified.'
"""

from __future__ import annotations

import functools
from typing import Any


def _forward(name: str):
    def decorate(stub):
        @functools.wraps(stub)
        def call(*args: Any, **kwargs: Any) -> Any:
            from . import api
            return getattr(api, name)(*args, **kwargs)
        return call
    return decorate


@_forward("autoschedule")
def autoschedule(outputs_or_function: Any, target: str = "cpu", budget: Any = None, db: Any = None,
                 **options: Any) -> Any:
    """Search for a fast schedule of the expressions and return it compiled and verified.

    See `tensortune.autoschedule.api.autoschedule` for every option."""


@_forward("autoschedule_many")
def autoschedule_many(problems: Any, weights: Any = None, budget: Any = None, db: Any = None,
                      **options: Any) -> Any:
    """Auto-schedule several computations under one budget shared by the task scheduler.

    See `tensortune.autoschedule.api.autoschedule_many` for every option."""
