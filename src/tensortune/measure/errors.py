"""Why a candidate failed: one enum, never magic strings.

Example:
    >>> ErrorKind("timeout") is ErrorKind.TIMEOUT
    True
"""

from __future__ import annotations

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
    """Raised inside a build or run to fail one candidate with a given kind."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class WrongResult(CandidateError):
    def __init__(self, message: str) -> None:
        super().__init__(ErrorKind.WRONG_RESULT, message)
