"""Candidates as files: writing each configuration's module, compiling it, launching it.

`Generator` writes the module of a configuration to `<directory>/<prefix>_<config digest>.py`
(Triton reads kernel sources from files). `GeneratedBuilder` writes a batch of
candidates and compiles them in the parallel compile pool of the GPU-measurement layer
(`ParallelCompiler`, through each module's `precompile`, for the target architecture,
without a GPU), streaming results to the runner as they finish; a configuration the
generator rejects is that candidate's `compile_error`. `GeneratedLaunch` is the GPU
runner's launch function: it imports the candidate's module in the worker and calls
its `launch`.

Example:
    >>> import tempfile
    >>> from tensortune.te import workloads
    >>> from tensortune.backends.triton.patterns import analyze
    >>> gen = Generator(analyze(workloads.transpose(8, 4).output), GenOptions(), tempfile.mkdtemp(), "t")
    >>> gen.write({"BLOCK": 32}).kernels, gen.path({"BLOCK": 32}).exists()
    (('tt_elementwise',), True)
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...measure import BuildResult, CandidateError, ErrorKind, classify_exception
from ...space import Config
from .generate import generate, load
from .patterns import GpuPlan
from .source import CodegenError, GenOptions, KernelSource


@dataclass(frozen=True)
class Generator:
    """Writes candidates' modules; picklable, so compile and GPU workers find the files."""

    plan: GpuPlan
    options: GenOptions
    directory: str
    prefix: str

    def path(self, config: Mapping[str, Any]) -> Path:
        cfg = config if isinstance(config, Config) else Config(dict(config))
        return Path(self.directory) / f"{self.prefix}_{cfg.digest}.py"

    def write(self, config: Mapping[str, Any]) -> KernelSource:
        source = generate(self.plan, config, self.options)
        path = self.path(config)
        if not path.exists() or path.read_text() != source.text:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{time.monotonic_ns()}")
            tmp.write_text(source.text)
            tmp.replace(path)
        return source

    def __repr__(self) -> str:
        return f"Generator({self.plan.output.name}, {self.directory}/{self.prefix})"


@dataclass(frozen=True)
class GeneratedLaunch:
    """`launch(config, *tensors)` for the GPU runner: imports the candidate's module there."""

    directory: str
    prefix: str

    def __call__(self, config: Mapping[str, Any], *args: Any) -> None:
        cfg = config if isinstance(config, Config) else Config(dict(config))
        load(Path(self.directory) / f"{self.prefix}_{cfg.digest}.py").launch(*args)


@dataclass(frozen=True)
class GeneratedBinary:
    """What compiling a candidate produced; equal `binary_digest`s are measured once."""

    binary_digest: str
    shared_bytes: int
    num_warps: int
    kernels: int
    kernel_hashes: tuple[str, ...] = ()  # the compiled kernels' Triton cache entries


def compile_generated(directory: str, prefix: str, target: tuple[str, int, int] | None, max_shared: int | None,
                      config: Config) -> GeneratedBinary:
    """Compile every kernel of a written candidate (runs in a compile process)."""
    from ...measure.triton_compile import warm_triton

    warm_triton(target)
    import torch

    module = load(Path(directory) / f"{prefix}_{config.digest}.py")
    try:
        compiled = module.precompile(*(getattr(torch, d) for d in module.DTYPES))
    except CandidateError:
        raise
    except Exception as exc:  # noqa: BLE001 - the candidate's failure
        kind = classify_exception(exc)
        kind = kind if kind is ErrorKind.OUT_OF_RESOURCES else ErrorKind.COMPILE_ERROR
        raise CandidateError(kind, f"{type(exc).__name__}: {exc}") from None
    digest = hashlib.sha256()
    shared, warps = 0, 0
    for c in compiled:
        meta = c.metadata
        binary = c.asm.get("cubin") or c.asm.get("hsaco") or c.asm.get("ptx") or b""
        digest.update(binary.encode() if isinstance(binary, str) else binary)
        launch = {k: getattr(meta, k, None) for k in ("num_warps", "num_ctas", "shared", "cluster_dims", "maxnreg")}
        digest.update(json.dumps(launch, sort_keys=True, default=str).encode())
        shared = max(shared, int(getattr(meta, "shared", 0) or 0))
        warps = max(warps, int(getattr(meta, "num_warps", 0) or 0))
    if max_shared is not None and shared > max_shared:
        raise CandidateError(ErrorKind.OUT_OF_RESOURCES,
                             f"needs {shared} bytes of shared memory; the device allows {max_shared}")
    return GeneratedBinary(digest.hexdigest()[:16], shared, warps, len(compiled),
                           tuple(str(c.hash) for c in compiled))


