"""Builders turn configurations into runnable artifacts, many at once.

`ProcessPoolBuilder` calls a picklable `build(config)` in a pool of worker processes
(one per core by default) with a compile timeout; a candidate that fails to build is
returned as a failed `BuildResult` and the others go on. A hung build is killed with
its pool, which is then started again.

Example:
    >>> from tensortune.space import Config
    >>> [r.artifact for r in NullBuilder().build([Config(a=1)])]
    [None]
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import multiprocessing as mp
import os
import signal
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ..space import Config
from .errors import CandidateError, ErrorKind, environment_cause
from .executor import RemoteBuild
from .result import BuildResult
from .worker import STARTUP_HINT, children_ignore_ctrl_c, classify_exception, exit_with_parent, lower_priority


def _kill_pool(pool: cf.ProcessPoolExecutor) -> None:
    for proc in list(getattr(pool, "_processes", {}).values()):
        if proc.is_alive():
            proc.kill()
    pool.shutdown(wait=False, cancel_futures=True)


class Builder(Protocol):
    """Builds a batch of configurations; never raises for one bad candidate."""

    def build(self, configs: Sequence[Config]) -> list[BuildResult]: ...


class NullBuilder:
    """For candidates that need no compilation (plain Python callables)."""

    def build(self, configs: Sequence[Config]) -> list[BuildResult]:
        return [BuildResult(c) for c in configs]

    def remote_build(self) -> RemoteBuild:
        return RemoteBuild(BuildResult, timeout=60.0, native=False)


def _init_build_process() -> None:
    lower_priority()
    exit_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: no traceback per process


def build_one(build: Callable[[Config], Any], config: Config) -> BuildResult:
    """`build(config)` in this process as a `BuildResult` (a failure is the result)."""
    return ProcessPoolBuilder._to_result(config, _timed_build(build, config))


def _timed_build(build: Callable[[Config], Any], config: Config) -> tuple[str, Any, float]:
    start = time.perf_counter()
    try:
        artifact = build(config)
        return ("ok", artifact, time.perf_counter() - start)
    except KeyboardInterrupt:  # the user's Ctrl-C during an inline build stops tuning; it is no candidate's fault
        raise
    except BaseException as exc:  # noqa: BLE001 - a build's failure belongs to its candidate
        kind = exc.kind if isinstance(exc, CandidateError) else ErrorKind.COMPILE_ERROR
        if not isinstance(exc, CandidateError) and classify_exception(exc) is ErrorKind.OUT_OF_RESOURCES:
            kind = ErrorKind.OUT_OF_RESOURCES
        return ("error", (kind.value, f"{type(exc).__name__}: {exc}", environment_cause(exc) or ""),
                time.perf_counter() - start)


class ProcessPoolBuilder:
    """Builds candidates in parallel processes with a per-candidate timeout."""

    def __init__(self, build: Callable[[Config], Any], jobs: int | None = None,
                 timeout: float = 120.0, start_method: str = "spawn") -> None:
        self.build_fn = build
        self.jobs = jobs or os.cpu_count() or 1
        self.timeout = timeout
        self._ctx = mp.get_context(start_method)
        self._pool: cf.ProcessPoolExecutor | None = None
        self._built_any = False  # once a build finished, build processes start fine

    def _ensure_pool(self) -> cf.ProcessPoolExecutor:
        if self._pool is None:
            self._pool = cf.ProcessPoolExecutor(self.jobs, mp_context=self._ctx, initializer=_init_build_process)
        return self._pool

    def build(self, configs: Sequence[Config]) -> list[BuildResult]:
        """Build every configuration, `jobs` at a time, each within `timeout`.

        Only the build that hangs is a timeout: the others in flight when its pool is
        killed are built again. When a build crashes its process, the pool breaks for all
        builds in flight, so each of those is built again alone, and only one that breaks
        its process again is recorded as crashed."""
        if self.jobs == 1:
            return [self._to_result(c, _timed_build(self.build_fn, c)) for c in configs]
        results: dict[Config, BuildResult] = {}
        todo = list(dict.fromkeys(configs))
        inflight: dict[cf.Future, tuple[Config, float]] = {}
        while todo or inflight:
            try:
                pool = self._ensure_pool()
                while todo and len(inflight) < self.jobs:
                    try:
                        with children_ignore_ctrl_c():  # the first submit starts the pool's processes
                            fut = pool.submit(_timed_build, self.build_fn, todo[0])
                    except cf.BrokenExecutor:
                        break
                    inflight[fut] = (todo.pop(0), time.monotonic() + self.timeout)
            except OSError as exc:  # no build process can be started: the system's doing
                cause = environment_cause(exc) or "build processes cannot be started"
                for cfg in [c for c, _ in inflight.values()] + todo:
                    results[cfg] = BuildResult(cfg, None, ErrorKind.CRASHED, f"cannot start a build process: {exc}",
                                               environment=cause)
                self._restart()
                break
            if not inflight:
                self._restart()
                continue
            nearest = min(deadline for _, deadline in inflight.values())
            done, _ = cf.wait(inflight, timeout=max(0.0, nearest - time.monotonic()),
                              return_when=cf.FIRST_COMPLETED)
            lost: list[Config] = []
            for fut in done:
                cfg, _ = inflight.pop(fut)
                try:
                    results[cfg] = self._to_result(cfg, fut.result())
                    self._built_any = True
                except Exception:  # the pool broke: some build in flight crashed its process
                    lost.append(cfg)
            now = time.monotonic()
            hung = [fut for fut, (_, deadline) in inflight.items() if deadline <= now]
            if lost or hung:
                for fut in hung:
                    cfg, _ = inflight.pop(fut)
                    results[cfg] = BuildResult(cfg, None, ErrorKind.TIMEOUT,
                                               f"build did not finish within {self.timeout:.0f} s")
                if lost:
                    lost += [cfg for cfg, _ in inflight.values()]
                else:
                    todo[:0] = [cfg for cfg, _ in inflight.values()]  # innocent: built again
                inflight.clear()
                self._restart()
                for cfg in lost:
                    results[cfg] = self._build_alone(cfg)
        return [results[c] for c in configs]

    def remote_build(self) -> RemoteBuild:
        """The recipe for building elsewhere (`measure.executor`): one configuration per call."""
        return RemoteBuild(functools.partial(build_one, self.build_fn), timeout=self.timeout)

    def _build_alone(self, config: Config) -> BuildResult:
        """Build one configuration in a process of its own: whether it crashes its process."""
        pool = cf.ProcessPoolExecutor(1, mp_context=self._ctx, initializer=_init_build_process)
        try:
            with children_ignore_ctrl_c():
                future = pool.submit(_timed_build, self.build_fn, config)
            outcome = future.result(timeout=self.timeout)
            self._built_any = True
            return self._to_result(config, outcome)
        except cf.TimeoutError:
            return BuildResult(config, None, ErrorKind.TIMEOUT, f"build did not finish within {self.timeout:.0f} s")
        except Exception as exc:  # noqa: BLE001 - it broke a process of its own: it is to blame
            died = f"build process died: {str(exc).rstrip('.')}"
            hint = "" if self._built_any else f"; {STARTUP_HINT}"
            return BuildResult(config, None, ErrorKind.CRASHED, died + hint)
        finally:
            _kill_pool(pool)

    @staticmethod
    def _to_result(config: Config, outcome: tuple[str, Any, float]) -> BuildResult:
        status, payload, seconds = outcome
        if status == "ok":
            return BuildResult(config, payload, None, "", seconds)
        kind, message, environment = payload
        return BuildResult(config, None, ErrorKind(kind), message[:4000], seconds, environment)

    def _restart(self) -> None:
        if self._pool is not None:
            _kill_pool(self._pool)
        self._pool = None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
