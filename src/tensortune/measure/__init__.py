"""Measurement: builders, runners, timers, isolated workers and the records they make."""

from .builder import Builder, NullBuilder, ProcessPoolBuilder
from .errors import CandidateError, ErrorKind, WrongResult
from .result import BuildResult, MeasureResult
from .runner import CallableRunner, IsolatedCallableRunner, Runner, check_close, failed_build
from .timer import Timer
from .worker import IsolatedWorker, classify_exception, worker_state

__all__ = [
    "BuildResult", "Builder", "CallableRunner", "CandidateError", "ErrorKind", "IsolatedCallableRunner",
    "IsolatedWorker",
    "MeasureResult", "NullBuilder", "ProcessPoolBuilder", "Runner", "Timer", "WrongResult",
    "check_close", "classify_exception", "failed_build", "worker_state",
]