class GeneratedBuilder:
    """Writes each batch's modules, then compiles them in parallel (none under the interpreter).

    `build` returns an iterator: code-generation failures first, then compiled candidates
    as they finish, so the GPU runner measures while the rest compile.
    """

    def __init__(self, generator: Generator, *, target: tuple[str, int, int] | None = None,
                 jobs: int | None = None, max_shared: int | None = None, compile: bool = True,
                 env: Mapping[str, str] | None = None, compiler: Any = None) -> None:
        from ...measure.triton_compile import ParallelCompiler, warm_triton

        self.generator = generator
        self.compiles = compile
        self.compiler = None
        self.owns_compiler = compiler is None
        self.compile_fn = functools.partial(compile_generated, generator.directory, generator.prefix, target,
                                            max_shared)
        if compile:
            self.compiler = compiler or ParallelCompiler(self.compile_fn, jobs=jobs, env=env,
                                                         warm=functools.partial(warm_triton, target), stream=True)
        self.jobs = self.compiler.jobs if self.compiler else 1

    def build(self, configs: Sequence[Config]) -> Iterator[BuildResult]:
        written: list[Config] = []
        failed: list[BuildResult] = []
        for c in configs:
            start = time.perf_counter()
            try:
                self.generator.write(c)
                written.append(c)
            except CodegenError as exc:
                failed.append(BuildResult(c, None, ErrorKind.COMPILE_ERROR, f"code generation: {exc}",
                                          time.perf_counter() - start))
        return self._stream(failed, written)

    def _stream(self, failed: list[BuildResult], written: list[Config]) -> Iterator[BuildResult]:
        yield from failed
        if self.compiler is None:
            for c in written:
                yield BuildResult(c)
        elif written:
            self.compiler.compile_fn = self.compile_fn  # a shared pool compiles this generator's modules now
            yield from self.compiler.build_iter(written)

    def remote_build(self) -> Any:
        """The recipe for building on a Ray node of the target (`measure.executor`): the
        module written and compiled there, both shipped to the measuring node."""
        from ...measure.builder import build_one
        from ...measure.executor import RemoteBuild

        body = functools.partial(shipped_generated, self.generator, self.compile_fn if self.compiles else None)
        return RemoteBuild(functools.partial(build_one, body), timeout=180.0, native=self.compiles)

    def close(self) -> None:
        if self.compiler is not None and self.owns_compiler:
            self.compiler.close()


def shipped_generated(generator: Generator, compile_fn: Any, config: Config) -> Any:
    """A build task's body: write the candidate's module, compile it (not under the
    interpreter), and pack both to travel (`measure.triton_shipping`)."""
    from ...measure.triton_shipping import CacheEntries, TravellingBinary, kernel_hashes

    try:
        source = generator.write(config)
    except CodegenError as exc:
        raise CandidateError(ErrorKind.COMPILE_ERROR, f"code generation: {exc}") from None
    binary = compile_fn(config) if compile_fn is not None else None
    return TravellingBinary(binary, CacheEntries.pack(kernel_hashes(binary)), str(generator.path(config)),
                            source.text)
