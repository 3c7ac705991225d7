"""What the GPU benchmark scripts share: the timer, interleaved rounds, the error measure,
the report's header, and the loop that measures each row and writes the JSON after it.

Imported by `gemv.py`, `gpu_kernels.py`, `gpu_attention.py`, `gpu_variants.py` and
`gpu_autoschedule.py` (scripts, run from the repository root; their folder is on the path).
torch, triton and tensortune are imported inside the functions, after a script has set
`TRITON_INTERPRET` for its CPU smoke run.

Example:
    >>> class Twice:  # a timer that times each call as 1 then 3 microseconds
    ...     def time(self, fn): fn(); return (1e-6, 3e-6)
    >>> calls = []
    >>> interleaved_us({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, Twice(), 2)
    {'a': [2.0, 2.0], 'b': [2.0, 2.0]}
    >>> calls
    ['a', 'b', 'a', 'b']
"""

from __future__ import annotations

import json
import math
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any


def make_timer(quick: bool, budget_seconds: float, warmup_seconds: float, min_repeats: int,
               max_repeats: int) -> Any:
    """A CudaTimer (CUDA events, L2 flushed, median of the repeats) with these limits; for a
    smoke run in Triton's interpreter (`quick`), one run timed by the host clock."""
    from tensortune.measure.cuda_timer import CudaTimer

    if quick:
        return CudaTimer(clock="host", budget_seconds=0.0, warmup_seconds=0.0, min_repeats=1, max_repeats=1,
                         estimate_repeats=1, flush_l2=False)
    return CudaTimer(budget_seconds=budget_seconds, warmup_seconds=warmup_seconds, min_repeats=min_repeats,
                     max_repeats=max_repeats)


def interleaved_us(impls: dict[str, Callable[[], Any]], timer: Any, rounds: int) -> dict[str, list[float]]:
    """Each contender's median time (microseconds) in each of `rounds` rounds, every contender
    timed once a round in turn, so that a drift of the machine reaches all of them alike."""
    times: dict[str, list[float]] = {name: [] for name in impls}
    for _ in range(rounds):
        for name, fn in impls.items():
            times[name].append(statistics.median(timer.time(fn)) * 1e6)
    return times


def rel_error(got: Any, want: Any) -> float:
    """The largest absolute difference over the reference's largest magnitude (inf when
    `got` holds a NaN or an infinity), in float32."""
    import torch

    got, want = got.float().reshape(want.shape), want.float()
    if not bool(torch.isfinite(got).all()):
        return math.inf
    return float((got - want).abs().max()) / (float(want.abs().max()) or 1.0)


def versions() -> dict[str, Any]:
    """The versions a GPU timing depends on."""
    import torch
    import triton

    return {"torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
            "cuda": torch.version.cuda}


def machine(quick: bool, interpreter: str = " (interpreter)") -> str:
    """The GPU's name, or this CPU's followed by `interpreter` for a smoke run."""
    import torch

    return torch.cuda.get_device_name() if not quick else (platform.processor() or "cpu") + interpreter


def select_by_name(items: list[Any], names: str, what: str) -> list[Any] | None:
    """The items whose `name` is in the comma-separated `names` (all when it is empty), or
    None after saying on stderr which names are unknown."""
    if not names:
        return items
    wanted = {x.strip() for x in names.split(",") if x.strip()}
    unknown = wanted - {x.name for x in items}
    if unknown:
        print(f"unknown {what} {sorted(unknown)}; known: {[x.name for x in items]}", file=sys.stderr)
        return None
    return [x for x in items if x.name in wanted]


def measure_rows(names: Iterable[str], measure: Callable[[str], dict[str, Any]], report: dict[str, Any],
                 rows: str, path: Path, start: float, skip: Callable[[str], bool] | None = None) -> None:
    """`report[rows][name] = measure(name)` for each name, `skip` aside; a failure is that
    row's (in `report["failed"]`, said on stdout) and the others go on. After each row the
    report, with the seconds since `start`, is written to `path`, so that nothing measured
    is lost when the run is stopped."""
    for name in names:
        if skip is not None and skip(name):
            continue
        try:
            report[rows][name] = measure(name)
        except Exception as exc:  # noqa: BLE001 - one row's failure is recorded, the others go on
            report.setdefault("failed", {})[name] = f"{type(exc).__name__}: {exc}"
            print(f"[{name}] FAILED: {type(exc).__name__}: {exc}", flush=True)
        report["seconds"] = round(time.perf_counter() - start, 1)
        path.write_text(json.dumps(report, indent=1, default=str))


def exit_status(report: dict[str, Any], rows: str) -> int:
    """1 when a row failed or measured a wrong result, else 0."""
    return 1 if report.get("failed") or any(not r["correct"] for r in report[rows].values()) else 0
