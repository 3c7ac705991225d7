"""Helpers of the fault-injection suite (test_faults.py): the faulty C kernel, module-level
callables that spawned workers can import, and a way to find processes a run left behind.

Every process a test starts inherits the environment variable MARK (set by the test to a
fresh value), and so does whatever those processes start: compilers, workers, children a
kernel forks. A process still carrying it after the run is one left behind.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np

from tensortune.backends import ArrayArg, CProblem, ScalarArg

MARK = "TENSORTUNE_FAULT_MARK"
KERNEL = Path(__file__).parent / "faults" / "kernel.c"
MODES = {
    "good": 0, "segfault": 1, "abort": 2, "exit": 3, "spin": 4, "heap_overflow": 5, "wrong": 6, "nan": 7,
    "fork": 8, "leak_thread": 9, "memory_bomb": 10, "garbage": 11, "partial_header": 12, "no_compile": 13,
    "fast": 14, "compile_hang": 15,
}
N = 1000


def saxpy_reference(x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    return {"y": np.float32(2.5) * x + y}


def fault_problem(hang_include: Path | None = None) -> CProblem:
    """The saxpy problem over the faulty kernel; `hang_include` is the FIFO the
    compile_hang mode includes."""
    source = KERNEL.read_text()
    if hang_include is not None:
        source = f'#define HANG_INCLUDE "{hang_include}"\n' + source
    return CProblem(source, "saxpy",
                    (ArrayArg("x", (N,)), ArrayArg("y", (N,), role="inout"), ScalarArg("a", 2.5, "float"),
                     ScalarArg("n", N)),
                    reference=saxpy_reference, flags=("-lpthread",))


def marked_processes(mark: str) -> list[int]:
    """Processes (other than this one) whose environment holds MARK=mark; zombies and
    multiprocessing's resource tracker (a helper of this process that lives as long as it
    does) excluded."""
    found = []
    needle = f"{MARK}={mark}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if b"resource_tracker" in f.read():
                    continue
        except OSError:
            continue
        found.append(int(entry))
    return found


def left_behind(mark: str, within: float = 20.0) -> list[int]:
    """The marked processes still running after `within` seconds (those left behind)."""
    deadline = time.monotonic() + within
    while (alive := marked_processes(mark)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive


def kill_marked(mark: str) -> None:
    """Clean up after a failed assertion, so one failure does not leave processes running."""
    for pid in marked_processes(mark):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


# ---- callables for tt.tune(isolate=True): module level, so that workers can import them ----
def sometimes_faulty(mode: str, n: int) -> float:
    """Sums n numbers, unless `mode` asks for a fault."""
    if mode == "segfault":
        import ctypes
        ctypes.string_at(0)
    if mode == "hang":
        while True:
            time.sleep(0.05)
    if mode == "raise":
        raise ValueError("a bug in this configuration")
    if mode == "memory":
        hoard = []
        while True:
            hoard.append(np.ones(1 << 24))
    return float(sum(range(n)))


def sometimes_faulty_reference() -> float:
    return float(sum(range(1000)))


def busy_gpu_once(flag: str, n: int) -> int:
    """Fails as a busy GPU does the first time it is called with a fresh flag file."""
    if not os.path.exists(flag):
        Path(flag).write_text("called")
        raise RuntimeError("CUDA error: all CUDA-capable devices are busy or unavailable")
    return sum(range(n))


# ---- a launch for GpuRunner (the runner of @autotune), run on the CPU -------------------------
def into_worker_sockets(data: bytes) -> None:
    """Write `data` into every socket of this process: inside a worker, its result channel."""
    import stat

    for fd in range(3, 256):
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                os.write(fd, data)
        except OSError:
            pass


def gpu_launch(config, x, out) -> None:
    """`out = 2 * x`, unless `config["fault"]` injects a fault into the worker."""
    fault = config.get("fault", "none")
    if fault == "garbage":
        into_worker_sockets(b"not a reply at all")
    elif fault == "partial_header":
        into_worker_sockets(b"TTr1\0\0")
        time.sleep(3600)
    elif fault == "fork":
        state = __import__("tensortune.measure", fromlist=["worker_state"]).worker_state()
        if "forked" not in state:
            state["forked"] = os.fork()
            if state["forked"] == 0:
                while True:
                    time.sleep(1)
    out.copy_(x * 2)
