"""`@tensortune.autotune`: a drop-in for `triton.autotune` that tunes faster, remembers
its results across processes, and never crashes on a bad configuration.

Switching is one line: `@triton.autotune(configs=..., key=...)` becomes
`@tensortune.autotune(configs=..., key=...)`. The tensortune form searches a space
instead of a list:

    @tensortune.autotune(
        space=tt.Space({"BLOCK_M": [32, 64, 128], "BLOCK_N": [64, 128], "num_warps": [4, 8]}),
        key=["M", "N", "K"], bucket="pow2", budget=32)
    @triton.jit
    def matmul_kernel(...): ...

See docs/triton.md for every option.

Example:
    >>> import triton, triton.language as tl
    >>> @autotune(configs=[triton.Config({"BLOCK": 64})], key=["n"])
    ... @triton.jit
    ... def k(x_ptr, n, BLOCK: tl.constexpr):
    ...     pass
    >>> k.keys
    ['n']
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .keys import POLICIES, TuningKey, pow2, round_up
from .kernel import AutotunedKernel, Decision
from .options import AutotuneOptions
from .timing import DoBenchTimer
from .tuning import TuningFailed


def autotune(configs: Sequence[Any] | None = None, key: Sequence[str] = (),
             prune_configs_by: Mapping[str, Any] | None = None, reset_to_zero: Sequence[str] | None = None,
             restore_value: Sequence[str] | None = None, pre_hook: Callable[..., Any] | None = None,
             post_hook: Callable[..., Any] | None = None, warmup: float | None = None, rep: float | None = None,
             use_cuda_graph: bool = False, do_bench: Callable[..., Any] | None = None,
             cache_results: bool = False, *, space: Any = None, strategy: Any = "auto", budget: Any = None,
             reference: Callable[..., Any] | None = None, bucket: Any = "exact", on_new_key: str = "tune",
             recheck_seconds: float = 30.0,
             timer: Any = None, db: Any = None, records: "str | os.PathLike[str] | Sequence[Any] | None" = None,
             settings: Any = None, tolerance: "float | Mapping[str, float] | None" = None,
             check_inputs: str = "random", distributed: str = "auto", seed: int = 0, name: str | None = None,
             progress: bool | None = None, builder: Any = None, isolate: bool | None = None,
             compile_jobs: int | None = None, warm_start: bool = True, executor: Any = None,
             ray_address: str | None = None) -> Callable[[Any], AutotunedKernel]:
    """Decorate a `@triton.jit` function so that each launch uses the best configuration
    for its key.

    Triton's arguments keep their meaning (`cache_results` is accepted and implied:
    results always go to the records database; `warmup`/`rep`/`use_cuda_graph` build a
    Triton `do_bench` as triton.autotune does). tensortune's own:

    - `space`: a `tensortune.Space` (or a dict) over meta-parameters and launch options,
      instead of `configs`; `strategy` and `budget` (trials, seconds, or a `Budget`)
      say how to search it. Lists are measured whole unless `budget` says otherwise.
    - `reference`: called like the kernel (on copies of its arguments); it writes the
      expected results into them (returning None) or returns {argument name: tensor}.
      Without it, the first configuration that runs is the reference.
    - `bucket`: "exact", "pow2", "round", a function, or {key name: policy}.
    - `on_new_key`: "tune" (now), "nearest" (answer at once with the nearest tuned
      key's configuration; `kernel.tune_pending()` tunes the new keys later), or
      "enqueue" (answer at once likewise and queue a fleet job for the key in the
      store, which `tensortune worker` processes tune; the key is looked up again at
      most every `recheck_seconds` on its launches, and the tuned configuration used
      once recorded; needs `@kernel.inputs`, see docs/triton.md).
    - `timer`/`do_bench`: how candidates are timed (default: CUDA events, cold L2).
    - `db`: a `Database` or path (default: `Settings.db_path`); `records`: JSON-lines
      files of shipped records, imported on first use.
    - `settings`: a `tensortune.Settings`; default `Settings.from_env()` on first use
      (TENSORTUNE_NEVER_TUNE=1: never measure, use records, the nearest key, or the
      first configuration).
    - `tolerance`: fraction of the largest expected magnitude, or {dtype name: fraction}.
    - `check_inputs`: "random" (float tensors refilled with random values for tuning)
      or "given" (copies of the caller's values).
    - `distributed`: "auto"/"broadcast" (rank 0 decides for all), "shared-db", "off".
    - `warm_start`: a search whose budget does not cover the space first measures the
      best configurations recorded for the nearest tuned keys of this kernel.
    - `isolate`: measure in an isolated worker process (default: on a GPU, whenever the
      launch can be described; see `isolated.py`); `compile_jobs`: processes compiling
      candidates ahead of time (default: one per core); `builder`: your own
      `tensortune.measure.Builder` instead.
    - `executor`: "ray" (or a `RayExecutor`) compiles and measures the candidates on a
      Ray cluster's nodes of this kernel's target, each GPU an actor with its isolated
      worker (`ray_address`: the cluster; docs/distributed.md); the winner is confirmed
      here.
    """
    options = _options(configs, key, prune_configs_by, reset_to_zero, restore_value, pre_hook, post_hook, warmup,
                       rep, use_cuda_graph, do_bench, dict(
                           space=space, budget=budget, records=records, strategy=strategy, reference=reference,
                           bucket=bucket, on_new_key=on_new_key, recheck_seconds=recheck_seconds, timer=timer, db=db,
                           settings=settings,
                           tolerance=tolerance, check_inputs=check_inputs, distributed=distributed, seed=seed,
                           name=name, progress=progress, builder=builder, isolate=isolate,
                           compile_jobs=compile_jobs, warm_start=warm_start, executor=executor,
                           ray_address=ray_address))

    def decorator(fn: Any) -> AutotunedKernel:
        if not callable(getattr(fn, "run", None)):
            raise TypeError(f"@tensortune.autotune goes on a @triton.jit function (above it); got {fn!r}")
        return AutotunedKernel(fn, options)

    return decorator


class Autotuner(AutotunedKernel):
    """`triton.runtime.Autotuner`'s constructor, for code that builds an autotuner directly
    (or subclasses it): the same positional and keyword arguments, tensortune underneath.

    Example:
        >>> import triton, triton.language as tl
        >>> @triton.jit
        ... def k(x_ptr, n, BLOCK: tl.constexpr):
        ...     pass
        >>> Autotuner(k, k.arg_names, [triton.Config({"BLOCK": 64})], ["n"], None, None).keys
        ['n']
    """

    def __init__(self, fn: Any, arg_names: Sequence[str], configs: Sequence[Any] | None, key: Sequence[str],
                 reset_to_zero: Sequence[str] | None, restore_value: Sequence[str] | None,
                 pre_hook: Callable[..., Any] | None = None, post_hook: Callable[..., Any] | None = None,
                 prune_configs_by: Mapping[str, Any] | None = None, warmup: float | None = None,
                 rep: float | None = None, use_cuda_graph: bool = False, do_bench: Callable[..., Any] | None = None,
                 cache_results: bool = False, **tensortune_options: Any) -> None:
        options = _options(configs or None, key, prune_configs_by, reset_to_zero, restore_value, pre_hook,
                           post_hook, warmup, rep, use_cuda_graph, do_bench, tensortune_options)
        super().__init__(fn, options, arg_names=arg_names)


def _options(configs: Any, key: Sequence[str], prune_configs_by: Any, reset_to_zero: Any, restore_value: Any,
             pre_hook: Any, post_hook: Any, warmup: Any, rep: Any, use_cuda_graph: bool, do_bench: Any,
             rest: dict[str, Any]) -> AutotuneOptions:
    if warmup is not None or rep is not None or use_cuda_graph:
        if do_bench is not None or rest.get("timer") is not None:
            raise ValueError("warmup/rep/use_cuda_graph cannot be combined with do_bench= or timer=")
        do_bench = _legacy_do_bench(warmup, rep, use_cuda_graph)
    budget, records = rest.pop("budget", None), rest.pop("records", None)
    return AutotuneOptions.make(configs, key, space=rest.pop("space", None), budget=budget, records=records,
                                reset_to_zero=reset_to_zero, restore_value=restore_value,
                                prune_configs_by=prune_configs_by, pre_hook=pre_hook, post_hook=post_hook,
                                do_bench=do_bench, **rest)


def _legacy_do_bench(warmup: float | None, rep: float | None, use_cuda_graph: bool) -> Callable[..., Any]:
    import triton.testing

    if use_cuda_graph:
        return lambda fn, quantiles: triton.testing.do_bench_cudagraph(
            fn, rep=rep if rep is not None else 100, quantiles=quantiles)
    return lambda fn, quantiles: triton.testing.do_bench(
        fn, warmup=warmup if warmup is not None else 25, rep=rep if rep is not None else 100, quantiles=quantiles)


__all__ = ["POLICIES", "AutotuneOptions", "AutotunedKernel", "Autotuner", "Decision", "DoBenchTimer", "TuningFailed",
           "TuningKey", "autotune", "pow2", "round_up"]
