"""Parallel compilation and isolated measurement through the GPU-measurement layer.

When the kernel can be found again by "module:qualname" (any kernel defined at module
level, also in a script run as __main__), candidates are compiled ahead of time in a
pool of processes (`tensortune.measure.triton_compile`), and the measurements stream in
as compiles finish. When, in addition, the launch can be described (tensors contiguous
and of float dtype, a grid that is a tuple or computed here per configuration, no
Python hooks, a picklable reference and timer), candidates run in an isolated worker
process (`tensortune.measure.gpu.GpuRunner`): a crash, a hang or an illegal memory
access is recorded as that candidate's error and never touches the caller's process.
Otherwise they run in this process (`runner.LaunchRunner`).

Every float tensor is described as `restore=True` (reset to its initial random values
before every run and compared with the reference), since a Triton kernel does not say
which arguments it writes.

Example:
    >>> why_not_isolated(hooks_in_python=True, args=(), reference=None, timer=None)
    'pre_hook/post_hook or a triton.Config pre_hook run Python around each launch'
"""

from __future__ import annotations

import dataclasses
import functools
import os
import pickle
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from ...space import Config
from .arguments import is_descriptor, is_tensor, is_wrapper, underlying
from .configs import launch_kwargs
from .source import base_function


def kernel_ref(kernel: Any) -> str | None:
    """"module:qualname" under which a worker process finds this kernel, or None."""
    import importlib

    base = base_function(kernel)
    module, qualname = getattr(base, "__module__", None), getattr(base, "__qualname__", "")
    if not module or "<locals>" in qualname:
        return None
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        return None
    return f"{module}:{qualname}" if base_function(obj) is base else None


def describe(args: Sequence[Any], zero: Sequence[int] = ()) -> list[Any] | None:
    """TensorArg descriptions of the arguments, or None if one cannot be described; the
    arguments at the positions in `zero` (reset_to_zero) start every run at zero."""
    from ...measure.gpu import TensorArg

    out: list[Any] = []
    seen: set[int] = set()
    for i, a in enumerate(args):
        if is_tensor(a):
            if not a.is_floating_point() or not a.is_contiguous() or a.storage_offset() or id(a) in seen:
                return None  # (one tensor passed twice would become two)
            seen.add(id(a))
            out.append(TensorArg(tuple(a.shape), str(a.dtype), restore=i not in zero, zero=i in zero))
        elif a is None or isinstance(a, (bool, int, float, str)):
            out.append(a)
        else:
            return None
    return out


def compile_args(args: Sequence[Any]) -> list[Any]:
    """Arguments for compiling only: what Triton specialises on, without the data (tensors
    by dtype, descriptors by dtype, shape, strides and block shape; reinterpreted tensors by
    both dtypes)."""
    from ...measure.gpu import TensorArg
    from ...measure.triton_compile import DescriptorArg, ReinterpretedArg

    out: list[Any] = []
    for a in args:
        if is_tensor(a):
            out.append(TensorArg(tuple(a.shape), str(a.dtype)))
        elif is_descriptor(a) and type(a).__module__ == "triton.tools.tensor_descriptor":
            fields = {f.name: getattr(a, f.name) for f in dataclasses.fields(a) if f.name != "base"}
            out.append(DescriptorArg(str(a.base.dtype).removeprefix("torch."), tuple(sorted(
                (k, tuple(v) if isinstance(v, list) else v) for k, v in fields.items()))))
        elif is_wrapper(a):
            out.append(ReinterpretedArg(str(a.base.dtype).removeprefix("torch."), str(a.dtype)))
        elif underlying(a) is not None:
            raise ValueError(f"cannot describe a {type(a).__name__} argument for compiling elsewhere")
        else:
            out.append(a)
    return out


