"""Kernel Tuner cache files as replayable tuning spaces.

A Kernel Tuner cache (JSON, optionally gzipped) holds `tune_params` (name -> values) and
`cache` ("v1,v2,...": record). Each record's `time` is the kernel time in milliseconds,
or a string naming why the configuration failed. Caches of brute-forced spaces list every
configuration that satisfies the kernel's constraints, so the space is the product of the
parameters restricted to the cache's keys; a configuration outside the cache is invalid.

Example:
    >>> ds = load_kernel_tuner_cache("../shared/datasets/kernel_tuner/pnpoly-RTX_3090.json.gz")
    >>> ds.space.size, ds.failures
    (4092, 318)
    >>> runner = ds.runner()
    >>> result = next(iter(runner.run_configs([ds.best_config])))
    >>> result.time == ds.optimum
    True
"""

from __future__ import annotations

import gzip
import json
import math
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..measure import BuildResult, ErrorKind, MeasureResult
from ..space import Config, Constraint, Space, SpaceError

# Kernel Tuner's failure markers, as recorded in `time`
ERROR_KINDS = {
    "CompilationFailedConfig": ErrorKind.COMPILE_ERROR,
    "RuntimeFailedConfig": ErrorKind.RUNTIME_ERROR,
    "InvalidConfig": ErrorKind.INVALID,
}


@dataclass(frozen=True)
class ReplayDataset:
    """A measured space: every configuration's recorded result, in seconds."""

    name: str
    device: str
    kernel: str
    space: Space
    results: dict[Config, MeasureResult] = field(repr=False)
    objective: str = "time"

    @property
    def optimum(self) -> float:
        """The fastest recorded time (seconds)."""
        return min(r.time for r in self.results.values())

    @property
    def best_config(self) -> Config:
        return min(self.results.values(), key=lambda r: r.time).config

    @property
    def failures(self) -> int:
        return sum(1 for r in self.results.values() if not r.ok)

    def score(self, best_time: float) -> float:
        """t_opt / t_best_found: 1.0 when the optimum was found, 0.0 when nothing ran."""
        return self.optimum / best_time if math.isfinite(best_time) and best_time > 0 else 0.0

    def runner(self) -> "ReplayRunner":
        return ReplayRunner(self)


class ReplayRunner:
    """Answers each configuration with its recorded result; counts simulated seconds.

    `simulated_seconds` adds each measured configuration's recorded compile and benchmark
    time, i.e. what tuning on the real device would have cost.
    """

    def __init__(self, dataset: ReplayDataset) -> None:
        self.dataset = dataset
        self.simulated_seconds = 0.0
        self.measured = 0

    def run(self, builds: Sequence[BuildResult]) -> Iterator[MeasureResult]:
        for b in builds:
            if not b.ok:
                assert b.error is not None
                yield MeasureResult.failed(b.config, b.error, b.message)
                continue
            yield self._answer(b.config)

    def run_configs(self, configs: Iterable[Config]) -> Iterator[MeasureResult]:
        """The same, for configurations without a build step."""
        for cfg in configs:
            yield self._answer(Config(cfg))

    def _answer(self, config: Config) -> MeasureResult:
        self.measured += 1
        result = self.dataset.results.get(config)
        if result is None:
            return MeasureResult.failed(config, ErrorKind.INVALID,
                                        "configuration is not in the measured space")
        self.simulated_seconds += result.compile_seconds + result.run_seconds
        return result


def _read_json(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError, EOFError) as exc:
        raise ValueError(f"{path}: not a readable Kernel Tuner cache ({exc})") from exc


def _parse_value(text: str, by_text: dict[str, Any]) -> Any:
    if text in by_text:
        return by_text[text]
    raise KeyError(text)


def _record_result(config: Config, rec: dict[str, Any]) -> MeasureResult:
    compile_s = float(rec.get("compile_time", 0.0) or 0.0) / 1000.0
    bench_s = float(rec.get("benchmark_time", 0.0) or 0.0) / 1000.0
    value = rec.get("time")
    if isinstance(value, str):
        kind = ERROR_KINDS.get(value, ErrorKind.RUNTIME_ERROR)
        return MeasureResult.failed(config, kind, value, compile_seconds=compile_s, run_seconds=bench_s)
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return MeasureResult.failed(config, ErrorKind.RUNTIME_ERROR, f"recorded time {value!r}",
                                    compile_seconds=compile_s, run_seconds=bench_s)
    runs = rec.get("times")
    extra = {"runs_ms": list(runs)} if isinstance(runs, list) else {}
    # The objective Kernel Tuner recorded (the mean of the runs) is the time, so that
    # scores agree with Kernel Tuner's own simulation mode.
    return MeasureResult(config, (float(value) / 1000.0,), compile_seconds=compile_s,
                         run_seconds=bench_s, extra=extra)


def load_kernel_tuner_cache(path: str | os.PathLike[str]) -> ReplayDataset:
    """Read a Kernel Tuner cache (.json or .json.gz) into a space and its recorded results."""
    path = Path(path)
    data = _read_json(path)
    if not isinstance(data, dict) or "tune_params" not in data or "cache" not in data:
        raise ValueError(f"{path}: a Kernel Tuner cache needs 'tune_params' and 'cache'")
    tune_params: dict[str, list[Any]] = data["tune_params"]
    names = list(data.get("tune_params_keys") or tune_params)
    by_text = [{str(v): v for v in tune_params[n]} for n in names]
    results: dict[Config, MeasureResult] = {}
    members: list[tuple[Any, ...]] = []  # the cache's keys are distinct
    for key, rec in data["cache"].items():
        parts = key.split(",")
        if len(parts) != len(names):
            raise ValueError(f"{path}: cache key {key!r} has {len(parts)} values for {len(names)} parameters")
        try:
            values = tuple(_parse_value(t, m) for t, m in zip(parts, by_text))
        except KeyError as exc:
            raise ValueError(f"{path}: cache key {key!r} has value {exc} outside tune_params") from None
        config = Config(dict(zip(names, values)))
        members.append(values)
        results[config] = _record_result(config, rec)
    if not results:
        raise ValueError(f"{path}: the cache is empty")

    measured = Constraint.allowed(names, members, text="in_kernel_tuner_cache")
    try:
        space = Space({n: tune_params[n] for n in names}, constraints=[measured])
    except SpaceError as exc:
        raise ValueError(f"{path}: {exc}") from exc
    return ReplayDataset(dataset_name(path), str(data.get("device_name", "")), str(data.get("kernel_name", "")),
                         space, results, str(data.get("objective", "time")))


def dataset_name(path: str | os.PathLike[str]) -> str:
    """A cache's dataset name, as replays and benchmark files key it: its file name
    without `.json` or `.json.gz` (`gemm-RTX_3090.json.gz` -> `gemm-RTX_3090`)."""
    return Path(path).name.removesuffix(".gz").removesuffix(".json")


def find_datasets(folder: str | os.PathLike[str]) -> list[Path]:
    """The Kernel Tuner caches in a folder, sorted by name."""
    folder = Path(folder)
    return sorted(p for p in folder.iterdir() if p.name.endswith((".json.gz", ".json"))
                  and not p.name.startswith("T1_"))
