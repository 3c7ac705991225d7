"""Compiling Triton kernel configurations ahead of time, in parallel, with a timeout that adapts.

Triton compiles a configuration the first time it is launched, one after another, and a
configuration whose assembler hangs stalls everything. `precompile` instead compiles every
configuration in a pool of worker processes (one per CPU core by default) through the
kernel's own `warmup` path, so the compiled binary lands in Triton's on-disk cache under
exactly the key the launch will look up: the GPU worker's first launch is a cache hit.
Each compile runs under a timeout that starts at `AdaptiveTimeout.initial` and, once a few
compile times are known, tightens to `factor` times their 90th percentile; a hung compile
kills only its process. Every result carries a `TritonBinary` whose `binary_digest` is the
same for configurations that compile to identical machine code, so `GpuRunner` measures
those once.

The pool's processes need no GPU: given `target=("cuda", 90, 32)` they compile for that
architecture with Triton's bundled assembler behind a compile-only driver (on a GPU machine
`target="auto"` asks the visible GPU). Under TRITON_INTERPRET=1 nothing is compiled.

Example (compiles for an H100 on any machine with Triton installed):
    >>> from tensortune.space import Config
    >>> from tensortune.measure.gpu import TensorArg
    >>> results = precompile("mypackage.kernels:scale_kernel",
    ...                      [Config(BLOCK=64, num_warps=1), Config(BLOCK=128, num_warps=2)],
    ...                      [TensorArg((1024,)), TensorArg((1024,), output=True), 1024, 2.0],
    ...                      target=("cuda", 90, 32), jobs=2)          # doctest: +SKIP
    >>> [r.ok for r in results]                                     # doctest: +SKIP
    [True, True]
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..space import Config
from .errors import CandidateError, ErrorKind
from .gpu.args import TensorArg
from .gpu.task import resolve
from .result import BuildResult
from .worker import BUILD_NICENESS, IsolatedWorker, classify_exception, worker_state


@dataclass(frozen=True)
class TritonBinary:
    """What compiling one configuration produced (the artifact of its BuildResult)."""

    binary_digest: str  # sha256 of the machine code and launch metadata
    kernel_hash: str  # Triton's cache key
    shared_bytes: int
    num_warps: int
    name: str = ""


@dataclass
class AdaptiveTimeout:
    """A compile timeout: `initial` until `min_samples` compile times are known, then
    `factor` x their `quantile`, kept within [`minimum`, `initial`]."""

    initial: float = 120.0
    minimum: float = 15.0
    factor: float = 4.0
    quantile: float = 0.9
    min_samples: int = 8
    _seen: list[float] = field(default_factory=list, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def observe(self, seconds: float) -> None:
        with self._lock:
            self._seen.append(seconds)

    def current(self) -> float:
        with self._lock:
            seen = sorted(self._seen)
        if len(seen) < self.min_samples:
            return self.initial
        q = seen[min(len(seen) - 1, int(self.quantile * len(seen)))]
        return min(self.initial, max(self.minimum, self.factor * q))


class ParallelCompiler:
    """A Builder that runs a picklable `compile_fn(config)` in `jobs` isolated processes.

    `warm` (picklable, optional) runs once in each process after it starts, under
    `startup_timeout`, so imports do not count against the compile timeout. With
    `stream=True`, `build` returns an iterator of results in the order they finish, so a
    runner that accepts iterables (GpuRunner) measures early results while the rest compile.
    `skip(config)`, when set, is asked just before a configuration is compiled: a reason
    returned rejects it uncompiled (out of resources); `on_result(result)` hears every result.
    """

    def __init__(self, compile_fn: Callable[[Config], Any], *, jobs: int | None = None,
                 timeout: AdaptiveTimeout | float | None = None, env: Mapping[str, str] | None = None,
                 warm: Callable[[], Any] | None = None, startup_timeout: float = 180.0,
                 stream: bool = False) -> None:
        self.compile_fn = compile_fn
        self.jobs = max(1, jobs or os.cpu_count() or 1)
        if timeout is None:
            timeout = AdaptiveTimeout()
        self.timeout = timeout if isinstance(timeout, AdaptiveTimeout) else AdaptiveTimeout(
            initial=float(timeout), minimum=float(timeout))
        self.env = dict(env or {})
        self.warm = warm
        self.startup_timeout = startup_timeout
        self.stream = stream
        self.skip: Callable[[Config], str | None] | None = None
        self.on_result: Callable[[BuildResult], None] | None = None
        self._workers: list[tuple[IsolatedWorker, list[bool]]] = []

    def build(self, configs: Sequence[Config]) -> Any:
        """Results for `configs`: a list in their order, or (stream=True) an iterator as they finish."""
        if self.stream:
            return self.build_iter(configs)
        by_config = {r.config: r for r in self.build_iter(configs)}
        return [by_config[c] for c in configs]

    def build_iter(self, configs: Sequence[Config]) -> Iterator[BuildResult]:
        """Compile `configs` in parallel and yield each result as soon as it is known."""
        configs = list(dict.fromkeys(configs))
        if not configs:
            return
        while len(self._workers) < min(self.jobs, len(configs)):
            self._workers.append((IsolatedWorker(timeout=self.startup_timeout, env=self.env,
                                                 niceness=BUILD_NICENESS), [False]))
        todo: queue.Queue[Config | None] = queue.Queue()
        for c in configs:
            todo.put(c)
        out: queue.Queue[BuildResult] = queue.Queue()
        active = self._workers[:min(self.jobs, len(configs))]
        for _ in active:
            todo.put(None)
        threads = [threading.Thread(target=self._serve, args=(w, todo, out), daemon=True) for w in active]
        for t in threads:
            t.start()
        for _ in configs:
            yield out.get()
        for t in threads:
            t.join()

    def _serve(self, slot: tuple[IsolatedWorker, list[bool]], todo: queue.Queue, out: queue.Queue) -> None:
        worker, warmed = slot
        while (config := todo.get()) is not None:
            why = self.skip(config) if self.skip is not None else None
            if why:
                self._put(out, BuildResult(config, None, ErrorKind.OUT_OF_RESOURCES, why, 0.0))
                continue
            try:
                if not warmed[0] and self.warm is not None:
                    worker.call(self.warm, timeout=self.startup_timeout)
                warmed[0] = True
            except CandidateError as exc:
                warmed[0] = False
                self._put(out, BuildResult(config, None, exc.kind, f"compile process failed to start: {exc}"))
                continue
            limit = self.timeout.current()
            start = time.perf_counter()
            try:
                artifact = worker.call(self.compile_fn, config, timeout=limit)
            except CandidateError as exc:
                seconds = time.perf_counter() - start
                if exc.kind in (ErrorKind.TIMEOUT, ErrorKind.CRASHED):
                    warmed[0] = False  # the process was killed; the next call starts a fresh one
                message = str(exc)
                if exc.kind is ErrorKind.TIMEOUT:
                    message = f"compile did not finish within {limit:.1f} s (adaptive timeout); process killed"
                self._put(out, BuildResult(config, None, exc.kind, message[:4000], seconds))
                continue
            seconds = time.perf_counter() - start
            self.timeout.observe(seconds)
            self._put(out, BuildResult(config, artifact, None, "", seconds))

    def _put(self, out: queue.Queue, result: BuildResult) -> None:
        if self.on_result is not None:
            self.on_result(result)
        out.put(result)

    @property
    def restarts(self) -> int:
        return sum(w.restarts for w, _ in self._workers)

    def close(self) -> None:
        for w, warmed in self._workers:
            w.close()
            warmed[0] = False
        self._workers.clear()

    def __enter__(self) -> "ParallelCompiler":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- Triton ------------------------------------------------------------------------------

def kernel_reference(kernel: Any) -> str:
    """"module:qualname" of a @triton.jit function (or of an object wrapping one as `.fn`)."""
    if isinstance(kernel, str):
        return kernel
    fn = kernel
    while hasattr(fn, "fn") and not hasattr(fn, "__code__"):
        fn = fn.fn
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not module or not qualname:
        raise TypeError(f"cannot tell where {kernel!r} is defined; pass 'module:name'")
    return f"{module}:{qualname}"


AUTOTUNERS = ("AutotunedKernel", "Autotuner")  # tensortune's and Triton's autotuners


def launchable(obj: Any, ref: str = "") -> Any:
    """What an autotuner launches: the object under any autotuners (a `@triton.heuristics`
    wrapper, which computes its meta-parameters at each launch, or the `@triton.jit` function)."""
    seen = 0
    while any(b.__name__ in AUTOTUNERS for b in type(obj).__mro__):
        obj = getattr(obj, "fn", None)
        seen += 1
        if obj is None or seen > 16:
            break
    if not callable(getattr(obj, "warmup", None)) or not callable(getattr(obj, "run", None)):
        raise TypeError(f"{ref or obj!r} is not a @triton.jit function (got {type(obj).__name__})")
    return obj


def _jit_function(ref: str) -> Any:
    return launchable(resolve(ref), ref)


class _CompileOnlyDriver:
    """Stands in for the GPU driver so a process without a GPU can compile for `target`.

    What compiling needs it answers itself (the target, device 0, stream 0); anything else a
    kernel's module asks when it is imported (Triton's tutorials ask the active driver for
    its torch device) goes to the machine's real driver, where there is one.
    """

    def __init__(self, target: Any) -> None:
        self.target = target

    def is_active(self) -> bool:
        return True

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_current_target(self) -> Any:
        return self.target

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            from triton.runtime import driver

            real = driver.default
        except Exception as exc:  # noqa: BLE001 - no GPU here: nothing to ask
            raise AttributeError(f"the compile-only driver cannot {name} and this process sees no GPU driver "
                                 f"to ask ({exc})") from None
        return getattr(real, name)


def warm_triton(target: tuple[str, int, int] | None) -> str:
    """Import Triton in a compile process (not torch: arguments stand in for tensors) and
    install the driver for `target`."""
    import triton  # noqa: F401
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver

    if target is not None and not worker_state().get("compile_only_driver"):
        driver.set_active(_CompileOnlyDriver(GPUTarget(*target)))
        worker_state()["compile_only_driver"] = True
    _stop_early_when_shared_memory_is_short()
    return str(os.getpid())


_SHARED_LIMIT: list[int | None] = [None]  # this compile's limit (compile processes compile one at a time)


def _stop_early_when_shared_memory_is_short() -> None:
    """In a compile process: a kernel needing more shared memory than the device has is
    rejected as soon as that is known (after the LLVM IR stage), before the assembler runs.
    The stages themselves are unchanged, so a compile that passes lands in Triton's cache
    under the key a launch looks up."""
    state = worker_state()
    if state.get("shared_memory_check"):
        return
    state["shared_memory_check"] = True
    try:
        from triton.backends.nvidia.compiler import CUDABackend
    except ImportError:  # no CUDA backend: nothing to check early
        return
    original = CUDABackend.add_stages

    def add_stages(self: Any, stages: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        original(self, stages, *args, **kwargs)
        llir = stages.get("llir")
        if llir is None:
            return

        def checked(src: Any, metadata: dict[str, Any]) -> Any:
            out = llir(src, metadata)
            limit, shared = _SHARED_LIMIT[0], metadata.get("shared")
            if limit is not None and shared is not None and int(shared) > limit:
                raise CandidateError(ErrorKind.OUT_OF_RESOURCES,
                                     f"needs {shared} bytes of shared memory; the device allows {limit}")
            return out

        stages["llir"] = checked

    CUDABackend.add_stages = add_stages


class _Dtype:
    """A torch dtype's stand-in in a compile process (Triton reads its text and size)."""

    def __init__(self, name: str) -> None:
        from .gpu.args import _ITEMSIZE

        self.name = name
        self.itemsize = _ITEMSIZE.get(name, 1)
        self.is_floating_point = name.startswith(("float", "bfloat"))

    def __str__(self) -> str:
        return f"torch.{self.name}"

    __repr__ = __str__