def compile_args_by_config(args: Sequence[Any], kwargs: Mapping[str, Any], arg_names: Sequence[str],
                           configs: Sequence[Config], pre_hooks: Mapping[Config, Any],
                           meta_of: Callable[[Config], dict[str, Any]]) -> dict[str, list[Any]]:
    """Compile arguments per configuration, after its `triton.Config.pre_hook` ran on copies of
    the launch's descriptors (Triton's tutorials set a descriptor's block shape there)."""
    import copy

    out: dict[str, list[Any]] = {}
    for c in configs:
        hook = pre_hooks.get(c)
        if hook is None:
            continue
        shallow = [copy.copy(a) if is_descriptor(a) else a for a in args]
        hook({**dict(zip(arg_names, shallow)), **kwargs, **meta_of(c)})
        out[c.to_json()] = compile_args(shallow)
    return out


def why_not_isolated(*, hooks_in_python: bool, args: Sequence[Any], reference: Any, timer: Any) -> str | None:
    if hooks_in_python:
        return "pre_hook/post_hook or a triton.Config pre_hook run Python around each launch"
    if describe(args) is None:
        return "an argument is not a contiguous float tensor or a plain scalar"
    for what, obj in (("reference", reference), ("timer", timer)):
        if obj is None:
            continue
        try:
            pickle.dumps(obj)
        except Exception:  # noqa: BLE001 - any pickling failure means: not sendable
            return f"the {what} cannot be sent to a worker process (define it at module level)"
    return None


def resolve_jit(ref: str) -> Any:
    """What the autotuned kernel named by "module:qualname" launches (its `@triton.heuristics`
    wrapper, or the `@triton.jit` function or its interpreted form)."""
    from ...measure.gpu import resolve
    from ...measure.triton_compile import launchable

    return launchable(resolve(ref), ref)


def launch_jit(kernel_ref: str, grids: Mapping[str, tuple[int, ...]], extra: Mapping[str, Any],
               config: Mapping[str, Any], *args: Any) -> None:
    """Launch one candidate in a worker (module level, so it pickles by reference)."""
    grid = grids[Config(config).to_json()]
    resolve_jit(kernel_ref)[grid](*args, **extra, **launch_kwargs(config))


def call_reference(reference: Callable[..., Any], *args: Any) -> Any:
    """Run `reference=` in a worker: it writes its results into the arguments, or returns
    {argument name: expected}."""
    out = reference(*args)
    return out if isinstance(out, Mapping) else None


def grids_for(grid: Any, arg_names: Sequence[str], args: Sequence[Any], kwargs: Mapping[str, Any],
              configs: Sequence[Config]) -> dict[str, tuple[int, ...]]:
    """The launch grid of every configuration, computed here (a grid function need not pickle)."""
    out = {}
    for c in configs:
        g = grid({**dict(zip(arg_names, args)), **kwargs, **launch_kwargs(c)}) if callable(grid) else grid
        out[c.to_json()] = tuple(int(x) for x in (g if isinstance(g, (tuple, list)) else (g,)))
    return out


def parallel_builder(kernel: Any, args: Sequence[Any], kwargs: Mapping[str, Any], jobs: int | None,
                     stream: bool, target: Any = "auto", reuse: Any = None,
                     by_config: Mapping[str, Sequence[Any]] | None = None) -> Any | None:
    """A streaming parallel compiler for this kernel's candidates, or None if not possible;
    with `reuse` (a builder made here before for the same target), its warm processes
    compile for these arguments. `by_config`: compile arguments of the configurations whose
    pre_hook changes them (`compile_args_by_config`)."""
    ref = kernel_ref(kernel)
    if ref is None:
        return None
    from ...measure.triton_compile import compile_for_launch, detect_target, device_max_shared, triton_builder

    try:
        described = compile_args(args)
    except ValueError:
        return None  # an argument Triton takes but we cannot describe: compiled at its first launch
    if target == "auto":
        target = detect_target()
    # a candidate needing more shared memory than the device has fails while compiling:
    # rejected by the builder, it costs no measurement (Budget.free_rejections)
    max_shared = device_max_shared()
    compile_fn = functools.partial(compile_for_launch, ref, tuple(described), dict(by_config or {}), dict(kwargs),
                                   target, max_shared)
    if isinstance(reuse, CompileQueue) and getattr(reuse, "target", None) == target:
        reuse.inner.compile_fn = compile_fn  # the warm processes serve the new key
        reuse.reset()
        return reuse
    builder = triton_builder(ref, described, target=target, jobs=jobs, stream=stream, max_shared=max_shared)
    builder.compile_fn = compile_fn
    out = CompileQueue(builder)
    out.target = target
    return out


