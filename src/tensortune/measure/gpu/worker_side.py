"""What runs inside a GPU worker process: make arguments, check, restore, time.

These functions are sent to an `IsolatedWorker` by `GpuRunner`; they keep the task's
arguments, pristine copies of written arguments and the expected outputs in
`worker_state()`, so each candidate costs one small message. Every outcome is a plain
dict; an exception inside a candidate is caught here, classified, and followed by a
health check so that a poisoned CUDA context (illegal memory access) makes the host
restart the worker.
"""

from __future__ import annotations

import inspect
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...space import Config
from ..confirm import confirm_winners
from ..errors import CandidateError, ErrorKind
from ..worker import classify_exception, worker_state
from .args import TensorArg, make_args, mismatch, poison
from .task import GpuTask, resolve


@dataclass
class _Prepared:
    digest: str
    args: list[Any]
    pristine: dict[int, Any]  # restore=True arguments: their initial values
    zeroed: tuple[int, ...]
    outputs: tuple[int, ...]  # output=True arguments: poisoned before checking runs
    checked: tuple[int, ...]
    expected: list[Any] | None
    reference_kind: str  # "function" | "first_config" | "consensus" | "weak" | "agreed" | "" (none yet)
    # tasks with infer_roles (see inferred.py): pristine values of the checked arguments, their
    # roles, the agreed reference's outcome, the candidates pooled before the election
    checked_pristine: list[Any] = field(default_factory=list)
    roles: list[str] | None = None
    agreed: Any = None
    pool: list[Any] = field(default_factory=list)