class _Tensor:
    """A tensor's stand-in for compiling: a dtype and an aligned address, no data."""

    def __init__(self, dtype: str) -> None:
        self.dtype = _Dtype(dtype)
        self.shape = (1,)
        self.data = None
        self.device = "cpu"

    @staticmethod
    def data_ptr() -> int:
        return 0

    def stride(self, *args: Any) -> Any:
        return 1 if args else (1,)


@dataclass(frozen=True)
class DescriptorArg:
    """A `TensorDescriptor` argument for compiling only: its base's dtype and its other fields
    (shape, strides, block_shape, padding, ...) as sorted (name, value) pairs."""

    dtype: str
    fields: tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class ReinterpretedArg:
    """A `triton.reinterpret` tensor for compiling only: the base's torch dtype and the
    Triton dtype it is read as (e.g. "fp8e4nv")."""

    dtype: str
    as_dtype: str


def _warmup_arg(arg: Any) -> Any:
    if isinstance(arg, TensorArg):
        return _Tensor(arg.dtype)
    if isinstance(arg, DescriptorArg):
        from triton.tools.tensor_descriptor import TensorDescriptor

        return TensorDescriptor(_Tensor(arg.dtype), **{k: list(v) if isinstance(v, tuple) else v
                                                       for k, v in arg.fields})
    if isinstance(arg, ReinterpretedArg):
        import triton
        import triton.language as tl

        return triton.reinterpret(_Tensor(arg.dtype), tl.dtype(arg.as_dtype))
    return arg