def compile_cost(config: Config) -> float:
    """A guess at how much a configuration asks of the compiler (and of shared memory):
    larger tiles, more stages and warps (used only to order the compile queue)."""
    import math

    return sum(math.log2(v) for v in config.values() if isinstance(v, (int, float)) and not isinstance(v, bool)
               and v > 1)


def at_least_as_large(config: Config, than: Config) -> bool:
    """Whether `config` asks for at least as much as `than` in every tile size and stage count
    (numeric meta-parameters and `num_stages` no smaller; `num_warps` and everything else equal)."""
    if set(config) != set(than):
        return False
    for name, mine in config.items():
        theirs = than[name]
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (mine, theirs))
        if numeric and name != "num_warps":
            if mine < theirs:
                return False
        elif mine != theirs:
            return False
    return True


class CompileQueue:
    """Hands a batch to the parallel compiler smallest-looking first, and rejects without
    compiling a configuration at least as large as one that needed more shared memory than
    the device has (`at_least_as_large`): shared memory grows with tile sizes and stages, and
    such a compile is among the longest. What was rejected is forgotten with `reset` (a new key)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.jobs = getattr(inner, "jobs", 1)
        self.target: Any = None  # what the processes compile for (a builder for another is not reused)
        self._short: list[tuple[Config, str]] = []
        self._lock = threading.Lock()
        inner.skip, inner.on_result = self._dominated, self._learn

    def build(self, configs: Sequence[Config]) -> Any:
        return self.inner.build(sorted(configs, key=compile_cost))

    def reset(self) -> None:
        with self._lock:
            self._short.clear()

    def _learn(self, result: Any) -> None:
        if getattr(result.error, "value", None) == "out_of_resources" and "shared memory" in result.message \
                and "not compiled" not in result.message:
            with self._lock:
                self._short.append((result.config, result.message))

    def _dominated(self, config: Config) -> str | None:
        with self._lock:
            short = list(self._short)
        for smaller, why in short:
            if at_least_as_large(config, smaller):
                return (f"not compiled: at least as large in every tile size and stage count as "
                        f"{smaller.to_json()}, which {why}")
        return None

    def remote_build(self) -> Any:
        """The recipe for compiling on a Ray node of the target: the compile of the local
        pool, its Triton cache entries shipped to the measuring node (`triton_shipping`)."""
        from ...measure.builder import build_one
        from ...measure.executor import RemoteBuild
        from ...measure.triton_shipping import shipped_compile

        body = functools.partial(shipped_compile, self.inner.compile_fn)
        return RemoteBuild(functools.partial(build_one, body), timeout=self.inner.timeout.initial, native=True)

    def close(self) -> None:
        self.inner.close()


def gpu_runner(kernel: Any, arg_names: Sequence[str], args: Sequence[Any], kwargs: Mapping[str, Any],
               grid: Any, configs: Sequence[Config], reference: Any, timer: Any, seed: int,
               tolerance: float | None = None, interpreted: bool = False, confirm_timer: Any = None,
               reuse: Any = None, reset_to_zero: Sequence[str] = (), early: bool = True) -> Any:
    """A GpuRunner measuring this launch's candidates in an isolated worker (on the CPU
    under TRITON_INTERPRET=1); with `reuse` (a GpuRunner), its worker takes this task.
    `early`: wrapped in `EarlyStart` (its worker starts at once, in the background: on Ray,
    where it only confirms the winner, it is then ready when the search ends); without
    it, the plain GpuRunner, whose worker starts when first used."""
    from ...measure.gpu import GpuRunner, GpuTask

    ref = kernel_ref(kernel)
    zero = [i for i, n in enumerate(arg_names[:len(args)]) if n in reset_to_zero]
    described = describe(args, zero)
    if ref is None or described is None:
        raise ValueError("this launch cannot be measured in an isolated worker")
    task_reference = functools.partial(call_reference, reference) if reference is not None else None
    launch = functools.partial(launch_jit, ref, grids_for(grid, arg_names, args, kwargs, configs), dict(kwargs))
    devices, device = None, "cpu"
    if not interpreted:
        import torch

        index, visible = torch.cuda.current_device(), os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is not None and index != 0:
            raise ValueError("isolated measurement on a device other than the first visible one")
        devices, device = ([index] if visible is None else None), "cuda"
    task = GpuTask(launch, tuple(described), reference=task_reference, seed=seed, device=device,
                   timer=timer, rtol=tolerance, atol=tolerance, name=ref, infer_roles=True,
                   arg_names=tuple(arg_names[:len(args)]))
    if reuse is not None and callable(getattr(reuse, "set_task", None)):
        reuse.set_task(task)
        return EarlyStart(reuse, confirm_timer)
    env = {"TRITON_INTERPRET": "1"} if interpreted else {}
    runner = GpuRunner(task, devices=devices, cutoff_factor=3.0, env=env)
    return EarlyStart(runner, confirm_timer) if early else runner


class EarlyStart:
    """A GpuRunner whose worker starts (imports, CUDA context, arguments, reference) at
    once, while the compile processes start, instead of when the first build arrives.

    Builds are pulled into a queue from the moment `run` is called (so compiling starts
    then), and the inner runner sees them once its worker is ready; the inner runner is
    never called from two threads at once.
    """

    def __init__(self, inner: Any, confirm_timer: Any = None) -> None:
        self.inner = inner
        self.confirm_timer = confirm_timer
        self._ready: threading.Thread | None = None
        self._error: BaseException | None = None
        self._started = time.perf_counter()
        self.ready_seconds: float | None = None  # how long the worker took to be ready for the task
        slots, prepare = getattr(inner, "_slots", None), getattr(inner, "_ensure_ready", None)
        if slots and callable(prepare):  # only the first worker: it also confirms winners
            self._ready = threading.Thread(target=self._prepare, args=(prepare, slots[0]), daemon=True)
            self._ready.start()

    def _prepare(self, prepare: Callable[[Any], None], slot: Any) -> None:
        try:
            prepare(slot)
            self.ready_seconds = round(time.perf_counter() - self._started, 3)
        except BaseException as exc:  # noqa: BLE001 - the inner runner reports it on first use
            self._error = exc

    def _wait(self) -> None:
        if self._ready is not None:
            self._ready.join()
            self._ready = None

    def run(self, builds: Iterable[Any]) -> Iterator[Any]:
        pulled: queue.Queue[Any] = queue.Queue()
        done = object()

        def pull() -> None:
            try:
                for b in builds:
                    pulled.put(b)
            finally:
                pulled.put(done)

        threading.Thread(target=pull, daemon=True).start()
        self._wait()

        def drain() -> Iterator[Any]:
            while (b := pulled.get()) is not done:
                yield b

        yield from self.inner.run(drain())

    @property
    def check_note(self) -> str:
        return str(getattr(self.inner, "check_note", "") or "")

    def remote_runner(self) -> Any:
        return self.inner.remote_runner()

    def confirm(self, results: Sequence[Any], **kw: Any) -> Any:
        self._wait()
        if self.confirm_timer is not None:
            kw.setdefault("timer", self.confirm_timer)
        return self.inner.confirm(results, **kw)

    def close(self) -> None:
        self._wait()
        self.inner.close()
