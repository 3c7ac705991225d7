"""Measurement: builders, runners, timers, isolated workers and the records they make."""

from .builder import Builder, NullBuilder, ProcessPoolBuilder
from .errors import CandidateError, ErrorKind, WrongResult
from .executor import Executor, LocalExecutor, RemoteBuild, RemoteRunner, ShippedFile, make_executor
from .result import BuildResult, MeasureResult
from .runner import CallableRunner, IsolatedCallableRunner, Runner, check_close, failed_build
from .timer import Timer
from .worker import IsolatedWorker, classify_exception, worker_state

__all__ = [
    "BuildResult", "Builder", "CallableRunner", "CandidateError", "ErrorKind", "Executor", "IsolatedCallableRunner",
    "IsolatedWorker", "LocalExecutor",
    "MeasureResult", "NullBuilder", "ProcessPoolBuilder", "RemoteBuild", "RemoteRunner", "Runner", "ShippedFile",
    "Timer", "WrongResult", "check_close", "classify_exception", "failed_build", "make_executor", "worker_state",
]
