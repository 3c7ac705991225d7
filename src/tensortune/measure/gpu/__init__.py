"""GPU measurement in isolated workers: described arguments, correctness checks, restarts.

Example:
    >>> from tensortune.measure.gpu import GpuTask, TensorArg, GpuRunner
    >>> TensorArg((4, 4), "float16", output=True).checked
    True
"""

from .args import TensorArg, make_args, mismatch, tolerance_for
from .runner import GpuRunner, GpuTaskError, confirmed_result
from .task import GpuTask, resolve

__all__ = ["GpuRunner", "GpuTask", "GpuTaskError", "TensorArg", "confirmed_result", "make_args",
           "mismatch", "resolve", "tolerance_for"]
