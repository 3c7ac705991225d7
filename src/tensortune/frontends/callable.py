"""`tensortune.tune`: tune any Python callable that takes the configuration as keywords.

By default the callable runs in this process (a lambda or a closure will do); with
`isolate=True` (or a `timeout`) it runs in a worker process instead, where a segfault,
a hang past `timeout` or a memory bomb fails only that candidate. As with every other
frontend, a run where nothing succeeds raises `TuningFailed` saying why.

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
import pickle
from collections.abc import Callable, Mapping
from typing import Any

from ..db import Database, Target, Workload
from ..measure import CallableRunner, Executor, IsolatedCallableRunner, Timer
from ..measure.main_guard import check_guarded
from ..settings import Settings
from ..space import Space
from ..tuner import Budget, TuneResult, Tuner, TuningFailed


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
    isolate: bool | None = None,
    timeout: float | None = None,
    memory_limit: int | None = None,
    retune: bool = False,
    retry_failed: bool = False,
    executor: "str | Executor | None" = None,
    ray_address: str | None = None,
) -> TuneResult:
    """Search `space` for the keyword arguments that make `fn` fastest.

    Every measurement is recorded in the database under the function's name, a hash of
    its source and `key`; a later call resumes from those records (`retune=True` measures
    again; `retry_failed=True` measures again what failed).

    `isolate`: run `fn` in a worker process (it must then be defined at module level);
    the default is to isolate when a `timeout` (seconds per candidate, default 60 when
    isolated) is given. `memory_limit`: bytes an isolated candidate may use (default half
    the machine's memory). Raises `TuningFailed` when no candidate succeeded, ValueError
    before measuring anything when the space's names do not fit `fn`, and RuntimeError
    when an isolated `fn` of a script is tuned outside `if __name__ == "__main__":`.

    `executor`: "local" (this process or its worker; the default) or "ray" (each candidate
    measured on a Ray actor of a node of this CPU's target, in that actor's isolated worker
    with `isolate=True`; `fn` travels there by cloudpickle), or an `Executor`;
    `ray_address`: the cluster (docs/distributed.md).
    """
    if not isinstance(space, Space):
        space = Space(space)
    label = name or getattr(fn, "__qualname__", "callable")
    check_signature(fn, space, label)
    isolate = timeout is not None if isolate is None else isolate
    if timeout is not None and (not isolate or timeout <= 0):
        raise ValueError("timeout= needs isolate=True and a positive number of seconds: a call in this process "
                         "cannot be stopped")
    if isolate:
        _check_picklable(fn, reference, label)
        if any(getattr(f, "__module__", None) == "__main__" for f in (fn, reference)):
            check_guarded("tune(isolate=True)", fn, reference)  # the worker imports the script to find them
        runner: Any = IsolatedCallableRunner(fn, timer, reference, timeout or 60.0, memory_limit)
    else:
        runner = CallableRunner(fn, timer, reference)
    workload = Workload.make(label, source_of(fn), dict(key or {}))
    tuner = Tuner(space, runner, workload=workload, target=Target.cpu(), db=open_db(db), strategy=strategy,
                  budget=budget, seed=seed, progress=progress, retune=retune, retry_failed=retry_failed,
                  executor=executor, ray_address=ray_address)
    tuner.strategy.pace_model(PACE_SHARE, PACE_SECONDS)
    try:
        result = tuner.run()
    finally:
        if isolate:
            runner.close()
    if result.best is None:
        raise TuningFailed(result.failure_report(label))
    return result


PACE_SHARE = 0.1  # a cost model's refits may take this share of the measuring time...
PACE_SECONDS = 0.002  # ...or this many seconds per measurement, whichever is more


def check_signature(fn: Callable[..., Any], space: Space, label: str) -> None:
    """ValueError unless `fn` accepts every name of the space as a keyword and needs no
    other argument."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return  # a builtin or C function: its calls will tell
    names = set(space.names)
    if not any(p.kind is p.VAR_KEYWORD for p in params):
        takes = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        if extra := sorted(names - takes):
            raise ValueError(f"{label} takes no keyword argument(s) {extra} of the space; it takes "
                             f"{sorted(takes) or 'none'}")
    needed = sorted(p.name for p in params if p.default is p.empty and p.name not in names
                    and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
    if needed:
        raise ValueError(f"{label} needs argument(s) {needed} that the space does not give")


def _check_picklable(fn: Callable[..., Any], reference: Callable[..., Any] | None, label: str) -> None:
    for what, obj in (("the function", fn), ("the reference", reference)):
        if obj is None:
            continue
        try:
            pickle.dumps(obj)
        except Exception as exc:  # noqa: BLE001 - any reason it cannot travel
            raise ValueError(f"isolate=True runs {label} in a worker process, so {what} must be defined at "
                             f"module level (picklable): {type(exc).__name__}: {exc}") from None
