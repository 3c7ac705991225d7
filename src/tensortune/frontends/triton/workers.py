"""The compile processes and the GPU worker of this process, started once and kept warm.

Starting a pool of compile processes (each importing torch and Triton) and a GPU worker
(a CUDA context) costs seconds; a key tuned after another should not pay it again. The
first tuning in a process starts them; every later key, of any autotuned kernel, leases
the same ones (the compile processes get the new kernel's compile function, the GPU
worker the new task). They exit with the process. A tuning that finds them leased by
another thread starts its own for the time it runs.

Example:
    >>> with lease() as shared:
    ...     shared.get("builder") is None or hasattr(shared["builder"], "build")
    True
"""

from __future__ import annotations

import atexit
import contextlib
import threading
from collections.abc import Iterator
from typing import Any

_LOCK = threading.Lock()
_SHARED: dict[str, Any] = {}
_CLOSING_REGISTERED = False


@contextlib.contextmanager
def lease() -> Iterator[dict[str, Any] | None]:
    """The shared workers ({"builder": ..., "runner": ...}; what the lessee puts there stays
    for the next), or None while another thread holds them."""
    global _CLOSING_REGISTERED
    if not _LOCK.acquire(blocking=False):
        yield None
        return
    try:
        if not _CLOSING_REGISTERED:
            atexit.register(close)
            _CLOSING_REGISTERED = True
        yield _SHARED
    finally:
        _LOCK.release()


def shared_parts() -> list[Any]:
    """The workers kept now (so a tuning does not close them)."""
    return list(_SHARED.values())


def close() -> None:
    """Stop the kept workers (at exit; a later tuning starts new ones)."""
    parts = list({id(p): p for p in _SHARED.values()}.values())
    _SHARED.clear()
    for part in parts:
        try:
            part.close()
        except Exception:  # noqa: BLE001 - a worker that will not close is killed at exit
            pass
