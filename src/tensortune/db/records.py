"""What the database stores: workloads, targets and measurement records.

Example:
    >>> w = Workload.make("matmul", source="void f(){}", key={"M": 512})
    >>> w.key_json, len(w.source_hash)
    ('{"M":512}', 16)
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import subprocess
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from ..measure import ErrorKind, MeasureResult
from ..space import Config


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Workload:
    """What is tuned: a kernel (name and hash of its source) and its tuning key."""

    name: str
    source_hash: str
    key_json: str = "{}"

    @staticmethod
    def make(name: str, source: str = "", key: dict[str, Any] | None = None) -> "Workload":
        return Workload(name, short_hash(source), _canonical(key or {}))

    @property
    def key(self) -> dict[str, Any]:
        return json.loads(self.key_json)

    @property
    def id_text(self) -> str:
        """How the command line shows and selects a workload."""
        return f"{self.name}@{self.source_hash[:8]}{self.key_json}"


@dataclass(frozen=True)
class Target:
    """Where it ran: device kind and name, architecture, and versions that matter."""

    kind: str
    device: str
    arch: str = ""
    versions_json: str = "{}"

    @property
    def versions(self) -> dict[str, str]:
        return json.loads(self.versions_json)

    @staticmethod
    def make(kind: str, device: str, arch: str = "", versions: dict[str, str] | None = None) -> "Target":
        return Target(kind, device, arch, _canonical(versions or {}))

    @staticmethod
    def cpu(compiler: str | None = None) -> "Target":
        """This machine's CPU, with the C compiler's and numpy's versions."""
        return _cpu_target(compiler or os.environ.get("CC", "cc"))


@lru_cache(maxsize=4)
def _cpu_target(compiler: str) -> Target:
    import numpy

    from .. import __version__

    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        cc = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=10)
        cc_version = cc.stdout.splitlines()[0] if cc.stdout else ""
    except (OSError, subprocess.TimeoutExpired):
        cc_version = ""
    versions = {"cc": cc_version, "numpy": numpy.__version__, "tensortune": __version__}
    return Target.make("cpu", model, f"{platform.machine()}x{os.cpu_count()}", versions)


