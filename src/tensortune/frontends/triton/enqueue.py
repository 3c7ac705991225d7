"""on_new_key="enqueue": keys that a production process meets and nobody tuned become fleet jobs.

A launch whose key has no settled record is answered at once (the key's best record so
far, else the nearest tuned key's configuration, else the first configuration), and one
`triton` job for the key goes on the queue of the kernel's store. Its spec names the
kernel as workers import it (`module:name`), the shape its `@kernel.inputs` function
makes arguments from (that function's parameters, taken by name from this launch's
arguments; a parameter `dtype` that is not an argument is the dtype the launch's tensors
share), and the key, which the worker checks its tuning made. `tensortune worker`
processes tune it; the process looks the key up again at most every `recheck_seconds`,
on a launch of that key, and launches the tuned configuration once it is recorded.

Inside `recording_into(db)` (a worker running a `triton` job) every autotuned kernel reads
and records in `db` and tunes its new keys, whatever its `db=` and `on_new_key=` say.

Example:
    >>> def inputs(n, dtype="float32"):
    ...     ...
    >>> check_inputs_function(inputs, ["x_ptr", "n", "factor", "BLOCK"], {"BLOCK"}, "scale")
    >>> launch_shape(inputs, ["x_ptr", "n", "factor", "BLOCK"], (None, 100, 2.0), {})
    {'n': 100}
"""

from __future__ import annotations

import contextlib
import inspect
import json
import math
import numbers
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...db import Database, Target, Workload
from ...space import Config
from .arguments import is_tensor
from .keys import TuningKey, dtype_name
from .records import settled_config

_FORCED: list[Database] = []


@contextlib.contextmanager
def recording_into(db: Database) -> Iterator[Database]:
    """Every autotuned kernel of this process reads and records in `db`, and tunes the new
    keys it meets (on_new_key is "tune"), while inside."""
    _FORCED.append(db)
    try:
        yield db
    finally:
        _FORCED.remove(db)


def forced_store() -> Database | None:
    return _FORCED[-1] if _FORCED else None


def check_inputs_function(fn: Callable[..., Any], arg_names: Sequence[str], tuned: set[str], kernel: str) -> None:
    """A ValueError unless every parameter of the inputs function `fn` can be taken from a
    launch: a scalar argument of the kernel (by name), `dtype`, or one with a default."""
    name = getattr(fn, "__name__", repr(fn))
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        raise ValueError(f"on_new_key='enqueue': cannot read the parameters of {name}") from None
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY):
            raise ValueError(f"on_new_key='enqueue' takes a job's shape from a launch by the names of {name}'s "
                             f"parameters: {p} cannot be passed by name; name each parameter")
        if p.name in tuned:
            raise ValueError(f"on_new_key='enqueue': parameter {p.name!r} of {name} is a tuned meta-parameter of "
                             f"{kernel}, not part of a shape")
        if p.name in arg_names or p.name == "dtype" or p.default is not p.empty:
            continue
        raise ValueError(f"on_new_key='enqueue' takes a job's shape from a launch: parameter {p.name!r} of {name} "
                         f"is not an argument of {kernel} (its arguments: {', '.join(arg_names)}); name the "
                         f"parameters after the kernel's scalar arguments, call the tensors' dtype 'dtype', "
                         f"or give the parameter a default")


