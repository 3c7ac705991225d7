"""Compile C source into a shared library, cached by source, defines and flags.

Example:
    >>> lib = CCompiler().compile("int twice(int x) { return 2 * x; }")
    >>> load_function(lib, "twice", ["int"], restype="int")(21)
    42
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import math
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..measure import CandidateError, ErrorKind
from ..measure.errors import environment_cause
from ..measure.worker import on_parent_exit

DEFAULT_FLAGS = ("-O3", "-march=native", "-fPIC", "-shared", "-fopenmp", "-std=gnu11", "-ffp-contract=fast")

_CTYPES = {
    "int": ctypes.c_int, "int32": ctypes.c_int32, "int64": ctypes.c_int64, "long": ctypes.c_long,
    "float": ctypes.c_float, "double": ctypes.c_double, "void*": ctypes.c_void_p, "ptr": ctypes.c_void_p,
}


def default_cache_dir() -> Path:
    return Path.home() / ".cache" / "tensortune" / "c"


DEFAULT_MEMORY_LIMIT = 4 << 30  # bytes of address space a compiler may use

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[A-Za-z]{0,3}")


def _compiler_missing(cc: str) -> CandidateError:
    return CandidateError(ErrorKind.COMPILE_ERROR, f"C compiler {cc!r} not found (install one, or set CC)",
                          environment="the C compiler is missing")


@lru_cache(maxsize=8)
def _compiler_version(cc: str) -> str:
    out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    return out.stdout.splitlines()[0] if out.stdout else cc


def compiler_version(cc: str) -> str:
    """The first line of `cc --version`; a missing or unusable compiler is the
    environment's failure, retried once it is back (so it is not remembered)."""
    if shutil.which(cc) is None:
        raise _compiler_missing(cc)
    try:
        return _compiler_version(cc)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CandidateError(ErrorKind.COMPILE_ERROR, f"C compiler {cc!r} is not usable: {exc}",
                             environment=environment_cause(exc) or "the C compiler is not usable") from exc


def define_value(name: Any, value: Any) -> str:
    """The text of one `-D` define: a finite number, a boolean (0/1) or an identifier.
    Anything else (a value with spaces, quotes, parentheses...) would be C code pasted into
    the kernel, so it is refused with CandidateError(invalid)."""
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name):
        raise CandidateError(ErrorKind.INVALID, f"define name {name!r:.80} is not a C identifier")
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    if isinstance(value, str) and (_IDENTIFIER.fullmatch(value) or _NUMBER.fullmatch(value)):
        return value
    raise CandidateError(ErrorKind.INVALID, f"define {name}={value!r:.80} is not a number, boolean or identifier; "
                         "refused (it would be pasted into the C source)")


def define_flags(defines: Mapping[str, Any]) -> list[str]:
    """`-DNAME=value` for each define; booleans become 0/1.

    Example:
        >>> define_flags({"TILE": 32, "PACK": True})
        ['-DPACK=1', '-DTILE=32']
    """
    return [f"-D{name}={define_value(name, value)}" for name, value in sorted(defines.items())]


@dataclass(frozen=True)
class CCompiler:
    """The system C compiler with a content-addressed cache of shared libraries."""

    cc: str = "cc"
    flags: tuple[str, ...] = DEFAULT_FLAGS
    cache_dir: Path = field(default_factory=default_cache_dir)
    timeout: float = 120.0
    memory_limit: int | None = DEFAULT_MEMORY_LIMIT  # bytes of address space for the compiler

    def library_key(self, source: str, defines: Mapping[str, Any], extra_flags: Sequence[str]) -> str:
        text = "\0".join([compiler_version(self.cc), *self.flags, *extra_flags,
                          *define_flags(defines), source])
        return hashlib.sha256(text.encode()).hexdigest()[:24]

    def compile(self, source: str, defines: Mapping[str, Any] | None = None,
                extra_flags: Sequence[str] = ()) -> Path:
        """Path of the shared library built from `source`; CandidateError(compile_error,
        timeout or out_of_resources) with the compiler's message if it does not build.

        A failure of the environment (no compiler, a full disk, a compiler the system
        killed) is a CandidateError whose `environment` says so; nothing half-written is
        left in the cache."""
        defines = dict(defines or {})
        flags = define_flags(defines)
        key = self.library_key(source, defines, extra_flags)
        target = Path(self.cache_dir) / f"{key}.so"
        if target.exists():
            return target
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(prefix="tensortune-cc-") as tmp:
                src = Path(tmp) / "kernel.c"
                src.write_text(source)
                out = Path(tmp) / "kernel.so"
                cmd = [self.cc, *self.flags, *extra_flags, *flags, str(src), "-o", str(out), "-lm"]
                proc = _run_bounded(cmd, self.timeout, self.cc, self.memory_limit)
                if proc.returncode != 0:
                    raise self._failure(proc, " ".join(cmd[:1] + flags))
                _install(out, target)
        except OSError as exc:  # writing the source, the library or the cache
            raise CandidateError(ErrorKind.COMPILE_ERROR, f"cannot write the compiled library: {exc}",
                                 environment=environment_cause(exc) or "") from exc
        return target

    def _failure(self, proc: subprocess.CompletedProcess[str], command: str) -> CandidateError:
        err = proc.stderr[-3000:]
        message = f"{command} failed:\n{err}"
        lowered = err.lower()
        if self.memory_limit and ("out of memory" in lowered or "memory exhausted" in lowered):
            return CandidateError(ErrorKind.OUT_OF_RESOURCES, f"{command}: the compiler ran out of memory (its limit "
                                  f"is {self.memory_limit / 2**20:.0f} MiB):\n{err}")
        if proc.returncode == -signal.SIGKILL:  # not ours (a timeout raises): the system's OOM killer
            return CandidateError(ErrorKind.COMPILE_ERROR, f"{command}: the compiler was killed (SIGKILL)",
                                  environment="the compiler was killed by the system (out of memory?)")
        return CandidateError(ErrorKind.COMPILE_ERROR, message, environment=environment_cause(err) or "")


