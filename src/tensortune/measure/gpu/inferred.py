"""Inside a GPU worker: checking a kernel that does not say which arguments it writes.

For a `GpuTask(infer_roles=True)` the worker finds the role of each checked argument
(`measure.agreement`: output, in place, or input) from the reference function, or else from
the first candidate that runs; every checking run poisons the outputs, and only the
elements the reference wrote are compared. Without a reference function the first
candidates are pooled (their outcomes kept here) until the host asks for an election
(`elect`); the agreed reference is saved in the scratch folder, so a restarted worker or a
second device checks against the same one.

Example (the host side is `GpuRunner`; see tests/test_gpu_measure.py):
    >>> from tensortune.measure.agreement import OUTPUT
    >>> OUTPUT
    'output'
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from ...space import Config
from .. import agreement as agr
from ..errors import ErrorKind
from ..worker import classify_exception, worker_state


def _path(scratch: str, digest: str) -> str:
    return os.path.join(scratch, f"agreed-{digest}.pt")


def setup(task: Any, p: Any, scratch: str) -> None:
    """At prepare: pristine values of every checked argument, and the reference if known."""
    import torch

    p.checked_pristine = [p.pristine[i] if i in p.pristine else
                          (torch.zeros_like(p.args[i]) if i in p.zeroed else p.args[i].clone())
                          for i in p.checked]
    p.roles, p.agreed, p.pool = None, None, []
    worker_state()["gpu_task_names"] = tuple(task.arg_names)
    if task.reference is not None:
        reference = _resolve(task.reference)
        args = p.args
        returned: list[Any] = []

        def run() -> None:
            _zero(p)
            out = reference(*args)
            if isinstance(out, Mapping):
                returned.append(out)

        p.roles, p.agreed = agr.infer_roles(run, _checked(p), p.checked_pristine, _names(p), task.rtol,
                                            lambda: _synchronize(task.device))
        if returned:  # {name: expected}: those arguments are compared whole, the others never
            p.roles, p.agreed = agr.named_outcome(returned[0], _names(p), _checked(p))
        p.reference_kind = "function"
    elif os.path.exists(_path(scratch, task.digest)):
        saved = torch.load(_path(scratch, task.digest))
        p.roles = saved["roles"]
        p.agreed = agr.Outcome(tuple(t.to(task.device) for t in saved["values"]),
                               tuple(None if w is None else w.to(task.device) for w in saved["written"]))
        p.reference_kind = "agreed"


def measure(task: Any, config: Config, cutoff: float | None, time_fn: Callable[..., Any]) -> dict[str, Any]:
    """Check one candidate (or pool it, before the election), then time it; never raises for it."""
    p = worker_state()["gpu_task"]
    launch = _resolve(task.launch)
    run = lambda: launch(config, *p.args)  # noqa: E731
    sync = lambda: _synchronize(task.device)  # noqa: E731
    extra: dict[str, Any] = {}
    start = time.perf_counter()
    try:
        outcome = _outcome(p, run, sync, task)
        if p.agreed is None:
            p.pool.append((config.to_json(), outcome))
            extra["pooled"] = len(p.pool)
            extra["pool_group"] = len(agr.elect([o for _, o in p.pool], p.roles, task.rtol).members)
        else:
            why = agr.mismatch(outcome, p.agreed, p.roles, _names(p), task.rtol)
            if why:
                return _failed(ErrorKind.WRONG_RESULT, why, True)
            extra["reference"] = p.reference_kind
        times = time_fn(task.timer, run, lambda: _reset_inplace(p), cutoff)
        if task.check_after_timing and p.agreed is not None:
            sync()
            why = agr.mismatch(agr.snapshot(_checked(p), p.roles), p.agreed, p.roles, _names(p), task.rtol)
            if why:
                return _failed(ErrorKind.WRONG_RESULT, f"{why} after {len(times)} timed runs", True)
    except BaseException as exc:  # noqa: BLE001 - the candidate's failure, recorded
        from .worker_side import _healthy

        return _failed(classify_exception(exc), f"{type(exc).__name__}: {exc}", _healthy(task))
    extra["check_seconds_and_timing"] = round(time.perf_counter() - start, 4)
    return {"times": tuple(times), "error": None, "message": "", "healthy": True, "extra": extra}


def elect(task: Any, scratch: str) -> dict[str, Any]:
    """Agree on a reference among the pooled candidates; each one's verdict (None: it agrees)."""
    import torch

    p = worker_state()["gpu_task"]
    if not p.pool:
        return {"verdicts": {}, "strength": "weak", "note": "no configuration ran"}
    election = agr.elect([o for _, o in p.pool], p.roles, task.rtol)
    p.agreed, p.reference_kind = election.expected, election.strength
    verdicts = {}
    for i, (key, outcome) in enumerate(p.pool):
        verdicts[key] = None if i in election.members else agr.mismatch(outcome, p.agreed, p.roles, _names(p),
                                                                          task.rtol)
    p.pool = []
    torch.save({"roles": p.roles, "values": [t.cpu() for t in p.agreed.values],
                "written": [None if w is None else w.cpu() for w in p.agreed.written]},
               _path(scratch, task.digest))
    return {"verdicts": verdicts, "strength": election.strength, "note": election.note}


def _outcome(p: Any, run: Callable[[], object], sync: Callable[[], None], task: Any) -> agr.Outcome:
    if p.roles is None:
        def first() -> None:
            _zero(p)
            run()

        p.roles, outcome = agr.infer_roles(first, _checked(p), p.checked_pristine, _names(p), task.rtol, sync)
        return outcome
    agr.prepare(_checked(p), p.checked_pristine, p.roles)
    _zero(p)
    run()
    sync()
    return agr.snapshot(_checked(p), p.roles)


def _reset_inplace(p: Any) -> None:
    """Before each timed run: in-place arguments back to their values, accumulators to zero."""
    for t, initial, role in zip(_checked(p), p.checked_pristine, p.roles or ()):
        if role == agr.INPLACE:
            t.copy_(initial)
    _zero(p)


def _zero(p: Any) -> None:
    for i in p.zeroed:
        p.args[i].zero_()


def _checked(p: Any) -> list[Any]:
    return [p.args[i] for i in p.checked]


def _names(p: Any) -> list[str]:
    names = worker_state().get("gpu_task_names") or ()
    return [names[i] if i < len(names) else f"#{i}" for i in p.checked]


def _synchronize(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def _resolve(ref: Any) -> Any:
    from .task import resolve

    return resolve(ref)


def _failed(kind: ErrorKind, message: str, healthy: bool) -> dict[str, Any]:
    return {"times": (), "error": kind.value, "message": message[:4000], "healthy": healthy, "extra": {}}