def launch_shape(fn: Callable[..., Any], arg_names: Sequence[str], args: Sequence[Any],
                 kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The shape the inputs function `fn` takes, from a launch's arguments (see the module
    doc); a ValueError naming the parameter that cannot be taken from it."""
    check_inputs_function(fn, arg_names, set(), getattr(fn, "__name__", "the kernel"))
    named = {**dict(zip(arg_names, args)), **kwargs}
    name = getattr(fn, "__name__", repr(fn))
    shape: dict[str, Any] = {}
    for p in inspect.signature(fn).parameters.values():
        if p.name in arg_names:
            if p.name not in named:
                if p.default is p.empty:
                    raise ValueError(f"on_new_key='enqueue': this launch does not pass {p.name!r}, which {name} "
                                     f"needs (and has no default for)")
                continue
            shape[p.name] = _scalar(named[p.name], p.name, name)
        elif p.name == "dtype":
            dtypes = sorted({dtype_name(v.dtype) for v in named.values() if hasattr(v, "dtype")})
            if len(dtypes) == 1:
                shape["dtype"] = dtypes[0]
            elif dtypes or p.default is p.empty:
                raise ValueError(f"on_new_key='enqueue': parameter 'dtype' of {name} is the dtype the launch's "
                                 f"tensors share, but they have {', '.join(dtypes) or 'none'}; name the parameter "
                                 f"after a scalar argument of the kernel instead")
    return shape


def _scalar(value: Any, param: str, fn: str) -> Any:
    if isinstance(value, (bool, str)):
        return value
    if not is_tensor(value) and isinstance(value, numbers.Integral):
        return int(value)
    if not is_tensor(value) and isinstance(value, numbers.Real) and math.isfinite(float(value)):
        return float(value)
    raise ValueError(f"on_new_key='enqueue': {param!r} is a {type(value).__name__} at this launch, but a shape "
                     f"holds numbers, strings and booleans: the parameters of {fn} must be scalar arguments of "
                     f"the kernel (or 'dtype')")


def kernel_target(kernel: Any) -> str:
    """"module:name" under which a worker imports `kernel` (a module-level name bound to it)."""
    home = getattr(kernel.base_fn, "__module__", None)
    modules = [sys.modules.get(home)] if home else []
    modules += [m for n, m in list(sys.modules.items()) if n != home]
    in_main = False
    for module in modules:
        try:
            names = [n for n, v in list(vars(module).items()) if v is kernel]
        except TypeError:
            continue
        if not names:
            continue
        if module.__name__ == "__main__":
            in_main = True
            continue
        return f"{module.__name__}:{names[0]}"
    where = "is bound to a name only in the script run as __main__, which workers cannot import" if in_main \
        else "is bound to no module-level name"
    raise ValueError(f"on_new_key='enqueue': {kernel.name} {where}; workers import the kernel as MODULE:NAME, "
                     f"so define it at module level of an importable module")


def job_spec(kernel: Any, key: TuningKey, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The `triton` job that tunes this launch's key (checked as a worker will check it)."""
    from ...fleet.kinds import check_spec

    if kernel.make_inputs is None:
        raise ValueError(f"on_new_key='enqueue': {kernel.name} has no inputs function, so a worker cannot make its "
                         f"arguments for the key {key.as_dict()}; register one with @{kernel.short_name}.inputs, "
                         f"its parameters named after the kernel's scalar arguments")
    check_inputs_function(kernel.make_inputs, kernel.arg_names, kernel._tuned, kernel.name)
    shape = launch_shape(kernel.make_inputs, kernel.arg_names, args, kwargs)
    spec = {"target": kernel_target(kernel), "shape": shape, "key": json.loads(json.dumps(key.as_dict()))}
    return check_spec("triton", spec)


def job_budget(budget: Any) -> dict[str, Any]:
    """A job's budget from the kernel's `budget=` (empty: the kernel's own default)."""
    if budget is None:
        return {}
    return {k: getattr(budget, k) for k in ("trials", "seconds", "free_rejections") if getattr(budget, k) is not None}


def put_on_queue(db: Database, spec: dict[str, Any], budget: dict[str, Any]) -> int:
    """Queue the job (the same key of the same kernel already queued or running: its id)."""
    from ...fleet.queue import JobQueue

    return JobQueue(db).enqueue("triton", spec, budget)


@dataclass
class Waiting:
    """A key answered at once while a fleet job tunes it."""

    workload: Workload
    space: Any
    job_id: int | None  # None: another rank queued it (this one only looks for the record)
    next_check: float
    raws: set[Any] = field(default_factory=set)  # the launch signatures of the key seen so far

    def due(self, interval: float) -> bool:
        now = time.monotonic()
        if now < self.next_check:
            return False
        self.next_check = now + interval
        return True

    def look_up(self, db: Database, target: Target) -> tuple[Config | None, str | None]:
        """(the tuned configuration, None) once recorded; (None, why) when the job ended
        without one; (None, None) while it is still to come."""
        from ...fleet.queue import JobQueue

        config = settled_config(db, self.workload, target, self.space)
        if config is not None or self.job_id is None:
            return config, None
        try:
            job = JobQueue(db).get(self.job_id)
        except KeyError:
            return None, f"job {self.job_id} is no longer in the queue"
        if job.status == "failed":
            return None, f"job {self.job_id} failed: {job.message}"
        if job.status == "done":
            config = settled_config(db, self.workload, target, self.space)  # recorded just before it was done
            if config is not None:
                return config, None
            return None, (f"job {self.job_id} is done ({job.message}), but the store has no final record of the "
                          f"key for this process's target {target.device} {target.arch} {target.versions_json}: "
                          f"did the worker run on another GPU, or other Triton or tensortune versions?")
        return None, None