def _install(built: Path, target: Path) -> None:
    """Copy `built` into the cache as `target` atomically: concurrent builders never see
    half a file, and a copy that fails (a full disk) leaves no partial file behind."""
    fd, staged = tempfile.mkstemp(suffix=".so.tmp", dir=target.parent)
    os.close(fd)
    try:
        shutil.copyfile(built, staged)
        os.replace(staged, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staged)


_RUNNING: set[int] = set()  # process groups of compilers running in this process
_RUNNING_LOCK = threading.Lock()


def _end_running_compilers() -> None:
    with _RUNNING_LOCK:
        for pgid in list(_RUNNING):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)


on_parent_exit(_end_running_compilers)  # a build process whose tuner died ends its compilers too


def _run_bounded(cmd: list[str], timeout: float, cc: str,
                 memory_limit: int | None = None) -> subprocess.CompletedProcess[str]:
    """Run the compiler in its own process group, so that a timeout ends the whole group
    (the driver's cc1, as, ld), not only the driver; with no input (it never reads the
    tuner's terminal) and, on Linux, at most `memory_limit` bytes of address space each.
    Should this process die meanwhile, a build process's exit hook or, failing that,
    coreutils' `timeout` ends the compiler."""
    if shutil.which(cc) is None:
        raise _compiler_missing(cc)
    if shutil.which("timeout"):
        # a backstop that outlives this process: should it die while the compiler hangs,
        # coreutils' timeout still ends the compiler's whole group a little after the limit
        cmd = ["timeout", "-s", "KILL", str(math.ceil(timeout) + 5), *cmd]
    if memory_limit:
        # the shell sets the limit between fork and exec, which Python cannot do safely
        # from a threaded process; the compiler's own processes inherit it
        cmd = ["/bin/sh", "-c", f'ulimit -v {max(1, memory_limit // 1024)} 2>/dev/null; exec "$0" "$@"', *cmd]
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
    except OSError as exc:
        raise CandidateError(ErrorKind.COMPILE_ERROR, f"cannot run {cc!r}: {exc}",
                             environment=environment_cause(exc) or "the C compiler cannot be run") from exc
    with _RUNNING_LOCK:
        _RUNNING.add(proc.pid)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException as exc:  # a timeout, or this process interrupted: end the group
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        if isinstance(exc, subprocess.TimeoutExpired):
            raise CandidateError(ErrorKind.TIMEOUT, f"compiler ran past {timeout:.0f} s") from None
        raise
    finally:
        with _RUNNING_LOCK:
            _RUNNING.discard(proc.pid)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def load_function(library: str | os.PathLike[str], name: str, argtypes: Sequence[str],
                  restype: str | None = None) -> Any:
    """A ctypes function from a shared library; argument types are names like "float*"."""
    lib = ctypes.CDLL(str(library))
    try:
        fn = getattr(lib, name)
    except AttributeError:
        raise CandidateError(ErrorKind.COMPILE_ERROR, f"{library} has no function {name!r}") from None
    fn.argtypes = [ctypes.c_void_p if t.endswith("*") else _CTYPES[t] for t in argtypes]
    fn.restype = _CTYPES[restype] if restype else None
    return fn