def _warmup_arg_torch(arg: Any) -> Any:
    """The same arguments made with torch (dtypes, small tensors as bases)."""
    import torch

    if isinstance(arg, TensorArg):
        return getattr(torch, arg.dtype)
    if isinstance(arg, DescriptorArg):
        from triton.tools.tensor_descriptor import TensorDescriptor

        return TensorDescriptor(torch.empty(16, dtype=getattr(torch, arg.dtype)),
                                **{k: list(v) if isinstance(v, tuple) else v for k, v in arg.fields})
    if isinstance(arg, ReinterpretedArg):
        import triton
        import triton.language as tl

        return triton.reinterpret(torch.empty(16, dtype=getattr(torch, arg.dtype)), tl.dtype(arg.as_dtype))
    return arg


def compile_for_launch(kernel_ref: str, args: Sequence[Any], by_config: Mapping[str, Sequence[Any]],
                       extra: Mapping[str, Any], target: tuple[str, int, int] | None, max_shared: int | None,
                       config: Config) -> TritonBinary:
    """Compile one configuration of a launch: its own arguments if `by_config` has them (a
    configuration's pre_hook changed a descriptor), with the launch's keyword arguments
    `extra`; names set to None (not given by this configuration) are left out, as at launch."""
    chosen = by_config.get(config.to_json(), args) if by_config else args
    meta = {k: v for k, v in {**config, **extra}.items() if v is not None}
    return compile_triton(kernel_ref, chosen, target, max_shared, Config(meta))


