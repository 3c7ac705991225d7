"""Where the loop's candidates are built and measured: the executor seam.

The tuner asks an executor to build and measure a batch and consumes the results one at a
time, as they arrive; it records each before anything else hears of it. `LocalExecutor`
(the default) calls the builder and the runner in this process tree, as they always did.
`tensortune.distributed.RayExecutor` sends builds to Ray tasks and measurements to Ray
actors on the nodes of the target; for that, builders and runners describe themselves as
picklable recipes (`remote_build()`, `remote_runner()`), and artifacts that are files (a
compiled library) travel as `ShippedFile`s.

Example:
    >>> from tensortune.space import Config
    >>> from tensortune.measure import CallableRunner, NullBuilder, Timer
    >>> runner = CallableRunner(lambda n: sum(range(n)), Timer(min_repeats=2, budget_seconds=0))
    >>> [r.ok for r in LocalExecutor().measure(NullBuilder(), runner, [Config(n=10)])]
    [True]
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..space import Config
from .result import BuildResult, MeasureResult


class Executor(Protocol):
    """Builds and measures batches of candidates for a target; yields each result as it is
    known (failures are results; nothing raises for one candidate).

    `parallelism(builder, target)`: how many candidates a batch should hold to keep every
    builder and measurer busy. `late_results(runner)`: what showed only after the run's
    last candidate (see `Runner`). `close()`: gives back what the executor holds.

    An executor whose `streams` attribute is true takes `measure(..., more=ask)`: it calls
    `ask(k)` for up to `k` further candidates whenever part of the batch has come back,
    keeping its slots busy instead of waiting for the batch's slowest candidate (the Ray
    executor; the local one measures batch by batch)."""

    name: str

    def parallelism(self, builder: Any, target: Any = None) -> int: ...

    def measure(self, builder: Any, runner: Any, configs: Sequence[Config],
                target: Any = None) -> Iterator[MeasureResult]: ...

    def late_results(self, runner: Any) -> tuple[MeasureResult, ...]: ...

    def close(self) -> None: ...


class LocalExecutor:
    """Today's behaviour: the builder's process pool, then the runner's isolated worker."""

    name = "local"

    def parallelism(self, builder: Any, target: Any = None) -> int:
        return max(1, getattr(builder, "jobs", 1))

    def measure(self, builder: Any, runner: Any, configs: Sequence[Config],
                target: Any = None) -> Iterator[MeasureResult]:
        return iter(runner.run(builder.build(configs)))

    def late_results(self, runner: Any) -> tuple[MeasureResult, ...]:
        return tuple(getattr(runner, "late_results", tuple)())

    def close(self) -> None:
        pass


EXECUTORS = ("local", "ray")


def make_executor(executor: "str | Executor | None" = None, ray_address: str | None = None,
                  **options: Any) -> Executor:
    """An executor from a name ("local", the default, or "ray") or an executor object.

    `ray_address`: the Ray cluster to join ("auto": the one this machine belongs to; None:
    `RAY_ADDRESS`, else "auto"); `options` go to `RayExecutor`."""
    if executor is None or executor == "local":
        if ray_address is not None or options:
            raise ValueError("ray_address= and Ray options need executor='ray'")
        return LocalExecutor()
    if executor == "ray":
        from ..distributed import RayExecutor
        return RayExecutor(address=ray_address, **options)
    if isinstance(executor, str):
        raise ValueError(f"unknown executor {executor!r}; known: {', '.join(EXECUTORS)}")
    if not callable(getattr(executor, "measure", None)):
        raise ValueError(f"an executor is 'local', 'ray' or an Executor object, got {executor!r}")
    return executor


# ---- recipes for building and measuring elsewhere ------------------------------------------
@dataclass(frozen=True)
class RemoteBuild:
    """How to build one configuration on another machine: `build(config)` (picklable)
    returns a `BuildResult` whose artifact can travel (no local paths: `ShippedFile`);
    `timeout`: seconds after which a build is given up as the candidate's timeout;
    `native`: the artifact is built for this machine's CPU (so it is built on a node of
    the target)."""

    build: Callable[[Config], BuildResult]
    timeout: float = 180.0
    native: bool = True


@dataclass(frozen=True)
class RemoteRunner:
    """How to measure on another machine: `make(index)` (picklable) returns a runner,
    called once in each measuring actor (`index` tells the actors apart, for seeds);
    `unpack(artifact)` turns a travelled artifact into what that runner takes;
    `timeout`: seconds one candidate may take there, the runner's own limits included;
    `adopt(old)`: this recipe's runner made from another recipe's runner that the actor
    is about to close (its worker kept, given this task), or None where it cannot be;
    `holds(old)`: whether that runner holds this recipe's task already (an earlier round
    of it: its arguments and reference made), so that adopting it costs nothing."""

    make: Callable[[int], Any]
    unpack: Callable[[Any], Any] | None = None
    timeout: float = 600.0
    adopt: Callable[[Any], Any] | None = None
    holds: Callable[[Any], bool] | None = None


def remote_build_of(builder: Any) -> RemoteBuild:
    recipe = getattr(builder, "remote_build", None)
    if recipe is None:
        raise ValueError(f"{type(builder).__name__} cannot build on other machines (it has no remote_build()); "
                         "use executor='local'")
    return recipe()


def remote_runner_of(runner: Any) -> RemoteRunner:
    recipe = getattr(runner, "remote_runner", None)
    if recipe is None:
        raise ValueError(f"{type(runner).__name__} cannot measure on other machines (it has no remote_runner()); "
                         "use executor='local'")
    return recipe()


@dataclass(frozen=True)
class ShippedFile:
    """A file's bytes and name, to be written again where it is used (`materialize`).

    Example:
        >>> import pathlib, tempfile
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "lib.so"; _ = p.write_bytes(b"\\x7fELF")
        >>> ShippedFile.of(p).materialize().read_bytes()
        b'\\x7fELF'
    """

    name: str
    data: bytes
    digest: str

    @staticmethod
    def of(path: str | os.PathLike[str]) -> ShippedFile:
        data = Path(path).read_bytes()
        return ShippedFile(Path(path).name, data, hashlib.sha256(data).hexdigest())

    def materialize(self, directory: str | os.PathLike[str] | None = None) -> Path:
        """The file written under `directory` (default: a per-user temporary folder),
        named by its content, so that equal files are written once; checked on the way."""
        if hashlib.sha256(self.data).hexdigest() != self.digest:
            raise ValueError(f"shipped file {self.name!r} arrived damaged (its digest does not match)")
        folder = Path(directory or Path(tempfile.gettempdir()) / f"tensortune-shipped-{os.getuid()}")
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"{self.digest[:24]}-{Path(self.name).name}"
        if not target.exists():
            partial = target.with_suffix(target.suffix + f".{os.getpid()}.part")
            partial.write_bytes(self.data)
            os.replace(partial, target)
        return target


def shipped_build(build: Callable[[Config], BuildResult], pack: Callable[[Any], Any],
                  config: Config) -> BuildResult:
    """`build(config)` with its artifact made to travel by `pack` (for `RemoteBuild`)."""
    import dataclasses
    result = build(config)
    return dataclasses.replace(result, artifact=pack(result.artifact)) if result.ok else result


def materialize_library(artifact: Any) -> str:
    """The local path of a travelled library (a `ShippedFile`), or `artifact` itself."""
    return str(artifact.materialize()) if isinstance(artifact, ShippedFile) else artifact
