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
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..measure import CandidateError, ErrorKind

DEFAULT_FLAGS = ("-O3", "-march=native", "-fPIC", "-shared", "-fopenmp", "-std=gnu11", "-ffp-contract=fast")

_CTYPES = {
    "int": ctypes.c_int, "int32": ctypes.c_int32, "int64": ctypes.c_int64, "long": ctypes.c_long,
    "float": ctypes.c_float, "double": ctypes.c_double, "void*": ctypes.c_void_p, "ptr": ctypes.c_void_p,
}


def default_cache_dir() -> Path:
    return Path.home() / ".cache" / "tensortune" / "c"


@lru_cache(maxsize=8)
def compiler_version(cc: str) -> str:
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CandidateError(ErrorKind.COMPILE_ERROR, f"C compiler {cc!r} is not usable: {exc}") from exc
    return out.stdout.splitlines()[0] if out.stdout else cc


def define_flags(defines: Mapping[str, Any]) -> list[str]:
    """`-DNAME=value` for each define; booleans become 0/1."""
    flags = []
    for name, value in sorted(defines.items()):
        if isinstance(value, bool):
            value = int(value)
        flags.append(f"-D{name}={value}")
    return flags


@dataclass(frozen=True)
class CCompiler:
    """The system C compiler with a content-addressed cache of shared libraries."""

    cc: str = "cc"
    flags: tuple[str, ...] = DEFAULT_FLAGS
    cache_dir: Path = field(default_factory=default_cache_dir)
    timeout: float = 120.0

    def library_key(self, source: str, defines: Mapping[str, Any], extra_flags: Sequence[str]) -> str:
        text = "\0".join([compiler_version(self.cc), *self.flags, *extra_flags,
                          *define_flags(defines), source])
        return hashlib.sha256(text.encode()).hexdigest()[:24]

    def compile(self, source: str, defines: Mapping[str, Any] | None = None,
                extra_flags: Sequence[str] = ()) -> Path:
        """Path of the shared library built from `source`; CandidateError(compile_error or
        timeout) with the compiler's message if it does not build."""
        defines = dict(defines or {})
        key = self.library_key(source, defines, extra_flags)
        target = Path(self.cache_dir) / f"{key}.so"
        if target.exists():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="tensortune-cc-") as tmp:
            src = Path(tmp) / "kernel.c"
            src.write_text(source)
            out = Path(tmp) / "kernel.so"
            cmd = [self.cc, *self.flags, *extra_flags, *define_flags(defines), str(src), "-o", str(out), "-lm"]
            proc = _run_bounded(cmd, self.timeout, self.cc)
            if proc.returncode != 0:
                raise CandidateError(ErrorKind.COMPILE_ERROR,
                                     f"{' '.join(cmd[:1] + define_flags(defines))} failed:\n{proc.stderr[-3000:]}")
            fd, staged = tempfile.mkstemp(suffix=".so.tmp", dir=target.parent)
            os.close(fd)
            shutil.copyfile(out, staged)
            os.replace(staged, target)  # atomic: concurrent builders never see half a file
        return target


def _run_bounded(cmd: list[str], timeout: float, cc: str) -> subprocess.CompletedProcess[str]:
    """Run the compiler in its own process group, so that a timeout ends the whole group
    (the driver's cc1, as, ld), not only the driver."""
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
    except OSError as exc:
        raise CandidateError(ErrorKind.COMPILE_ERROR, f"cannot run {cc!r}: {exc}") from exc
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException as exc:  # a timeout, or this process interrupted: end the group
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        if isinstance(exc, subprocess.TimeoutExpired):
            raise CandidateError(ErrorKind.TIMEOUT, f"compiler ran past {timeout:.0f} s") from None
        raise
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