def compile_triton(kernel_ref: str, args: Sequence[Any], target: tuple[str, int, int] | None,
                   max_shared: int | None, config: Config) -> TritonBinary:
    """Compile one configuration through the kernel's warmup path (runs in a compile process)."""
    warm_triton(target)
    kernel = _jit_function(kernel_ref)
    _SHARED_LIMIT[0] = max_shared
    try:
        try:
            compiled = kernel.warmup(*[_warmup_arg(a) for a in args], grid=(1,), **dict(config))
        except (TypeError, AttributeError, KeyError):  # a Triton the stand-ins do not suit: torch's own
            compiled = kernel.warmup(*[_warmup_arg_torch(a) for a in args], grid=(1,), **dict(config))
    except CandidateError:
        raise
    except Exception as exc:  # noqa: BLE001 - the configuration's failure
        kind = classify_exception(exc)
        kind = kind if kind is ErrorKind.OUT_OF_RESOURCES else ErrorKind.COMPILE_ERROR
        raise CandidateError(kind, f"{type(exc).__name__}: {exc}") from None
    metadata = compiled.metadata
    shared = int(getattr(metadata, "shared", 0) or 0)
    if max_shared is not None and shared > max_shared:
        raise CandidateError(ErrorKind.OUT_OF_RESOURCES,
                             f"needs {shared} bytes of shared memory; the device allows {max_shared}")
    binary = compiled.asm.get("cubin") or compiled.asm.get("hsaco") or compiled.asm.get("ptx") or b""
    if isinstance(binary, str):
        binary = binary.encode()
    launch = {k: getattr(metadata, k, None) for k in ("num_warps", "num_ctas", "shared", "cluster_dims",
                                                      "maxnreg", "launch_cooperative_grid")}
    digest = hashlib.sha256(binary + json.dumps(launch, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return TritonBinary(digest, str(compiled.hash), shared, int(getattr(metadata, "num_warps", 0) or 0),
                        str(getattr(metadata, "name", "")))


def detect_target() -> tuple[str, int, int]:
    """(backend, arch, warp size) of the GPU this process sees, e.g. ("cuda", 90, 32)."""
    from triton.runtime import driver

    try:
        t = driver.active.get_current_target()
    except Exception as exc:  # noqa: BLE001
        raise RuntimeError("no GPU visible to Triton: pass target=('cuda', 90, 32) (backend, compute "
                           f"capability, warp size) to compile without one ({exc})") from None
    return (t.backend, t.arch, t.warp_size)


def device_max_shared() -> int | None:
    """Bytes of shared memory one block may use on the visible GPU (opt-in maximum), or
    None when torch sees no GPU: what a compiled candidate is checked against."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
    except Exception:  # noqa: BLE001 - no usable GPU: nothing to check against
        return None
    value = getattr(props, "shared_memory_per_block_optin", 0)
    return int(value) if value else None


def triton_builder(kernel: Any, args: Sequence[Any], *, target: tuple[str, int, int] | str | None = "auto",
                   jobs: int | None = None, timeout: AdaptiveTimeout | float | None = None,
                   max_shared: int | None = None, env: Mapping[str, str] | None = None,
                   stream: bool = False) -> ParallelCompiler:
    """A ParallelCompiler for a @triton.jit kernel and its (described) arguments.

    `args` are the kernel's positional arguments: `TensorArg`s (only their dtype matters
    here) and the scalar values of the launch (they decide Triton's specialisation).
    `target`: "auto" (the visible GPU, asked in this process), a tuple such as
    ("cuda", 90, 32) (compile without a GPU), or None (each compile process asks the GPU).
    """
    ref = kernel_reference(kernel)
    if target == "auto":
        target = detect_target()
    compile_fn = functools.partial(compile_triton, ref, tuple(args), target, max_shared)
    return ParallelCompiler(compile_fn, jobs=jobs, timeout=timeout, env=env,
                            warm=functools.partial(warm_triton, target), stream=stream)


def precompile(kernel: Any, configs: Sequence[Config], args: Sequence[Any], **options: Any) -> list[BuildResult]:
    """Compile `configs` of `kernel` in parallel now; see `triton_builder` for the options.

    Under TRITON_INTERPRET=1 nothing needs compiling: every config comes back built.
    """
    configs = [c if isinstance(c, Config) else Config(c) for c in configs]
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        return [BuildResult(c) for c in configs]
    with triton_builder(kernel, args, **{k: v for k, v in options.items() if k != "stream"}) as builder:
        return builder.build(configs)
