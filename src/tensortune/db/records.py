"""What the database stores: workloads, targets and measurement records.

Example:
    >>> w = Workload.make("matmul", source="void f(){}", key={"M": 512})
    >>> w.key_json, len(w.source_hash)
    ('{"M":512}', 16)
"""

from __future__ import annotations

import hashlib
import json
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
        w, t = d["workload"], d["target"]
        return Record(
            Workload(w["name"], w["source_hash"], _canonical(w.get("key", {}))),
            Target.make(t["kind"], t["device"], t.get("arch", ""), t.get("versions", {})),
            Config(d["config"]),
            tuple(float(x) for x in d.get("times", ())),
            ErrorKind(d["error"]) if d.get("error") else None,
            d.get("message", ""),
            float(d.get("compile_seconds", 0.0)),
            float(d.get("run_seconds", 0.0)),
            d.get("strategy", ""),
            d.get("session", ""),
            float(d.get("created_at", 0.0)),
            dict(d.get("extra", {})),
        )
