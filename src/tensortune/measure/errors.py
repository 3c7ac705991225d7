"""Why a candidate failed: one enum, never magic strings; and whose fault it was.

A failure is the candidate's (deterministic: it fails again the same way, so it is never
measured again) or the environment's (a full disk, a missing compiler, a process the
system killed for memory, a busy GPU: nothing about the candidate, so it is retried once
the environment is back). `environment_cause` tells the second kind by its error.

Example:
    >>> ErrorKind("timeout") is ErrorKind.TIMEOUT
    True
    >>> environment_cause(OSError(28, "No space left on device"))
    'no space left on device'
    >>> environment_cause(ValueError("index out of range")) is None
    True
"""

from __future__ import annotations

import errno
from enum import Enum


class ErrorKind(str, Enum):
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    WRONG_RESULT = "wrong_result"
    OUT_OF_RESOURCES = "out_of_resources"
    CRASHED = "crashed"
    INVALID = "invalid"  # the configuration breaks a constraint of the space

    def __str__(self) -> str:
        return self.value


class CandidateError(Exception):
    """Raised inside a build or run to fail one candidate with a given kind.

    `environment`: why the environment, not the candidate, failed ("" when the candidate
    is to blame); such a failure is recorded but retried later.
    """

    def __init__(self, kind: ErrorKind, message: str, environment: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.environment = environment


class WrongResult(CandidateError):
    def __init__(self, message: str) -> None:
        super().__init__(ErrorKind.WRONG_RESULT, message)


_ERRNO_CAUSES = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EFBIG: "file size limit reached",
    errno.ENOMEM: "the system is out of memory",
    errno.EAGAIN: "the system cannot start more processes",
}

_TEXT_CAUSES = (
    ("no space left on device", "no space left on device"),
    ("disk quota exceeded", "disk quota exceeded"),
    ("read-only file system", "read-only file system"),
    ("file too large", "file size limit reached"),
    ("file size limit exceeded", "file size limit reached"),
    ("cannot allocate memory", "the system is out of memory"),
    ("busy or unavailable", "the GPU is busy or unavailable"),
    ("cudaerrordevicesunavailable", "the GPU is busy or unavailable"),
    ("cuda_error_busy", "the GPU is busy or unavailable"),
    ("device or resource busy", "the device is busy"),
)


def environment_cause(error: BaseException | str) -> str | None:
    """Why `error` is the environment's failure rather than the candidate's, or None.

    Recognised: a full disk or quota, a read-only or size-limited file system, the system
    out of memory or processes, a busy or unavailable GPU (by errno or by message text,
    also inside a compiler's output)."""
    if isinstance(error, CandidateError):
        return error.environment or None
    if isinstance(error, OSError) and error.errno in _ERRNO_CAUSES:
        return _ERRNO_CAUSES[error.errno]
    text = str(error).lower() if isinstance(error, str) else f"{type(error).__name__}: {error}".lower()
    for needle, cause in _TEXT_CAUSES:
        if needle in text:
            return cause
    return None
