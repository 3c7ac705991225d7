"""A worker process that runs candidates in isolation, with a timeout.

A crash (segfault, abort, illegal memory access) or a hang in a candidate kills only
the worker: the caller gets a `CandidateError` of kind `crashed` or `timeout`, and the
next call starts a fresh worker. Functions sent to the worker must be picklable
(defined at module level); `worker_state()` gives them a dict that lives as long as
the worker, for loaded libraries and inputs.

Example:
    >>> with IsolatedWorker(timeout=10) as w:
    ...     w.call(pow, 2, 10)
    1024
"""

from __future__ import annotations

import contextlib

import multiprocessing as mp
import multiprocessing.connection
import os
import signal
import threading
import traceback
from collections.abc import Callable, Mapping
from typing import Any

from .errors import CandidateError, ErrorKind

_STATE: dict[str, Any] = {}


def worker_state() -> dict[str, Any]:
    """Per-worker storage that survives between calls in the same worker process."""
    return _STATE


BUILD_NICENESS = 10  # compile workers yield the host to the process that times candidates


def lower_priority(niceness: int = BUILD_NICENESS) -> None:
    """Run this process at a lower priority (a compile worker), so the process timing
    candidates on the same host is not kept waiting: a waiting launch is a slower-looking
    kernel. Where that is not permitted, the process keeps its priority."""
    if niceness <= 0:
        return
    try:
        os.nice(niceness)
    except OSError:
        pass


STARTUP_HINT = ("it died before running anything: if tuning starts from a script, put that under "
                "`if __name__ == \"__main__\":`, since worker processes are spawned and import the script")


def exit_with_parent() -> None:
    """End this worker process as soon as the process that started it dies, even by
    SIGKILL, instead of waiting forever for work that will never come."""
    parent = mp.parent_process()
    if parent is None:
        return

    def watch() -> None:
        mp.connection.wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _serve(conn, env: Mapping[str, str], niceness: int = 0) -> None:
    os.environ.update(env)
    lower_priority(niceness)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        fn, args, kwargs = message
        try:
            conn.send(("ok", fn(*args, **kwargs)))
        except CandidateError as exc:
            conn.send(("error", exc.kind.value, str(exc)))
        except MemoryError as exc:
            conn.send(("error", ErrorKind.OUT_OF_RESOURCES.value, f"MemoryError: {exc}"))
        except BaseException as exc:  # noqa: BLE001 - everything a candidate raises is its error
            kind = classify_exception(exc)
            conn.send(("error", kind.value, "".join(traceback.format_exception_only(type(exc), exc)).strip()))


def classify_exception(exc: BaseException) -> ErrorKind:
    """Map an exception raised by a candidate to an error kind by its type and text."""
    if isinstance(exc, CandidateError):
        return exc.kind
    text = f"{type(exc).__name__}: {exc}".lower()
    if "out of resource" in text or "out of memory" in text or "outofresources" in text \
            or "shared memory" in text and "exceed" in text:
        return ErrorKind.OUT_OF_RESOURCES
    if "illegal memory access" in text or "misaligned address" in text:
        return ErrorKind.CRASHED
    if "compil" in text:
        return ErrorKind.COMPILE_ERROR
    return ErrorKind.RUNTIME_ERROR


def _dumps(message: Any) -> bytes:
    from multiprocessing.reduction import ForkingPickler
    return bytes(ForkingPickler.dumps(message))


def _needs_main(payload: bytes) -> bool:
    """Whether a pickled call refers to something defined in the `__main__` script."""
    import pickletools
    try:
        for op, arg, _ in pickletools.genops(payload):
            if op.name in ("GLOBAL", "INST") and isinstance(arg, str) and arg.split(" ")[0] == "__main__":
                return True
            if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE") and arg == "__main__":
                return True
    except Exception:  # noqa: BLE001 - when in doubt, run the script as before
        return True
    return False


@contextlib.contextmanager
def _main_script(import_it: bool) -> Any:
    """Start a spawned process with or without re-running the `__main__` script in it.

    A worker imports the user's script only when a call needs something defined there
    (a callable tuned by `tt.tune`); kernels of tensortune's own modules do not, so a
    script that compiles a model needs no `if __name__ == "__main__":` guard."""
    if import_it:
        yield
        return
    import sys
    import types
    real = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if real is not None:
            sys.modules["__main__"] = real


class IsolatedWorker:
    """One long-lived child process; restarted after a crash or a timeout."""

    def __init__(self, timeout: float = 60.0, env: Mapping[str, str] | None = None,
                 start_method: str = "spawn", niceness: int = 0) -> None:
        self.timeout = timeout
        self.env = dict(env or {})
        self.niceness = niceness
        self._ctx = mp.get_context(start_method)
        self._proc: Any = None
        self._conn: Any = None
        self._answered_any = False  # once a call is answered, worker processes start fine
        self._with_main = False
        self.restarts = 0

    def _start(self, with_main: bool) -> None:
        parent, child = self._ctx.Pipe()
        self._proc = self._ctx.Process(target=_serve, args=(child, self.env, self.niceness), daemon=True)
        with _main_script(with_main):
            self._proc.start()
        child.close()
        self._conn = parent
        self._with_main = with_main

    def call(self, fn: Callable[..., Any], *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
        """Run `fn(*args, **kwargs)` in the worker and return its result.

        Raises CandidateError (timeout, crashed, or the kind the candidate raised).
        """
        message = _dumps((fn, args, kwargs))
        with_main = _needs_main(message)
        if self._proc is not None and with_main and not self._with_main:
            self.close()  # a call that needs the user's script: a worker that imported it
        if self._proc is None or not self._proc.is_alive():
            self._start(with_main)
        limit = self.timeout if timeout is None else timeout
        try:
            self._conn.send_bytes(message)
        except (BrokenPipeError, OSError):
            self._kill()
            raise CandidateError(ErrorKind.CRASHED, "worker process died before the call") from None
        if not self._conn.poll(limit):
            self._kill()
            raise CandidateError(ErrorKind.TIMEOUT, f"no result within {limit:.1f} s; worker killed")
        try:
            reply = self._conn.recv()
        except (EOFError, ConnectionResetError, OSError):
            self._proc.join(timeout=1)
            code = self._proc.exitcode
            self._kill()
            hint = f"; {STARTUP_HINT}" if not self._answered_any and code == 1 else ""
            raise CandidateError(ErrorKind.CRASHED, f"worker process died ({_describe_exit(code)}){hint}") from None
        self._answered_any = True
        if reply[0] == "ok":
            return reply[1]
        raise CandidateError(ErrorKind(reply[1]), reply[2])

    def _kill(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
        if self._proc is not None:
            self._proc.join(timeout=5)
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = None
        self.restarts += 1

    def close(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            try:
                self._conn.send(None)
                self._proc.join(timeout=2)
            except (BrokenPipeError, OSError):
                pass
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
            self._proc.join(timeout=2)
        self._proc = self._conn = None

    def __enter__(self) -> "IsolatedWorker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "exit status unknown"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
