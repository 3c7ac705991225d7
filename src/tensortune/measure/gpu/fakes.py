"""Fake candidates that fail on command, to test isolation and recovery on the CPU.

`launch(config, x, out)` computes `out = 2 * x` (CPU or CUDA torch tensors) unless
`config["fault"]` says otherwise:

- "none": correct; `config.get("sleep", 0)` seconds of host sleep make it slower;
- "wrong": a wrong answer (`2 * x + 1`);
- "partial": leaves the last element unwritten;
- "crash": kills the worker process with SIGSEGV, as a bad pointer in a host library does;
- "hang": never returns, as an infinite loop in a kernel does;
- "oom": raises Triton's `OutOfResources` for shared memory (a plain RuntimeError
  with the same text when Triton is not installed);
- "sticky": raises an illegal-memory-access error and poisons this worker, so every
  later launch fails the same way until the worker is restarted (a sticky CUDA
  error); `health_check` reports the poisoning, as the CUDA probe would.
- "accumulate": adds into `out` instead of writing it (right only when `out` is declared
  zero=True);
- "mutate_input": right once, but also changes `x`, so repeated runs drift.

`inplace(config, x)` doubles `x` in place (correct with `restore=True`).

Example:
    >>> import torch
    >>> x, out = torch.ones(4), torch.zeros(4)
    >>> launch({"fault": "none"}, x, out); out.tolist()
    [2.0, 2.0, 2.0, 2.0]
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Mapping
from typing import Any

from ..worker import worker_state

_ILLEGAL = "CUDA error: an illegal memory access was encountered"


def launch(config: Mapping[str, Any], x: Any, out: Any) -> None:
    if worker_state().get("fake_poisoned"):
        raise RuntimeError(_ILLEGAL)
    fault = config.get("fault", "none")
    if fault == "none":
        if config.get("sleep"):
            time.sleep(float(config["sleep"]))
        out.copy_(x * 2)
    elif fault == "wrong":
        out.copy_(x * 2 + 1)
    elif fault == "partial":
        out[:-1].copy_(x[:-1] * 2)
    elif fault == "accumulate":
        out.add_(x * 2)
    elif fault == "mutate_input":
        out.copy_(x * 2)
        x.add_(1)
    elif fault == "crash":
        ctypes.string_at(0)  # SIGSEGV
    elif fault == "hang":
        while True:
            time.sleep(0.05)
    elif fault == "oom":
        try:
            from triton.runtime.errors import OutOfResources
        except ImportError:
            raise RuntimeError("out of resource: shared memory, Required: 262144, Hardware limit: 232448") from None
        raise OutOfResources(262144, 232448, "shared memory")
    elif fault == "sticky":
        worker_state()["fake_poisoned"] = True
        raise RuntimeError(_ILLEGAL)
    else:
        raise ValueError(f"unknown fault {fault!r}")


def reference(x: Any, out: Any) -> Any:
    return x * 2


def inplace(config: Mapping[str, Any], x: Any) -> None:
    x.mul_(2)


def inplace_reference(x: Any) -> Any:
    return x * 2


def health_check() -> bool:
    return not worker_state().get("fake_poisoned", False)
