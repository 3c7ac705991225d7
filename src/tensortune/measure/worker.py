"""A worker process that runs candidates in isolation, with a timeout.

A crash (segfault, abort, illegal memory access), a hang, a reply the candidate
garbled, or memory use past `memory_limit` kills only the worker: the caller gets a
`WorkerLost` (a `CandidateError` of kind `crashed`, `timeout` or `out_of_resources`), and
the next call starts a fresh worker. Functions sent to the worker must be picklable
(defined at module level); `worker_state()` gives them a dict that lives as long as the
worker, for loaded libraries and inputs.

The worker leads its own process group, so whatever a candidate starts (a forked child,
a compiler) is killed with it; it kills that group and exits as soon as the process that
started it dies, however that one died. Every read of a reply has a deadline, and every
reply is framed and checked (`channel.py`), so a candidate that writes into the result
channel fails itself instead of the tuner.

Example:
    >>> with IsolatedWorker(timeout=10) as w:
    ...     w.call(pow, 2, 10)
    1024
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing as mp
import multiprocessing.connection
import os
import pickle
import select
import signal
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Iterator, Mapping
from multiprocessing.reduction import ForkingPickler
from typing import Any

from .channel import FrameParser, MalformedReply, write_frame
from .errors import CandidateError, ErrorKind, environment_cause

_STARTING = threading.Lock()  # workers started from several threads (an actor's runners) start one by one

_STATE: dict[str, Any] = {}


def worker_state() -> dict[str, Any]:
    """Per-worker storage that survives between calls in the same worker process."""
    return _STATE


BUILD_NICENESS = 10  # compile workers yield the host to the process that times candidates
MEMORY_POLL_SECONDS = 0.02  # how often a worker's memory is looked at while it runs a candidate


def start_in_background(start: Callable[[], Any], name: str) -> threading.Thread:
    """Run `start` (a worker's start: process, imports, CUDA context) in a daemon thread of
    its own, so that other work goes on meanwhile; join the thread before using the worker.
    A failure is not raised here: the worker's first use meets it again, and reports it.

    Example:
        >>> start_in_background(lambda: None, "start-nothing").join()
    """
    def run() -> None:
        try:
            start()
        except Exception:  # noqa: BLE001 - met again, and reported, when the worker is used
            pass
    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread


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

_PARENT_EXIT_HOOKS: list[Callable[[], None]] = []


def on_parent_exit(hook: Callable[[], None]) -> None:
    """Run `hook` in this (worker) process when its parent dies, before it exits: to end
    what it started outside its own process group, such as a compiler's session."""
    _PARENT_EXIT_HOOKS.append(hook)


def _leads_own_group() -> bool:
    return os.getpgrp() == os.getpid()


@contextlib.contextmanager
def children_ignore_ctrl_c() -> Iterator[None]:
    """Start processes inside this block: they ignore SIGINT from their first instruction.

    A terminal's Ctrl-C reaches the whole foreground process group; a spawned process
    still importing would print a KeyboardInterrupt traceback of its own. An ignored
    SIGINT survives exec, and Python then installs no handler of its own, so the child
    ignores it until it exits; the parent handles Ctrl-C and stops its children. (Only
    the main thread can change a signal's handler; elsewhere nothing changes.)"""
    import threading
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def exit_with_parent() -> None:
    """End this worker process as soon as the process that started it dies, even by
    SIGKILL, instead of waiting forever for work that will never come. A worker that leads
    its own process group takes the whole group with it (a candidate's forked children)."""
    parent = mp.parent_process()
    if parent is None:
        return

    def watch() -> None:
        mp.connection.wait([parent.sentinel])
        for hook in list(_PARENT_EXIT_HOOKS):
            try:
                hook()
            except Exception:  # noqa: BLE001 - exiting regardless
                pass
        if _leads_own_group():
            os.killpg(0, signal.SIGKILL)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _serve(conn, env: Mapping[str, str], niceness: int = 0) -> None:
    os.environ.update(env)
    try:
        os.setpgid(0, 0)  # candidates' children belong to this group, killed with it
    except OSError:
        pass
    exit_with_parent()
    lower_priority(niceness)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    fd = conn.fileno()
    _answer(fd, 0, ("ready", os.getpid()))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            break
        if message is None:
            break
        call, fn, args, kwargs = message
        try:
            reply: tuple[Any, ...] = ("ok", fn(*args, **kwargs))
        except CandidateError as exc:
            reply = ("error", exc.kind.value, str(exc), exc.environment)
        except MemoryError as exc:
            reply = ("error", ErrorKind.OUT_OF_RESOURCES.value, f"MemoryError: {exc}", "")
        except BaseException as exc:  # noqa: BLE001 - everything a candidate raises is its error
            kind = classify_exception(exc)
            reply = ("error", kind.value, "".join(traceback.format_exception_only(type(exc), exc)).strip(),
                     environment_cause(exc) or "")
        _answer(fd, call, reply)
    if _leads_own_group():
        os.killpg(0, signal.SIGKILL)  # whatever candidates left running ends with us


def _answer(fd: int, call: int, reply: tuple[Any, ...]) -> None:
    try:
        payload = bytes(ForkingPickler.dumps(reply))
    except Exception as exc:  # noqa: BLE001 - an unpicklable result is the candidate's error
        payload = bytes(ForkingPickler.dumps(("error", ErrorKind.RUNTIME_ERROR.value,
                                              f"the result cannot be sent back: {type(exc).__name__}: {exc}", "")))
    write_frame(fd, call, payload)


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


class WorkerLost(CandidateError):
    """The worker process was lost during a call: it died, hung, garbled its reply or used
    too much memory, and was killed. `served` is how many calls it had answered before
    this one (0: nothing else ran in that process, so this call alone is to blame)."""

    def __init__(self, kind: ErrorKind, message: str, served: int, environment: str = "") -> None:
        super().__init__(kind, message, environment)
        self.served = served


def process_rss(pid: int) -> int:
    """Resident memory of a process in bytes (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def default_memory_limit() -> int:
    """Half of this machine's memory: a candidate that wants more is stopped before the
    system's out-of-memory killer picks a process (perhaps the tuner) to end."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        total = 8 << 30
    return max(1 << 30, total // 2)


_LIVE: "weakref.WeakSet[IsolatedWorker]" = weakref.WeakSet()


@atexit.register
def _kill_live_workers() -> None:
    # before multiprocessing's own exit handler terminates the process alone: end each
    # worker's whole group, so nothing a candidate started outlives the tuner
    for worker in list(_LIVE):
        worker._kill(count=False)


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
    """One long-lived child process; restarted after a crash, a hang or a garbled reply.

    `memory_limit` (bytes): a call whose process grows past it is stopped and fails with
    `out_of_resources` (looked at every `MEMORY_POLL_SECONDS`; None: no limit).
    """

    def __init__(self, timeout: float = 60.0, env: Mapping[str, str] | None = None,
                 start_method: str = "spawn", niceness: int = 0, memory_limit: int | None = None) -> None:
        self.timeout = timeout
        self.env = dict(env or {})
        self.niceness = niceness
        self.memory_limit = memory_limit
        self._ctx = mp.get_context(start_method)
        self._proc: Any = None
        self._conn: Any = None
        self._parser = FrameParser()
        self._ready = False  # the process started and said so: a later death is a candidate's
        self._calls = 0
        self._served = 0  # calls answered by the current process
        self._with_main = False  # whether the current process ran the `__main__` script
        self.restarts = 0
        self.discarded = 0  # processes dropped because bytes arrived that nobody asked for

    @property
    def served(self) -> int:
        """Calls answered by the current worker process (0 right after a restart)."""
        return self._served

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def alive(self) -> bool:
        """False when the process died since its last call (no process yet counts as alive)."""
        return self._proc is None or self._proc.is_alive()

    def settled(self, seconds: float) -> bool:
        """Whether the process is still alive after `seconds` (what a call left running may
        crash it after the call returned)."""
        if self._proc is None:
            return True
        return not mp.connection.wait([self._proc.sentinel], timeout=seconds)

    def exit_description(self) -> str:
        code = self._proc.exitcode if self._proc is not None else None
        return f"worker process died ({_describe_exit(code)})"

    def _start(self, with_main: bool = False) -> None:
        parent, child = self._ctx.Pipe()
        self._proc = self._ctx.Process(target=_serve, args=(child, self.env, self.niceness), daemon=True)
        # one start at a time: `_main_script` swaps process-wide state (the child's imports run apart)
        with _STARTING, _main_script(with_main), children_ignore_ctrl_c():
            self._proc.start()
        self._with_main = with_main
        child.close()
        self._conn = parent
        self._parser = FrameParser()
        self._ready = False
        self._served = 0
        _LIVE.add(self)

    def call(self, fn: Callable[..., Any], *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
        """Run `fn(*args, **kwargs)` in the worker and return its result.

        Raises WorkerLost (timeout, crashed, out_of_resources: the process is gone) or
        CandidateError (the kind the candidate raised).
        """
        with_main = _needs_main(_dumps((fn, args, kwargs)))
        if self._proc is not None and with_main and not self._with_main:
            self.close()  # a call that needs the user's script: a worker that imported it
        try:
            if self._proc is None or not self._proc.is_alive():
                if self._proc is not None:
                    self._kill()
                self._start(with_main)
            elif self._unasked_bytes():
                # an earlier candidate (or what it left running) wrote into the channel after
                # its reply: that process cannot be trusted with this call
                self._kill()
                self.discarded += 1
                self._start(with_main)
        except OSError as exc:  # no process could be started: the system's doing
            self._proc = self._conn = None
            raise WorkerLost(ErrorKind.CRASHED, f"cannot start a worker process: {exc}", 0,
                             environment_cause(exc) or "a worker process cannot be started") from exc
        limit = self.timeout if timeout is None else timeout
        self._calls += 1
        served = self._served
        try:
            self._conn.send((self._calls, fn, args, kwargs))
        except (BrokenPipeError, OSError):
            self._kill()
            raise WorkerLost(ErrorKind.CRASHED, "worker process died before the call", served) from None
        reply = self._receive(self._calls, time.monotonic() + limit, limit, served)
        self._served += 1
        if reply[0] == "ok":
            return reply[1]
        raise CandidateError(ErrorKind(reply[1]), reply[2], environment=reply[3])

    # ---- receiving ---------------------------------------------------------------------
    def _lost(self, kind: ErrorKind, message: str, served: int) -> WorkerLost:
        self._kill()
        return WorkerLost(kind, message, served)

    def _frame_reply(self, call: int, served: int) -> tuple[Any, ...] | None:
        """The reply to `call` if a whole one is buffered; WorkerLost for anything malformed."""
        while True:
            try:
                frame = self._parser.next_frame()
            except MalformedReply as exc:
                raise self._lost(ErrorKind.CRASHED, f"malformed reply from the worker ({exc}): the candidate wrote "
                                 "into the worker's result channel or corrupted the process; worker killed",
                                 served) from None
            if frame is None:
                return None
            number, payload = frame
            if number == 0 and not self._ready:
                self._ready = True
                continue
            if number != call:
                raise self._lost(ErrorKind.CRASHED, f"malformed reply from the worker (an answer to call {number} "
                                 f"while waiting for call {call}); worker killed", served)
            try:
                reply = pickle.loads(payload)
                if not isinstance(reply, tuple) or reply[0] not in ("ok", "error") or \
                        reply[0] == "error" and (len(reply) != 4 or ErrorKind(reply[1]) is None):
                    raise ValueError(f"unexpected reply {reply!r:.80}")
            except Exception as exc:  # noqa: BLE001 - a reply that does not decode is the candidate's failure
                raise self._lost(ErrorKind.CRASHED, f"malformed reply from the worker ({type(exc).__name__}: "
                                 f"{exc}); worker killed", served) from None
            return reply

    def _read_available(self) -> bool:
        """Feed the parser what can be read now; False at end of file."""
        fd = self._conn.fileno()
        while select.select([fd], [], [], 0)[0]:
            try:
                data = os.read(fd, 1 << 16)
            except OSError:
                return False
            if not data:
                return False
            self._parser.feed(data)
        return True

    def _receive(self, call: int, deadline: float, limit: float, served: int) -> tuple[Any, ...]:
        fd, sentinel = self._conn.fileno(), self._proc.sentinel
        while True:
            reply = self._frame_reply(call, served)
            if reply is not None:
                return reply
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._lost(ErrorKind.TIMEOUT, f"no result within {limit:.1f} s; worker killed", served)
            wait = min(remaining, MEMORY_POLL_SECONDS) if self.memory_limit else remaining
            readable = select.select([fd, sentinel], [], [], wait)[0]
            open_ = self._read_available() if fd in readable else True
            if fd in readable and open_:
                continue
            if not open_ or sentinel in readable:
                self._read_available()  # what it wrote before dying still counts
                reply = self._frame_reply(call, served)
                if reply is not None:
                    return reply
                raise self._died(served)
            if self.memory_limit and process_rss(self._proc.pid) > self.memory_limit:
                raise self._lost(ErrorKind.OUT_OF_RESOURCES, f"used more than {self.memory_limit / 2**20:.0f} MiB "
                                 "of memory (the worker's memory limit); stopped", served)

    def _died(self, served: int) -> WorkerLost:
        _kill_group(self._proc.pid)
        self._proc.join(timeout=1)
        code = self._proc.exitcode
        started = self._ready
        self._kill()
        hint = f"; {STARTUP_HINT}" if not started and code == 1 else ""
        return WorkerLost(ErrorKind.CRASHED, f"worker process died ({_describe_exit(code)}){hint}", served)

    def _unasked_bytes(self) -> bool:
        """Bytes waiting on the channel beyond the start-up notice, before a call was sent."""
        if not self._read_available():
            return True
        try:
            frame = self._parser.next_frame()
        except MalformedReply:
            return True
        if frame is not None and frame[0] == 0 and not self._ready:
            self._ready = True
            return self._unasked_bytes()
        return frame is not None or self._parser.partial

    # ---- ending ------------------------------------------------------------------------
    def _kill(self, count: bool = True) -> None:
        if self._proc is not None:
            _kill_group(self._proc.pid)
            if self._proc.is_alive():
                self._proc.kill()
            self._proc.join(timeout=5)
        if self._conn is not None:
            self._conn.close()
        if self._proc is not None and count:
            self.restarts += 1
        self._proc = self._conn = None
        _LIVE.discard(self)

    def close(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            try:
                self._conn.send(None)
                self._proc.join(timeout=2)
            except (BrokenPipeError, OSError):
                pass
        self._kill(count=False)

    def __enter__(self) -> "IsolatedWorker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _kill_group(pid: int) -> None:
    """SIGKILL the process group a worker leads, with what its candidates left running (a
    worker that died before making its group has none: nothing to do)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
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
