"""The autotuned kernel: a fast dispatch path over decisions made once per key.

`kernel[grid](*args)` computes the launch's raw key (key-argument values and tensor
dtypes) and looks it up in a dict of decisions; a hit launches the `@triton.jit`
function with the decided configuration at once (no hashing of large objects, no
database). A miss takes the slow path, once per key: bucket the key, then in order
use the key's settled record, or (never-tune mode) the best recorded / nearest /
first configuration, or (on_new_key="nearest") the nearest tuned key's configuration
while the key waits in `kernel.pending`, or (on_new_key="enqueue") the same answer while
a fleet job tunes the key (its launches take the slow path, which looks the key up in
the store again now and then, until the tuned configuration is there; enqueue.py), or
tune it now.

Example (with TRITON_INTERPRET=1; see docs/triton.md):
    >>> import triton, triton.language as tl, tensortune as tt
    >>> @tt.autotune(configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})], key=["n"])
    ... @triton.jit
    ... def add_one(x_ptr, n, BLOCK: tl.constexpr):
    ...     offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ...     tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from triton.runtime.jit import KernelInterface

from ...db import Database, DatabaseError, Target, Workload, import_jsonl
from ...settings import Settings
from ...space import Config, Space
from . import compat, enqueue, workers
from .arguments import ArgSet, is_tensor, underlying
from .configs import (config_of_triton, enumerate_space, launch_kwargs, space_of_configs,
                      space_of_triton_configs, triton_of_config)
from .keys import KeyMaker, TuningKey
from .options import AutotuneOptions
from .records import nearest_config, recorded_config, settled_config
from .runner import NO_GRID, Candidate, Hooks, LaunchRunner
from .source import base_function, kernel_name, kernel_source
from .target import current_target
from .timing import confirm_timer, resolve_timer
from .tuning import KeyTuning, default_budget, tune_key


@dataclass(frozen=True)
class Decision:
    """The configuration a key launches with, and where it came from."""

    key: TuningKey
    config: Config
    source: str  # tuned | recorded | nearest | default | only | agreed
    kwargs: Mapping[str, Any]
    pre_hook: Callable[..., Any] | None = None
    triton_config: Any = None  # the same configuration as a triton.Config (the listed object itself)


@dataclass(frozen=True)
class _Candidates:
    space: Space
    by_config: Mapping[Config, Any]  # the triton.Config of each configuration (list form)
    default: Config  # the first configuration: what never-tune mode falls back to

    def triton_config(self, config: Config) -> Any:
        tc = self.by_config.get(config)
        return tc if tc is not None else triton_of_config(config)

    def meta_of(self, config: Config) -> dict[str, Any]:
        """The keyword arguments that launch `config` (a listed triton.Config's own all_kwargs())."""
        tc = self.by_config.get(config)
        return tc.all_kwargs() if tc is not None else launch_kwargs(config)


@dataclass
class _Context:
    """What the slow path needs, made on the first miss (never at import time)."""

    settings: Settings
    db: Database
    target: Target
    timer: Any


class AutotunedKernel(KernelInterface):
    """A `@triton.jit` function wrapped by `@tensortune.autotune`."""

    def __init__(self, fn: Any, options: AutotuneOptions, arg_names: Sequence[str] | None = None) -> None:
        self.fn = fn
        self.base_fn = base_function(fn)
        if arg_names is None:
            arg_names = getattr(fn, "arg_names", None) or \
                self.base_fn.__code__.co_varnames[:self.base_fn.__code__.co_argcount]
        self.arg_names = list(arg_names)
        self.options = options
        self.keys = list(options.key)
        self.configs = list(options.configs) if options.configs is not None else None
        for param, names in (("reset_to_zero", options.reset_to_zero), ("restore_value", options.restore_value)):
            unknown = [n for n in names if n not in self.arg_names]
            if unknown:
                raise ValueError(f"{param} names {unknown} are not arguments of the kernel; "
                                 f"its arguments are {self.arg_names}")
        self._keys = KeyMaker(self.arg_names, options.key, options.bucket)
        self._tuned = set(options.space.names) if options.space is not None else \
            {n for tc in options.configs or () for n in tc.kwargs}
        self._raw = self._keys.raw
        self._decisions: dict[tuple[Any, ...], Decision] = {}
        self._by_key: dict[TuningKey, Decision] = {}
        self._lock = threading.RLock()
        self._context: _Context | None = None
        self._forced_context: _Context | None = None  # inside enqueue.recording_into (a fleet worker)
        self._waiting: dict[TuningKey, enqueue.Waiting] = {}  # on_new_key="enqueue": keys a fleet job tunes
        self._source: str | None = None
        self.name = options.name or kernel_name(fn)
        self.short_name = getattr(self.base_fn, "__name__", self.name)
        self.interpreted = _is_interpreted(fn) or _interpreter_on()
        self._run = _one_at_a_time(fn.run) if self.interpreted else fn.run
        self.tunings: dict[TuningKey, KeyTuning] = {}
        self.pending: dict[TuningKey, tuple[Any, tuple[Any, ...], dict[str, Any]]] = {}
        self.best_config: Any = None  # the triton.Config of the latest decision, as in Triton
        self.decision: Decision | None = None  # the latest decision (its `.config` is tensortune's)
        self.cache: dict[tuple[Any, ...], Any] = {}  # Triton's key -> triton.Config, as triton.autotune's
        self.configs_timings: dict[Any, Any] | None = None  # of the latest key tuned or read from records
        self.bench_time: float | None = None  # seconds the latest key's tuning took
        self.make_inputs: Callable[..., Any] | None = None
        # one entry per launch signature first seen (the slow path), and again when a key a
        # fleet job tuned is picked up
        self.log: list[Decision] = []
        self._executor: Any = None  # the executor opened for `executor="ray"` (shared by the process's kernels)
        _KERNELS.add(self)

    def inputs(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Register `fn(**shape) -> (grid, args[, kwargs])`, which makes fresh arguments for
        a shape, so `tensortune triton tune` can tune this kernel from shapes alone."""
        if self.options.on_new_key == "enqueue":
            enqueue.check_inputs_function(fn, self.arg_names, self._tuned, self.name)
        self.make_inputs = fn
        return fn

    # ---- the fast path ---------------------------------------------------------------
    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        """`kernel[grid](*args)`: the dispatch path, kept in closure locals for speed."""
        decisions, by_arity, run, slow = self._decisions, self._keys._by_arity, self._run, self.run

        def launch(*args: Any, **kwargs: Any) -> Any:
            if not kwargs:
                raw = by_arity.get(len(args))
                if raw is not None:
                    d = decisions.get(raw(args))
                    if d is not None and d.pre_hook is None:
                        return run(*args, grid=grid, warmup=False, **d.kwargs)
            return slow(*args, grid=grid, warmup=False, **kwargs)

        return launch

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Launch with the key's configuration (deciding it first if new). As in Triton,
        `grid` and `warmup` are passed on only when given."""
        grid = kwargs.pop("grid", NO_GRID)
        launch = {} if grid is NO_GRID else {"grid": grid, "warmup": kwargs.pop("warmup", False)}
        called = (args, kwargs)
        args, kwargs = self._bind(args, kwargs)
        d = self._decisions.get(self._raw(args, kwargs))
        if d is None:
            d = self._decide(args, kwargs, grid, called)
        if d.pre_hook is not None:
            d.pre_hook({**dict(zip(self.arg_names, args)), **kwargs, **d.kwargs})
        return self._run(*args, **launch, **kwargs, **d.kwargs)

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Keyword arguments that are the kernel's next arguments become positional, so a
        launch by keywords has the same key, isolation and records as a positional one."""
        if not kwargs:
            return args, kwargs
        bound, rest = list(args), dict(kwargs)
        for name in self.arg_names[len(args):]:
            if name not in rest or name in self._tuned:  # a tuned name passed is a conflict, reported later
                break
            bound.append(rest.pop(name))
        return tuple(bound), rest

    # ---- the slow path, once per key ----------------------------------------------------
    @property
    def source(self) -> str:
        """The kernel's source with its jit helpers' (what the records' source hash covers)."""
        if self._source is None:
            self._source = kernel_source(self.fn)
        return self._source

    def context(self) -> _Context:
        forced = enqueue.forced_store()
        if forced is not None:  # a fleet worker's triton job: its store, whatever db= says
            if self._forced_context is None or self._forced_context.db is not forced:
                o = self.options
                self._forced_context = _Context(o.settings or Settings.from_env(), forced,
                                                current_target(self.interpreted),
                                                resolve_timer(o.timer, o.do_bench, self.interpreted))
            return self._forced_context
        if self._context is None:
            o = self.options
            settings = o.settings or Settings.from_env()
            db = o.db if isinstance(o.db, Database) else Database(o.db if o.db is not None else settings.db_path)
            for path in o.records:
                import_jsonl(db, path)
            timer = resolve_timer(o.timer, o.do_bench, self.interpreted)
            self._context = _Context(settings, db, current_target(self.interpreted), timer)
        return self._context

    def _decide(self, args: tuple[Any, ...], kwargs: dict[str, Any], grid: Any,
                called: tuple[tuple[Any, ...], dict[str, Any]]) -> Decision:
        raw = self._raw(args, kwargs)
        with self._lock:
            d = self._decisions.get(raw)
            if d is None:
                key = self._keys.tuning_key(raw)
                d = self._by_key.get(key)
                if d is None:
                    d = self._decide_key(key, args, kwargs, grid, called)
                    self._by_key[key] = d
                waiting = self._waiting.get(key)
                if waiting is not None and waiting.due(self.options.recheck_seconds):
                    d = self._look_again(key, waiting, d, args, kwargs)
                if key not in self._waiting:
                    self._decisions[raw] = d  # the fast path from now on
                    self.log.append(d)
                elif raw not in waiting.raws:  # type: ignore[union-attr]
                    waiting.raws.add(raw)  # type: ignore[union-attr]
                    self.log.append(d)
            self.best_config, self.decision = d.triton_config, d
            return d

    def _look_again(self, key: TuningKey, waiting: enqueue.Waiting, d: Decision, args: tuple[Any, ...],
                    kwargs: dict[str, Any]) -> Decision:
        """A key a fleet job tunes, looked up in the store again: its tuned configuration
        once recorded; the same answer while the job is to come; a warning, and the same
        answer for good, when the job ended without one."""
        ctx = self.context()
        try:
            config, why = waiting.look_up(ctx.db, ctx.target)
        except DatabaseError as exc:
            warnings.warn(f"{self.name}: cannot look up the key {key.as_dict()} in {ctx.db.where} ({exc}); "
                          f"trying again in {self.options.recheck_seconds:g}s", RuntimeWarning, stacklevel=5)
            return d
        if config is None and why is None:
            return d
        del self._waiting[key]
        if config is None:
            warnings.warn(f"{self.name}: the key {key.as_dict()} was not tuned ({why}); its launches keep "
                          f"{d.config.to_json()} ({d.source})", RuntimeWarning, stacklevel=5)
            return d
        cands = self._space_for(args, kwargs)
        d = self._decision(key, config, "recorded", cands)
        self._by_key[key] = d
        self.cache[compat.triton_key(self.keys, {**dict(zip(self.arg_names, args)), **kwargs},
                                     self.arg_names)] = d.triton_config
        return d

    def _space_for(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> "_Candidates":
        """The candidates of this launch, after prune_configs_by (which sees the arguments as
        they were passed: positional ones by name, then the keywords)."""
        o = self.options
        if o.configs is not None:
            listed = list(o.configs)
            if len(listed) > 1:
                listed = _prune(listed, o.prune_configs_by, dict(zip(self.arg_names, args)), kwargs)
            space, by_config = space_of_triton_configs(listed)
            return _Candidates(space, by_config, next(iter(by_config)))
        assert o.space is not None
        if not o.prune_configs_by:
            return _Candidates(o.space, {}, next(iter(o.space)))
        as_triton = [triton_of_config(c) for c in enumerate_space(o.space)]
        kept = _prune(as_triton, o.prune_configs_by, dict(zip(self.arg_names, args)), kwargs)
        space = space_of_configs([Config({k: v for k, v in config_of_triton(tc).items() if k in o.space.names})
                                  for tc in kept])
        return _Candidates(space, {}, next(iter(space)))

    def _decide_key(self, key: TuningKey, args: tuple[Any, ...], kwargs: dict[str, Any], grid: Any,
                    called: tuple[tuple[Any, ...], dict[str, Any]]) -> Decision:
        cands = self._space_for(*called)
        space, default = cands.space, cands.default
        clash = sorted(set(kwargs) & set(space.names))
        if clash:
            raise ValueError(f"conflicting meta-parameters: {', '.join(clash)} are tuned and also passed "
                             f"to {self.name}; do not pass tuned parameters")
        several = self.configs is None or len(self.configs) > 1
        triton_key = compat.triton_key(self.keys, {**dict(zip(self.arg_names, args)), **kwargs}, self.arg_names)
        if space.size_is_exact and space.size == 1:
            d = self._decision(key, default, "only", cands)
            if several:  # pruned to one: Triton caches it, measures nothing and tells no listener
                self.cache[triton_key] = d.triton_config
            return d
        ctx = self.context()
        workload = Workload.make(self.name, self.source, key.as_dict())

        def decide() -> tuple[Config, str]:
            return self._decide_locally(ctx, key, workload, cands, args, kwargs, grid)

        from .distributed import agree

        config, source = agree(decide, self.options.distributed)
        if source == "agreed" and self.options.on_new_key == "enqueue" and enqueue.forced_store() is None \
                and settled_config(ctx.db, workload, ctx.target, space) is None:
            # rank 0 queued the key; this rank looks for the tuned configuration too
            self._waiting[key] = enqueue.Waiting(workload, space, None,
                                                 time.monotonic() + self.options.recheck_seconds)
        d = self._decision(key, config, source, cands)
        self.cache[triton_key] = d.triton_config
        if source == "tuned":
            tuning = self.tunings[key]
            returned = getattr(ctx.timer, "returned", None)
            self.configs_timings = compat.configs_timings(tuning.result.history, cands.triton_config, returned)
            self.bench_time = tuning.final.extra.get("tuning_seconds")
            self._reset_after_tuning(args, kwargs, d)
            compat.report(self, triton_key, d.triton_config, self.configs_timings, self.bench_time, cache_hit=False)
        elif source == "recorded":
            results = [r.to_result() for r in ctx.db.measured_configs(workload, ctx.target).values()
                       if r.config in space]
            self.configs_timings = compat.configs_timings(results, cands.triton_config)
            compat.report(self, triton_key, d.triton_config, self.configs_timings, None, cache_hit=True)
        return d

    def _reset_after_tuning(self, args: tuple[Any, ...], kwargs: dict[str, Any], d: Decision) -> None:
        """As Triton does after benchmarking: the pre_hook once more, reset only, on the
        caller's arguments (the default hook zeroes the reset_to_zero arguments)."""
        o = self.options
        full = {**dict(zip(self.arg_names, args)), **kwargs, **d.kwargs}
        if o.pre_hook is not None:
            o.pre_hook(full, reset_only=True)
            return
        for name in o.reset_to_zero:
            if underlying(full.get(name)) is not None:
                full[name].zero_()

    def _decide_locally(self, ctx: _Context, key: TuningKey, workload: Workload, cands: "_Candidates",
                        args: tuple[Any, ...], kwargs: dict[str, Any], grid: Any) -> tuple[Config, str]:
        space, default = cands.space, cands.default
        settled = settled_config(ctx.db, workload, ctx.target, space)
        if settled is not None:
            return settled, "recorded"
        worker = enqueue.forced_store() is not None  # a fleet worker tunes what it meets
        if self.options.on_new_key == "enqueue" and not worker:
            return self._enqueue(ctx, key, workload, cands, args, kwargs)
        if ctx.settings.never_tune:
            recorded = recorded_config(ctx.db, workload, ctx.target, space)
            if recorded is not None:
                return recorded, "recorded"
            near = nearest_config(ctx.db, workload, ctx.target, key, space)
            return (near[0], "nearest") if near else (default, "default")
        if self.options.on_new_key == "nearest" and not worker:
            near = nearest_config(ctx.db, workload, ctx.target, key, space)
            if near is not None:
                self.pending[key] = (grid, *_describe(args, kwargs))
                return near[0], "nearest"
        return self._tune(key, workload, cands, args, kwargs, grid).config, "tuned"

    def _enqueue(self, ctx: _Context, key: TuningKey, workload: Workload, cands: "_Candidates",
                 args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Config, str]:
        """on_new_key="enqueue": the key's best record so far, the nearest tuned key's
        configuration or the first one, now; a fleet job for the key on the store's queue."""
        spec = enqueue.job_spec(self, key, args, kwargs)  # a ValueError naming what is missing
        try:
            job_id: int | None = enqueue.put_on_queue(ctx.db, spec, enqueue.job_budget(self.options.budget))
        except DatabaseError as exc:
            warnings.warn(f"{self.name}: cannot queue the key {key.as_dict()} for tuning in {ctx.db.where} ({exc}); "
                          f"looking for its records now and then", RuntimeWarning, stacklevel=6)
            job_id = None
        self._waiting[key] = enqueue.Waiting(workload, cands.space, job_id,
                                             time.monotonic() + self.options.recheck_seconds)
        recorded = recorded_config(ctx.db, workload, ctx.target, cands.space)
        if recorded is not None:
            return recorded, "recorded"
        near = nearest_config(ctx.db, workload, ctx.target, key, cands.space)
        return (near[0], "nearest") if near else (cands.default, "default")

    def _tune(self, key: TuningKey, workload: Workload, cands: "_Candidates", args: tuple[Any, ...],
              kwargs: dict[str, Any], grid: Any, budget: Any = None, strategy: Any = None) -> KeyTuning:
        o, ctx = self.options, self.context()
        space = cands.space
        size = space.size if space.size_is_exact else 10**9
        budget = budget or o.budget or default_budget(size, o.listed)
        progress = ctx.settings.progress and not self.interpreted if o.progress is None else o.progress
        strategy = self._strategy(strategy or o.strategy, key, workload, space, budget)
        executor = self.executor()
        with workers.lease() if executor is None else contextlib.nullcontext(None) as shared:
            runner, builder = self._measurement(cands, args, kwargs, grid, shared, remote=executor is not None)
            try:
                result = tune_key(space, runner, workload=workload, target=ctx.target, db=ctx.db, budget=budget,
                                  strategy=strategy, seed=o.seed, builder=builder, progress=progress,
                                  description=f"{self.short_name} {key.as_dict()}",
                                  confirm=o.do_bench is None, executor=executor)
            finally:  # workers of their own exit in the background: nobody waits for their teardown
                kept = shared.values() if shared is not None else ()
                parts = [p for p in (runner, builder) if p is not o.builder and callable(getattr(p, "close", None))
                         and not any(p is k for k in kept)]
                if parts:
                    threading.Thread(target=_close_all, args=(parts,), daemon=True).start()
        self.tunings[key] = result
        return result

    def executor(self) -> Any:
        """Where candidates are measured: None (here), or the executor of `executor=`; one
        named "ray" is opened on the first tuning and kept for the process (every kernel
        tuned on the same cluster shares it, and so its measuring actors)."""
        o = self.options
        if o.executor in (None, "local"):
            return None
        if not isinstance(o.executor, str):
            return o.executor
        if self._executor is None:
            self._executor = _named_executor(o.executor, o.ray_address)
        return self._executor

    def _strategy(self, strategy: Any, key: TuningKey, workload: Workload, space: Space, budget: Any) -> Any:
        """The strategy, started from the nearest tuned keys' best configurations when the
        budget does not cover the space (`warm_start`)."""
        from ...search import create_strategy
        from .seeding import Seeded, seed_configs

        size = space.size if space.size_is_exact else math.inf
        if not self.options.warm_start or budget.trials is None or budget.trials >= size:
            return strategy
        ctx = self.context()
        seeds = seed_configs(ctx.db, workload, ctx.target, key, space, limit=max(1, budget.trials // 4))
        if not seeds:
            return strategy
        inner = create_strategy(strategy, space, seed=self.options.seed, budget=budget.trials)
        return Seeded(inner, seeds)

    def _measurement(self, cands: "_Candidates", args: tuple[Any, ...], kwargs: dict[str, Any], grid: Any,
                     shared: dict[str, Any] | None, remote: bool = False) -> tuple[Any, Any]:
        """The runner (isolated worker or this process) and builder (parallel compiles) for a
        key; with `shared`, the process's warm workers serve it (and new ones are kept there).
        `remote`: they are recipes for a cluster's nodes (isolated, started here only to
        confirm the winner)."""
        from . import isolated

        o, ctx = self.options, self.context()
        pre_hooks = {c: tc.pre_hook for c, tc in cands.by_config.items() if getattr(tc, "pre_hook", None)}
        isolate = (o.isolate if o.isolate is not None else not self.interpreted) or remote
        why = isolated.why_not_isolated(hooks_in_python=bool(pre_hooks or o.pre_hook or o.post_hook),
                                        args=args, reference=o.reference, timer=ctx.timer)
        if isolate and why is None and any(underlying(v) is not None for v in kwargs.values()):
            why = "a tensor is passed by a keyword that is not an argument of the kernel"
        if isolate and why is None and grid is NO_GRID:
            why = "the launch has no grid"
        if isolate and why is None and not (cands.space.size_is_exact and cands.space.size <= 100_000):
            why = "the space is too large to compute every candidate's grid"
        if isolate and why is None and isolated.kernel_ref(self.fn) is None:
            why = "the kernel is not defined at module level"
        if remote and why is not None:
            raise ValueError(f"executor={o.executor!r} measures in isolated workers on the cluster's nodes, but {why}")
        if o.isolate and why is not None:
            raise ValueError(f"isolate=True, but {why}")
        default_timing = o.timer is None and o.do_bench is None and not self.interpreted
        confirming = confirm_timer() if default_timing else None
        kept = shared if shared is not None else {}
        verbose = self.short_name if compat.verbose() else None
        if isolate and why is None:
            tolerance = o.tolerance if not isinstance(o.tolerance, Mapping) else None
            earlier = getattr(kept.get("runner"), "inner", None)
            runner: Any = isolated.gpu_runner(self.fn, self.arg_names, args, kwargs, grid,
                                              enumerate_space(cands.space), o.reference, ctx.timer, o.seed,
                                              tolerance, self.interpreted, confirming, reuse=earlier,
                                              reset_to_zero=o.reset_to_zero)
        else:
            pristine = ArgSet.fresh(args, kwargs, seed=o.seed, random=o.check_inputs == "random",
                                    names=self.arg_names, zero=o.reset_to_zero)
            candidate = Candidate(self._run, self.arg_names, grid, pre_hooks, cands.meta_of)
            hooks = Hooks(o.reset_to_zero, o.restore_value, o.pre_hook, o.post_hook)
            runner = LaunchRunner(candidate, pristine, ctx.timer, hooks, o.reference, o.tolerance,
                                  confirm_timer=confirming, user_timer=o.do_bench is not None, verbose=verbose)
        if o.builder is not None:
            builder = o.builder(self, cands.space, args, kwargs, grid) if callable(o.builder) else o.builder
        elif self.interpreted:
            builder = None  # nothing to compile
        else:
            by_config = isolated.compile_args_by_config(args, kwargs, self.arg_names, enumerate_space(cands.space),
                                                        pre_hooks, cands.meta_of) if pre_hooks else None
            builder = isolated.parallel_builder(self.fn, args, kwargs, o.compile_jobs, stream=True,
                                                reuse=kept.get("builder"), by_config=by_config)
            if remote and builder is None:
                raise ValueError(f"executor={o.executor!r} compiles on the cluster's nodes, but an argument of "
                                 f"{self.short_name} cannot be described for compiling elsewhere")
        if shared is not None:  # kept warm for the next key
            if isinstance(runner, isolated.EarlyStart):
                shared["runner"] = runner
            if isinstance(builder, isolated.CompileQueue):
                shared["builder"] = builder
        return runner, builder

    @contextlib.contextmanager
    def keep_workers(self) -> Iterator["AutotunedKernel"]:
        """Kept for compatibility: the compile processes and the GPU worker are kept warm for
        the whole process anyway (`workers.py`)."""
        yield self

    def _decision(self, key: TuningKey, config: Config, source: str, cands: "_Candidates") -> Decision:
        tc = cands.triton_config(config)
        return Decision(key, config, source, cands.meta_of(config), getattr(tc, "pre_hook", None), tc)

    # ---- offline tuning ----------------------------------------------------------------
    def tune(self, *args: Any, grid: Any, budget: Any = None, strategy: Any = None, force: bool = False,
             **kwargs: Any) -> Decision:
        """Tune the key of these arguments now (ahead of time), unless it is settled.

        Nothing is launched on the given tensors; candidates run on copies. With
        `force`, the search goes on from the records even for a settled key.
        """
        cands = self._space_for(args, kwargs)
        args, kwargs = self._bind(args, kwargs)
        key = self._keys.tuning_key(self._raw(args, kwargs))
        space = cands.space
        if space.size_is_exact and space.size == 1:
            d = self._decision(key, cands.default, "only", cands)
        else:
            ctx = self.context()
            workload = Workload.make(self.name, self.source, key.as_dict())
            settled = None if force else settled_config(ctx.db, workload, ctx.target, space)
            if settled is not None:
                d = self._decision(key, settled, "recorded", cands)
            else:
                from ...tuner import Budget

                tuned = self._tune(key, workload, cands, args, kwargs, grid,
                                   Budget.of(budget) if budget is not None else None, strategy)
                d = self._decision(key, tuned.config, "tuned", cands)
        with self._lock:
            self._by_key[key] = d
            for raw in [r for r, x in self._decisions.items() if x.key == key]:
                del self._decisions[raw]  # in place: launch closures hold this dict
            self.pending.pop(key, None)
            self._waiting.pop(key, None)
            self.best_config, self.decision = d.triton_config, d
        return d

    def tune_pending(self) -> list[Decision]:
        """Tune every key that was answered from its nearest neighbour (on_new_key="nearest")."""
        done = []
        for key, (grid, args, kwargs) in list(self.pending.items()):
            real_args, real_kwargs = _materialize(args), {k: _materialize((v,))[0] for k, v in kwargs.items()}
            done.append(self.tune(*real_args, grid=grid, **real_kwargs))
        return done

    def decisions(self) -> dict[TuningKey, Decision]:
        """Every key decided in this process."""
        return dict(self._by_key)

    def forget(self) -> None:
        """Drop the in-memory decisions (the database keeps its records)."""
        with self._lock:
            self._decisions.clear()
            self._by_key.clear()
            self._waiting.clear()

    def warmup(self, *args: Any, **kwargs: Any) -> list[Any]:
        """Compile every candidate for these arguments without running or tuning (as
        Triton's: `grid=` and the other keywords go to the jit function's `warmup`)."""
        cands = self._space_for(args, {k: v for k, v in kwargs.items() if k != "grid"})
        return [self.fn.warmup(*args, **kwargs, **cands.meta_of(c)) for c in enumerate_space(cands.space)]

    def __repr__(self) -> str:
        return f"AutotunedKernel({self.name}, key={self.keys})"


_EXECUTORS: dict[tuple[str, str | None], Any] = {}
_INTERPRETING = threading.Lock()


def _one_at_a_time(run: Callable[..., Any]) -> Callable[..., Any]:
    """`run` of an interpreted kernel, one launch at a time in this process: Triton's
    interpreter patches `triton.language` while a launch runs and restores it after, so
    two threads interpreting at once (several keys tuned at once) break each other."""
    def locked(*args: Any, **kwargs: Any) -> Any:
        with _INTERPRETING:
            return run(*args, **kwargs)
    return locked


_EXECUTORS_LOCK = threading.Lock()


def _named_executor(name: str, address: str | None) -> Any:
    """The process's executor of this name and cluster (opened once, closed at exit)."""
    with _EXECUTORS_LOCK:
        if (name, address) not in _EXECUTORS:
            import atexit

            from ...measure import make_executor
            executor = make_executor(name, address)
            atexit.register(executor.close)
            _EXECUTORS[(name, address)] = executor
        return _EXECUTORS[(name, address)]


def _close_all(parts: list[Any]) -> None:
    for part in parts:
        try:
            part.close()
        except Exception:  # noqa: BLE001 - a worker that will not close is killed at exit
            pass


_KERNELS: "weakref.WeakSet[AutotunedKernel]" = weakref.WeakSet()


def all_kernels() -> list[AutotunedKernel]:
    """Every autotuned kernel alive in this process (for offline tuning and export)."""
    return list(_KERNELS)


def _prune(configs: list[Any], prune: Mapping[str, Any] | None, nargs: dict[str, Any],
           kwargs: dict[str, Any]) -> list[Any]:
    """Apply triton.autotune's prune_configs_by: early_config_prune, then perf_model top_k."""
    if not prune:
        return configs
    early, model, top_k = prune.get("early_config_prune"), prune.get("perf_model"), prune.get("top_k", 1.0)
    if early is not None:
        configs = list(early(configs, nargs, **kwargs))
        if not configs:
            raise compat.AutotunerError(compat.NO_CONFIGS_LEFT)
    if model is not None:
        if isinstance(top_k, float) and top_k <= 1.0:
            top_k = max(1, int(len(configs) * top_k))
        elif not isinstance(top_k, int):
            raise TypeError("prune_configs_by's top_k must be a float <= 1.0 or an int")
        if len(configs) > top_k:
            est = {i: model(**nargs, **kwargs, **c.all_kwargs()) for i, c in enumerate(configs)}
            configs = [configs[i] for i in sorted(est, key=est.__getitem__)[:top_k]]
    return configs


def _interpreter_on() -> bool:
    """Triton's interpreter switch (TRITON_INTERPRET=1): also kernels that are not jit functions
    (a stub with a `run` method) then run on the CPU."""
    try:
        from triton import knobs

        return bool(knobs.runtime.interpret)
    except (ImportError, AttributeError):
        import os

        return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _is_interpreted(fn: Any) -> bool:
    seen = 0
    while fn is not None and seen < 16:
        if type(fn).__name__ == "InterpretedFunction":
            return True
        fn = getattr(fn, "fn", None)
        seen += 1
    return False


@dataclass(frozen=True)
class _TensorSpec:
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: Any
    device: Any


def _describe(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Arguments kept for tuning later: float tensors by description, other tensors copied."""
    def one(x: Any) -> Any:
        if not is_tensor(x):
            return x
        if x.is_floating_point():
            return _TensorSpec(tuple(x.shape), tuple(x.stride()), x.dtype, x.device)
        return x.detach().clone()

    return tuple(one(a) for a in args), {k: one(v) for k, v in kwargs.items()}


def _materialize(values: tuple[Any, ...]) -> tuple[Any, ...]:
    import torch

    return tuple(torch.empty_strided(v.shape, v.stride, dtype=v.dtype, device=v.device)
                 if isinstance(v, _TensorSpec) else v for v in values)


__all__ = ["AutotunedKernel", "Decision", "all_kernels"]