def _synchronize(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def _expected_path(scratch: str, digest: str) -> str:
    return os.path.join(scratch, f"expected-{digest}.pt")


KEPT_TASKS = 8  # tasks whose arguments and reference a worker keeps, for runners that switch between them
KEPT_BYTES = 1 << 30  # ... while they take no more than this in all (a worker out of memory drops them)


def prepare(task: GpuTask, scratch: str) -> dict[str, Any]:
    """Make the task's arguments (and reference outputs) in this worker; idempotent. A
    task measured here before and kept (the last `KEPT_TASKS`, within `KEPT_BYTES`) is
    taken up again as it was: a runner that measures several kernels' rounds in turn
    (a model's) makes each kernel's arguments and reference once."""
    state = worker_state()
    prepared: _Prepared | None = state.get("gpu_task")
    if prepared is not None and prepared.digest == task.digest:
        return {"reference": prepared.reference_kind, "device": _device_name(task.device)}
    state.pop("gpu_task", None)
    kept: OrderedDict[str, _Prepared] = state.setdefault("gpu_tasks", OrderedDict())
    if not task.infer_roles and task.digest in kept:  # (an inferred reference is elected per run: made anew)
        kept.move_to_end(task.digest)
        state["gpu_task"] = prepared = kept[task.digest]
        return {"reference": prepared.reference_kind, "device": _device_name(task.device)}
    try:
        prepared = _make_prepared(task, scratch)
    except Exception as exc:  # noqa: BLE001 - out of memory with other tasks kept: free them, once
        if not kept or "out of memory" not in str(exc).lower():
            raise
        kept.clear()
        _free_cached(task.device)
        prepared = _make_prepared(task, scratch)
    state["gpu_task"] = prepared
    if not task.infer_roles:
        kept[task.digest] = prepared
        while len(kept) > 1 and (len(kept) > KEPT_TASKS or sum(_nbytes(p) for p in kept.values()) > KEPT_BYTES):
            kept.popitem(last=False)
    return {"reference": prepared.reference_kind, "device": _device_name(task.device)}


def _nbytes(p: _Prepared) -> int:
    tensors = list(p.args) + list(p.pristine.values()) + list(p.expected or ()) + list(p.checked_pristine)
    return sum(int(t.numel() * t.element_size()) for t in tensors if hasattr(t, "element_size"))


def _free_cached(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


def _make_prepared(task: GpuTask, scratch: str) -> _Prepared:
    import torch

    args = make_args(task.args, task.seed, task.device)
    specs = task.args
    restore = tuple(i for i, a in enumerate(specs) if isinstance(a, TensorArg) and a.restore)
    prepared = _Prepared(
        digest=task.digest, args=args, pristine={i: args[i].clone() for i in restore},
        zeroed=tuple(i for i, a in enumerate(specs) if isinstance(a, TensorArg) and a.zero),
        outputs=tuple(i for i, a in enumerate(specs) if isinstance(a, TensorArg) and a.output),
        checked=task.checked_indices, expected=None, reference_kind="")
    if task.infer_roles:
        from . import inferred

        inferred.setup(task, prepared, scratch)
    elif task.reference is not None:
        prepared.expected = _run_reference(task, prepared)
        prepared.reference_kind = "function"
    elif os.path.exists(_expected_path(scratch, task.digest)):
        saved = torch.load(_expected_path(scratch, task.digest))
        prepared.expected = [t.to(task.device) for t in saved]
        prepared.reference_kind = "first_config"
    _synchronize(task.device)
    return prepared


def _run_reference(task: GpuTask, p: _Prepared) -> list[Any]:
    args = [a.clone() if hasattr(a, "clone") else a for a in p.args]
    for i in p.zeroed:
        args[i].zero_()
    returned = resolve(task.reference)(*args)  # type: ignore[arg-type]
    if returned is None:
        expected = [args[i] for i in p.checked]
    else:
        expected = list(returned) if isinstance(returned, (tuple, list)) else [returned]
        if len(expected) != len(p.checked):
            raise ValueError(f"the reference returned {len(expected)} values but the task checks "
                             f"{len(p.checked)} arguments (indices {list(p.checked)})")
    for i, (idx, e) in enumerate(zip(p.checked, expected)):
        if not hasattr(e, "shape") or tuple(e.shape) != tuple(p.args[idx].shape):
            raise ValueError(f"reference value {i} has shape {tuple(getattr(e, 'shape', ()))}, "
                             f"argument {idx} has {tuple(p.args[idx].shape)}")
    return [e.to(p.args[idx].dtype).contiguous() for idx, e in zip(p.checked, expected)]


def _reset(p: _Prepared) -> None:
    for i, initial in p.pristine.items():
        p.args[i].copy_(initial)
    for i in p.zeroed:
        p.args[i].zero_()


def _check(task: GpuTask, p: _Prepared, when: str) -> str | None:
    assert p.expected is not None
    for idx, expected in zip(p.checked, p.expected):
        why = mismatch(p.args[idx], expected, task.rtol, task.atol)
        if why:
            return f"argument {idx} {when}: {why}"
    return None


def _adopt_as_reference(task: GpuTask, p: _Prepared, scratch: str) -> str | None:
    import torch

    for idx in p.checked:
        t = p.args[idx]
        if t.dtype.is_floating_point and not bool(torch.isfinite(t).all()):
            return (f"argument {idx} has NaN or infinite elements after the first run (unwritten "
                    "output?), and no reference function was given to compare with")
    p.expected = [p.args[i].clone() for i in p.checked]
    p.reference_kind = "first_config"
    torch.save([t.cpu() for t in p.expected], _expected_path(scratch, task.digest))
    return None


def measure(task: GpuTask, config: Config, scratch: str, cutoff: float | None = None) -> dict[str, Any]:
    """Check one candidate against the reference, then time it; never raises for it."""
    if task.infer_roles:
        from . import inferred

        return inferred.measure(task, config, cutoff, _time)
    p: _Prepared = worker_state()["gpu_task"]
    launch = resolve(task.launch)
    run = lambda: launch(config, *p.args)  # noqa: E731
    extra: dict[str, Any] = {}
    start = time.perf_counter()
    try:
        _reset(p)
        for i in p.outputs:
            poison(p.args[i])
        run()
        _synchronize(task.device)
        if p.expected is None:
            why = _adopt_as_reference(task, p, scratch)
            if why:
                return _failed(ErrorKind.WRONG_RESULT, why, True)
            extra["reference"] = "this"
        else:
            why = _check(task, p, "after one run")
            if why:
                return _failed(ErrorKind.WRONG_RESULT, why, True)
            extra["reference"] = p.reference_kind
        times = _time(task.timer, run, lambda: _reset(p), cutoff)
        if task.check_after_timing and p.expected is not None:
            _synchronize(task.device)
            why = _check(task, p, f"after {len(times)} timed runs")
            if why:
                return _failed(ErrorKind.WRONG_RESULT, why + " (does the kernel write an argument "
                               "not declared restore= or zero=?)", True)
    except BaseException as exc:  # noqa: BLE001 - the candidate's failure, recorded
        kind = classify_exception(exc)
        message = f"{type(exc).__name__}: {exc}"
        return _failed(kind, message, _healthy(task))
    extra["check_seconds_and_timing"] = round(time.perf_counter() - start, 4)
    return {"times": tuple(times), "error": None, "message": "", "healthy": True, "extra": extra}


def _time(timer: Any, run: Callable[[], object], setup: Callable[[], object],
          cutoff: float | None) -> tuple[float, ...]:
    params = inspect.signature(timer.time).parameters
    kwargs: dict[str, Any] = {}
    if "cutoff" in params and cutoff is not None:
        kwargs["cutoff"] = cutoff
    if "setup" in params:
        return timer.time(run, setup=setup, **kwargs)

    def with_setup() -> None:  # a host timer without setup: the reset is timed too
        setup()
        run()
    return timer.time(with_setup, **kwargs)


def _failed(kind: ErrorKind, message: str, healthy: bool) -> dict[str, Any]:
    return {"times": (), "error": kind.value, "message": message[:4000], "healthy": healthy, "extra": {}}


def _healthy(task: GpuTask) -> bool:
    """Can this worker go on? A sticky CUDA error fails every later call."""
    try:
        if task.health_check is not None:
            return bool(resolve(task.health_check)())
        if task.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize()
            probe = torch.ones(16, device=task.device)
            return float(probe.sum()) == 16.0
        return True
    except BaseException:  # noqa: BLE001 - any failure here means the context is gone
        return False


def confirm(task: GpuTask, configs: Sequence[Config], prior: dict[Config, float], within: float | None,
            rounds: int, timer: Any) -> dict[str, Any]:
    """Interleaved re-timing of `configs` in this worker (see `confirm_winners`)."""
    p: _Prepared = worker_state()["gpu_task"]
    launch = resolve(task.launch)
    candidates = {c: (lambda c=c: launch(c, *p.args)) for c in configs}
    if task.infer_roles:
        from .inferred import _reset_inplace

        reset = lambda: _reset_inplace(p)  # noqa: E731
    else:
        reset = lambda: _reset(p)  # noqa: E731
    takes_setup = "setup" in inspect.signature(timer.time).parameters
    if takes_setup:
        result = confirm_winners(candidates, timer, prior=prior, within=within, rounds=rounds,
                                 setup={c: reset for c in configs})
    else:
        wrapped = {c: (lambda f=f: (reset(), f())) for c, f in candidates.items()}
        result = confirm_winners(wrapped, timer, prior=prior, within=within, rounds=rounds)
    return {"confirmation": result}


def _device_name(device: str) -> str:
    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_name()
    return "cpu"


def raise_for(outcome: dict[str, Any]) -> None:
    """Turn a failed outcome into the CandidateError it stands for (for direct callers)."""
    if outcome.get("error"):
        raise CandidateError(ErrorKind(outcome["error"]), outcome["message"])
