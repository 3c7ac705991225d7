"""A hook run on every `Tuner` created inside a scope, wherever in the call stack it is made.

Code that runs a whole tuning procedure it does not drive itself (a model's compile,
whose task scheduler makes one tuner per kernel; a Triton kernel's offline tuning) can
still adapt each tuner it creates: `tuner_scope(hook)` calls `hook(tuner)` at the end
of the constructor of every Tuner made inside it, before the tuner runs. The fleet's
worker uses it to make those tuners claim their candidates (docs/fleet.md).

A scope belongs to the context that opened it (a context variable), which threads
started with `contextvars.copy_context()` carry, as the task scheduler's rounds do. A
tuner made in a thread that carries no scope (another thread pool's) gets the scope
open in the process, if only one is; with several open, which one it belongs to is
unknown, and its constructor raises rather than leave it out of every scope. Tuners made
inside `outside_tuner_scopes()` belong to none.

Example:
    >>> from tensortune.db import Target, Workload
    >>> from tensortune.measure import CallableRunner
    >>> from tensortune.space import Space
    >>> from tensortune.tuner import Tuner
    >>> made = []
    >>> def tuner():
    ...     return Tuner(Space({"n": [1, 2]}), CallableRunner(lambda n: n), workload=Workload.make("k"),
    ...                  target=Target.make("cpu", "x"), progress=False)
    >>> with tuner_scope(lambda t: made.append(t.workload.name)):
    ...     _ = tuner()
    >>> _ = tuner()
    >>> made
    ['k']
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

TunerHook = Callable[[Any], None]  # called with the Tuner just made


class TunerScope:
    """One open scope: its hook, and whether it is still open."""

    def __init__(self, hook: TunerHook) -> None:
        self.hook = hook
        self.open = True


_current: ContextVar[TunerScope | None] = ContextVar("tensortune_tuner_scope", default=None)
_open: list[TunerScope] = []  # every scope open in this process, oldest first
_lock = threading.Lock()


class AmbiguousTunerScope(RuntimeError):
    """A tuner was made in a thread that carries no scope while several are open."""


@contextmanager
def tuner_scope(hook: TunerHook) -> Iterator[TunerScope]:
    """Call `hook(tuner)` for every Tuner created inside (see the module doc)."""
    scope = TunerScope(hook)
    with _lock:
        _open.append(scope)
    token = _current.set(scope)
    try:
        yield scope
    finally:
        _current.reset(token)
        with _lock:
            scope.open = False
            _open.remove(scope)


_OUTSIDE = TunerScope(lambda tuner: None)  # marks a context whose tuners belong to no scope
_OUTSIDE.open = False


@contextmanager
def outside_tuner_scopes() -> Iterator[None]:
    """Tuners made inside belong to no scope, whatever scopes are open in the process (a
    fleet worker's ordinary job, in a thread beside another worker's job that tunes itself)."""
    token = _current.set(_OUTSIDE)
    try:
        yield
    finally:
        _current.reset(token)


def scope_of_this_thread() -> TunerScope | None:
    """The scope a tuner made here belongs to: this context's, else the process's only
    open one; None outside every scope."""
    scope = _current.get()
    if scope is not None:
        return scope if scope.open else None
    with _lock:
        if len(_open) > 1:
            raise AmbiguousTunerScope(
                f"a Tuner was created in a thread that belongs to no tuner scope while {len(_open)} scopes are open "
                f"in this process (several fleet workers in threads of one process?): start the thread with "
                f"contextvars.copy_context().run so that its tuners belong to the scope that started it")
        return _open[0] if _open else None


def adopt(tuner: Any) -> None:
    """Run the hook of the scope `tuner` was made in, if any (the Tuner's constructor calls it)."""
    scope = scope_of_this_thread()
    if scope is not None:
        scope.hook(tuner)