@dataclass(frozen=True)
class Record:
    """One measured candidate, as stored."""

    workload: Workload
    target: Target
    config: Config
    times: tuple[float, ...]
    error: ErrorKind | None = None
    message: str = ""
    compile_seconds: float = 0.0
    run_seconds: float = 0.0
    strategy: str = ""
    session: str = ""
    created_at: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.times)

    @property
    def time(self) -> float:
        return self.to_result().time

    def to_result(self) -> MeasureResult:
        return MeasureResult(self.config, self.times, self.error, self.message,
                             self.compile_seconds, self.run_seconds, dict(self.extra))

    def to_json(self) -> dict[str, Any]:
        return {
            "workload": {"name": self.workload.name, "source_hash": self.workload.source_hash,
                         "key": self.workload.key},
            "target": {"kind": self.target.kind, "device": self.target.device,
                       "arch": self.target.arch, "versions": self.target.versions},
            "config": json.loads(self.config.to_json()),
            "times": list(self.times),
            "error": self.error.value if self.error else None,
            "message": self.message,
            "compile_seconds": self.compile_seconds,
            "run_seconds": self.run_seconds,
            "strategy": self.strategy,
            "session": self.session,
            "created_at": self.created_at,
            "extra": self.extra,
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> "Record":
        """A record from its JSON form, checked (`check_record`); ValueError naming what is
        wrong with a value of the wrong type, size or range."""
        if not isinstance(d, dict):
            raise ValueError(f"a record is a JSON object, not {type(d).__name__}")
        w, t = _obj(d, "workload"), _obj(d, "target")
        times = d.get("times", [])
        if not isinstance(times, list) or not all(_is_number(x) for x in times):
            raise ValueError("times must be a list of numbers")
        rec = Record(
            Workload(_text(w, "name"), _text(w, "source_hash"), _canonical(_obj(w, "key", {}))),
            Target.make(_text(t, "kind"), _text(t, "device"), _text(t, "arch", ""), _obj(t, "versions", {})),
            Config(_obj(d, "config")),
            tuple(float(x) for x in times),
            ErrorKind(_text(d, "error")) if d.get("error") is not None else None,
            _text(d, "message", ""),
            _number(d, "compile_seconds"),
            _number(d, "run_seconds"),
            _text(d, "strategy", ""),
            _text(d, "session", ""),
            _number(d, "created_at"),
            _obj(d, "extra", {}),
        )
        check_record(rec, imported=True)
        return rec


# What a record may hold: anything larger or deeper is not one tensortune wrote.
MAX_TEXT = 64 * 1024  # characters in a message or name
MAX_ITEMS = 1024  # parameters in a configuration, entries of a list, times
MAX_DEPTH = 8  # nesting of lists and objects in a configuration or extra


def check_record(rec: Record, imported: bool = False) -> None:
    """Raise ValueError unless the record is one tensortune could have written: times
    finite and not negative (positive in an `imported` file), durations finite and not negative,
    configuration values plain (numbers, strings, booleans, None, lists and objects of
    them), no value too long or nested too deep."""
    for label, text in (("workload name", rec.workload.name), ("source hash", rec.workload.source_hash),
                        ("target device", rec.target.device), ("message", rec.message)):
        if not isinstance(text, str) or len(text) > MAX_TEXT:
            raise ValueError(f"{label} is not a string of at most {MAX_TEXT} characters")
    if len(rec.times) > 100 * MAX_ITEMS:
        raise ValueError(f"{len(rec.times)} times, more than any measurement makes")
    for t in rec.times:
        if not _is_number(t) or not math.isfinite(t) or t < 0 or imported and t == 0:
            raise ValueError(f"time {t!r} is not a finite positive number of seconds")
    for label, value in (("compile_seconds", rec.compile_seconds), ("run_seconds", rec.run_seconds),
                         ("created_at", rec.created_at)):
        if not _is_number(value) or not math.isfinite(value) or value < 0:
            raise ValueError(f"{label} {value!r} is not a finite number >= 0")
    if len(rec.config) > MAX_ITEMS:
        raise ValueError(f"a configuration of {len(rec.config)} parameters")
    for name, value in rec.config.items():
        if len(name) > 256:
            raise ValueError(f"parameter name {name[:40]!r}... is too long")
        _check_plain(value, f"config value {name}", 0, allow_objects=True)
    if not isinstance(rec.extra, dict):
        raise ValueError("extra is not an object")
    _check_plain(rec.extra, "extra", 0, allow_objects=True)


def _check_plain(value: Any, label: str, depth: int, allow_objects: bool) -> None:
    if depth > MAX_DEPTH:
        raise ValueError(f"{label} is nested more than {MAX_DEPTH} deep")
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if abs(value) >= 1 << 63:
            raise ValueError(f"{label}: integer {str(value)[:20]}... does not fit 64 bits")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{label}: {value} is not finite")
        return
    if isinstance(value, str):
        if len(value) > MAX_TEXT:
            raise ValueError(f"{label}: a string of {len(value)} characters")
        return
    if isinstance(value, (list, tuple)):
        if len(value) > MAX_ITEMS:
            raise ValueError(f"{label}: a list of {len(value)} items")
        for v in value:
            _check_plain(v, label, depth + 1, allow_objects)
        return
    if isinstance(value, dict) and allow_objects:
        if len(value) > MAX_ITEMS:
            raise ValueError(f"{label}: an object of {len(value)} keys")
        for k, v in value.items():
            _check_plain(k, label, depth + 1, allow_objects)
            _check_plain(v, f"{label}.{k}"[:200], depth + 1, allow_objects)
        return
    raise ValueError(f"{label}: {type(value).__name__} is not a plain value")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _obj(d: dict[str, Any], key: str, default: Any = None) -> dict[str, Any]:
    value = d.get(key, default)
    if value is None and default is None:
        raise KeyError(key)
    if not isinstance(value, dict):
        raise ValueError(f"{key} must be a JSON object, not {type(value).__name__}")
    return value


def _text(d: dict[str, Any], key: str, default: str | None = None) -> str:
    value = d.get(key, default)
    if value is None:
        raise KeyError(key)
    if not isinstance(value, str):
        raise ValueError(f"{key} must be a string, not {type(value).__name__}")
    return value


def _number(d: dict[str, Any], key: str) -> float:
    value = d.get(key, 0.0)
    if not _is_number(value):
        raise ValueError(f"{key} must be a number, not {type(value).__name__}")
    return float(value)
