"""Tuning ahead of time for a list of shapes, and shipping the records.

A tuning target is either an autotuned kernel that knows how to make its arguments
from a shape (`@kernel.inputs`), or any Python function that takes the shape as
keyword arguments and launches autotuned kernels (each tunes its key on first launch).
The records of every key decided are then exported as JSON lines; a package ships
that file and passes it to `@tensortune.autotune(records=...)`, which imports it on
first use, so users' processes measure nothing.

Example:
    >>> parse_shape("M=4096, N=1024, dtype=float16")
    {'M': 4096, 'N': 1024, 'dtype': 'float16'}
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...db import Database, Workload
from .kernel import AutotunedKernel, Decision, all_kernels


class TargetError(TypeError):
    """The tuning target cannot be tuned from shapes (the message says why)."""


def parse_shape(text: str) -> dict[str, Any]:
    """`"M=4096,N=1024,dtype=float16"` -> {"M": 4096, "N": 1024, "dtype": "float16"}."""
    shape: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        if not sep or not name.strip().isidentifier():
            raise ValueError(f"shape {text!r}: {part!r} is not NAME=VALUE")
        value = value.strip()
        try:
            shape[name.strip()] = int(value)
        except ValueError:
            try:
                shape[name.strip()] = float(value)
            except ValueError:
                shape[name.strip()] = value
    if not shape:
        raise ValueError(f"shape {text!r} names no values")
    return shape


def load_object(spec: str) -> Any:
    """`package.module:name` or `path/to/file.py:name` -> the object."""
    where, sep, attr = spec.rpartition(":")
    if not sep or not where or not attr:
        raise ValueError(f"{spec!r} is not MODULE:NAME (or FILE.py:NAME)")
    if where.endswith(".py") or os.sep in where:
        path = Path(where).resolve()
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist")
        name = path.stem
        sys.path.insert(0, str(path.parent))
        # the file must be what `import name` finds (worker processes import it by name):
        # not a module of the standard library or a package that the name already means
        loaded = sys.modules.get(name)
        found = getattr(loaded, "__file__", None) if loaded is not None else None
        if loaded is None:
            spec = importlib.util.find_spec(name)
            found = spec.origin if spec is not None else None
        if found is None or Path(found).resolve() != path:
            sys.path.remove(str(path.parent))
            raise ImportError(f"{where}: the module name {name!r} already means "
                              f"{found or 'a built-in module'}, not this file; rename the file")
        module = importlib.import_module(name)
    else:
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())  # as `python -m` does: the console script's path is its own folder
        module = importlib.import_module(where)
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise AttributeError(f"{where} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


@dataclass(frozen=True)
class ShapeReport:
    """What tuning one shape decided, per kernel key."""

    shape: Mapping[str, Any]
    decisions: tuple[tuple[str, Decision], ...]  # (kernel name, decision)
    trials: int
    kernels: tuple[AutotunedKernel, ...] = ()  # the kernels that decided, for export

    def to_json(self) -> dict[str, Any]:
        return {"shape": dict(self.shape), "trials": self.trials,
                "decisions": [{"kernel": name, "key": d.key.as_dict(), "config": d.config.as_dict(),
                               "source": d.source} for name, d in self.decisions]}


def tune_shapes(target: Any, shapes: Iterable[Mapping[str, Any]], *, budget: Any = None,
                strategy: Any = None, force: bool = False) -> list[ShapeReport]:
    """Tune `target` for each shape (see the module doc for what a target is); the shapes
    share the process's warm compile processes and GPU worker."""
    return _tune_each(target, shapes, budget, strategy, force)


def _tune_each(target: Any, shapes: Iterable[Mapping[str, Any]], budget: Any, strategy: Any,
               force: bool) -> list[ShapeReport]:
    reports = []
    for shape in shapes:
        known = {id(t) for k in all_kernels() for t in k.tunings.values()}
        if isinstance(target, AutotunedKernel):
            if target.make_inputs is None:
                raise TargetError(f"{target.name} cannot make its arguments from a shape; register a function "
                                f"with @{target.short_name}.inputs, or pass a function that launches it")
            _check_shape(target.make_inputs, shape)
            grid, args, kwargs = _split_inputs(target.make_inputs(**shape))
            d = target.tune(*args, grid=grid, budget=budget, strategy=strategy, force=force, **kwargs)
            decided = [(target, d)]
        elif hasattr(target, "run") and hasattr(target, "arg_names"):
            raise TargetError(f"{target!r} is a Triton kernel but not an autotuned kernel: decorate it "
                              f"with @tensortune.autotune")
        elif callable(target):
            _check_shape(target, shape)
            seen = {id(k): len(k.log) for k in all_kernels()}
            target(**shape)
            decided = [(k, d) for k in all_kernels()
                       for d in {id(d): d for d in k.log[seen.get(id(k), 0):]}.values()]
        else:
            raise TargetError(f"cannot tune {target!r}: not an autotuned kernel or a function")
        trials = sum(t.result.trials for k in all_kernels() for t in k.tunings.values() if id(t) not in known)
        reports.append(ShapeReport(dict(shape), tuple((k.name, d) for k, d in decided), trials,
                                   tuple(k for k, _ in decided)))
    return reports


def _check_shape(fn: Any, shape: Mapping[str, Any]) -> None:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(**shape)
    except TypeError as exc:
        raise TargetError(f"shape {dict(shape)} does not fit {getattr(fn, '__name__', fn)}{signature}: {exc}") from None


def _split_inputs(made: Any) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    if isinstance(made, tuple) and len(made) in (2, 3):
        grid, args = made[0], tuple(made[1])
        kwargs = dict(made[2]) if len(made) == 3 else {}
        return grid, args, kwargs
    raise TargetError("an inputs function must return (grid, args) or (grid, args, kwargs)")


def export_workloads(db: Database, workloads: Iterable[Workload], path: str | os.PathLike[str]) -> int:
    """Write every record of these workloads (all targets) as JSON lines; returns the count."""
    wanted = {(w.name, w.source_hash, w.key_json) for w in workloads}
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        for rec in db.all_records():
            w = rec.workload
            if (w.name, w.source_hash, w.key_json) in wanted:
                f.write(json.dumps(rec.to_json(), sort_keys=True) + "\n")
                n += 1
    return n


def decided_workloads(reports: Iterable[ShapeReport]) -> list[tuple[AutotunedKernel, Workload]]:
    """The workload of every key the reports decided from records or by tuning."""
    out = []
    for r in reports:
        for k, (_, d) in zip(r.kernels, r.decisions):
            if d.source in ("tuned", "recorded"):
                out.append((k, Workload.make(k.name, k.source, d.key.as_dict())))
    return out
