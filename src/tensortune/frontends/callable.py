"""`tensortune.tune`: tune any Python callable that takes the configuration as keywords.

Example:
    >>> import tensortune as tt
    >>> space = tt.Space({"chunk": [1, 64, 4096]})
    >>> def total(chunk):
    ...     return sum(sum(range(i, min(i + chunk, 20000))) for i in range(0, 20000, chunk))
    >>> result = tt.tune(total, space, budget=3, db=":memory:", progress=False)
    >>> result.best_config["chunk"] in (64, 4096)
    True
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping
from typing import Any

from ..db import Database, Target, Workload
from ..measure import CallableRunner, Timer
from ..settings import Settings
from ..space import Space
from ..tuner import Budget, TuneResult, Tuner


def open_db(db: "Database | str | os.PathLike[str] | None") -> Database:
    """A database from an object, a path, or (None) the configured default path."""
    if isinstance(db, Database):
        return db
    if db is None:
        return Database(Settings.from_env().db_path)
    return Database(db)


def source_of(fn: Callable[..., Any]) -> str:
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return getattr(fn, "__qualname__", repr(fn))


def tune(
    fn: Callable[..., Any],
    space: Space | Mapping[str, Any],
    *,
    budget: Budget | int | float | None = None,
    strategy: str = "auto",
    key: Mapping[str, Any] | None = None,
    name: str | None = None,
    reference: Callable[[], Any] | None = None,
    db: "Database | str | os.PathLike[str] | None" = None,
    seed: int | None = None,
    timer: Timer | None = None,
    progress: bool = True,
) -> TuneResult:
    """Search `space` for the keyword arguments that make `fn` fastest.

    Every measurement is recorded in the database under the function's name, a hash of
    its source and `key`; a later call resumes from those records.
    """
    if not isinstance(space, Space):
        space = Space(space)
    workload = Workload.make(name or getattr(fn, "__qualname__", "callable"), source_of(fn), dict(key or {}))
    tuner = Tuner(space, CallableRunner(fn, timer, reference), workload=workload, target=Target.cpu(),
                  db=open_db(db), strategy=strategy, budget=budget, seed=seed, progress=progress)
    return tuner.run()
