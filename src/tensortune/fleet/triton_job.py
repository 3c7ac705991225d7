"""The `triton` job kind: one shape of an autotuned Triton kernel, tuned by a worker.

Its spec names the tuning target as `tensortune triton tune` takes it (`MODULE:NAME`,
importable on every worker's host: an autotuned kernel with `@kernel.inputs`, or a
function taking the shape as keyword arguments that launches autotuned kernels) and one
shape. A key that a production process met (`on_new_key="enqueue"`) also carries the
key it had, which the worker checks its tuning made, and which the queue dedupes by (two
shapes of one key are one job). The worker tunes the shape with the offline path
(`tune_shapes`) into its own store, whatever store the kernel names; a budget of `{}`
is the kernel's own.

Example:
    >>> check_triton_spec({"target": "mypkg.kernels:matmul", "shape": {"M": 512, "N": 512, "dtype": "float16"}})
    {'target': 'mypkg.kernels:matmul', 'shape': {'M': 512, 'N': 512, 'dtype': 'float16'}}
    >>> check_triton_spec({"target": "mypkg.kernels:matmul", "shape": {"M": [512]}})
    Traceback (most recent call last):
    ...
    ValueError: triton job spec: shape value M must be a number, string or boolean, got [512]
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from .model_job import _FACTORY

USAGE = ('triton job spec: {"target": "MODULE:NAME", "shape": {NAME: number, string or boolean, ...}, '
         '"key": {...} (optional: the key a production launch had)}')
MAX_TEXT = 200  # characters of a shape's string value, or of the target


def check_triton_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec, checked without importing anything; a ValueError naming what is wrong."""
    unknown = sorted(set(spec) - {"target", "shape", "key"})
    if unknown:
        raise ValueError(f"{USAGE}; unknown key(s) {unknown}")
    target, shape = spec.get("target"), spec.get("shape")
    if not isinstance(target, str) or len(target) > MAX_TEXT or not _FACTORY.match(target):
        raise ValueError(f'triton job spec: "target" must be MODULE:NAME (or FILE.py:NAME), got {target!r}')
    if not isinstance(shape, dict) or not shape:
        raise ValueError(f'triton job spec: "shape" must be an object of NAME: value (at least one), got {shape!r}')
    for name, value in shape.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"triton job spec: shape name {name!r} is not a Python identifier")
        if not _scalar(value):
            raise ValueError(f"triton job spec: shape value {name} must be a number, string or boolean, got {value!r}")
    out = {"target": target, "shape": dict(shape)}
    if "key" in spec:
        out["key"] = _check_key(spec["key"])
    return out


def _scalar(value: Any) -> bool:
    if type(value) in (bool, int):
        return True
    if type(value) is float:
        return math.isfinite(value)
    return type(value) is str and len(value) <= MAX_TEXT


def _check_key(key: Any) -> dict[str, Any]:
    if not isinstance(key, dict) or not all(isinstance(k, str) for k in key):
        raise ValueError(f'triton job spec: "key" must be an object of a kernel\'s key values, got {key!r}')
    for name, value in key.items():
        values = value if isinstance(value, list) else [value]
        if not all(v is None or _scalar(v) for v in values):
            raise ValueError(f"triton job spec: key value {name} must be a number, string, boolean or a list of "
                             f"them, got {value!r}")
    return dict(key)


def triton_identity(spec: dict[str, Any]) -> dict[str, Any]:
    """What makes two triton jobs the same: the target and its key when known, else the shape."""
    return {"target": spec["target"], "key": spec["key"]} if "key" in spec else spec


def check_triton_budget(budget: dict[str, Any]) -> None:
    """{} (the kernel's own budget), or trials and/or seconds (and free_rejections)."""
    if not budget:
        return
    from ..tuner import Budget

    Budget.of(budget)


def describe_triton(spec: dict[str, Any]) -> str:
    shape = ",".join(f"{k}={v}" for k, v in spec["shape"].items())
    return f"triton {spec['target']} {shape}"


@dataclass(frozen=True)
class TritonTuned:
    """What a triton job's tuning decided, per kernel key; the workload and target of the
    one key it decided (for `queue list`'s savings), None when it launched several."""

    trials: int
    decisions: tuple[str, ...]  # "tuned matmul M=512,N=512 (float16): BLOCK_M=64,num_warps=4"
    workload: Any = None
    target: Any = None

    def summary(self) -> str:
        return "; ".join(self.decisions) or "no autotuned kernel was launched"


def tune_triton(spec: dict[str, Any], budget: dict[str, Any], db: Any, jobs: int | None = None) -> TritonTuned:
    """Import the target and tune the spec's shape into the store `db` (see the module
    doc). Raises a ValueError naming the target that cannot be imported or tuned, or the
    key that does not match the production launch's (the job's failure)."""
    from ..extras import needs_extra

    with needs_extra("a triton job"):
        from ..frontends.triton.enqueue import recording_into
        from ..frontends.triton.kernel import AutotunedKernel
        from ..frontends.triton.offline import TargetError, load_object, tune_shapes
    try:
        target = load_object(spec["target"])
    except (ImportError, AttributeError, ValueError, FileNotFoundError, SyntaxError) as exc:
        raise ValueError(f"cannot import the target {spec['target']} on this worker: {type(exc).__name__}: {exc}") \
            from exc
    from ..db import Workload

    workload = where = None
    try:
        with recording_into(db):
            (report,) = tune_shapes(target, [spec["shape"]], budget=budget or None)
            if len(report.decisions) == 1:
                kernel, (_, decided) = report.kernels[0], report.decisions[0]
                workload = Workload.make(kernel.name, kernel.source, decided.key.as_dict())
                where = kernel.context().target
    except TargetError as exc:
        raise ValueError(f"{spec['target']}: {exc}") from exc
    if "key" in spec and isinstance(target, AutotunedKernel):
        made = [json.loads(json.dumps(d.key.as_dict())) for _, d in report.decisions]
        if made != [spec["key"]]:
            raise ValueError(f"the shape {spec['shape']} made the key {made[0] if made else None} of "
                             f"{spec['target']}, not the key {spec['key']} that was queued: the inputs function "
                             f"does not make the arguments the production launch had")
    return TritonTuned(report.trials, tuple(_decided(name, d) for name, d in report.decisions), workload, where)


def _decided(name: str, d: Any) -> str:
    """One key's decision, short enough for `queue list`'s status column."""
    key = ",".join(f"{k}={v}" for k, v in zip(d.key.names, d.key.values))
    dtypes = ",".join(dict.fromkeys(d.key.dtypes))
    config = ",".join(f"{k}={v}" for k, v in d.config.as_dict().items())
    return f"{d.source} {name} {key}{f' ({dtypes})' if dtypes else ''}: {config}"
