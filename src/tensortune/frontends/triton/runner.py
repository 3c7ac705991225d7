"""Run and time Triton candidates in this process, each checked before it is timed.

For every candidate the runner (1) prepares the check copies of the arguments (outputs
poisoned, everything else restored from the pristine set; see `measure.agreement`),
(2) runs the candidate once and compares only the elements the reference wrote, and
(3) times it. The reference is the `reference=` function, or else the consensus of the
first candidates that ran (`agreement.elect`): those are held back until the election,
then released as measured or as wrong results. A kernel's failure (compile error,
exception, resources, a mismatch) becomes that candidate's failed result; an exception
raised by the user's own code (a hook, `do_bench`, a timer, the reference) propagates as
it is, as under `triton.autotune`.

Hooks are called as `triton.autotune` calls them: a `triton.Config`'s `pre_hook`, then
the decorator's `pre_hook`, the launch, and `post_hook(nargs, exception=...)`, all with
the full arguments (the configuration's meta-parameters included). Without user hooks,
`reset_to_zero` arguments are zeroed and `restore_value` arguments restored before every
timed run (outside the timed window when the timer takes `setup=`); a user's `do_bench`
gets exactly the call Triton would give it.

Example (see tests/test_triton_autotune.py for runs under TRITON_INTERPRET=1):
    >>> Launch.__slots__
    ('config', 'run')
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...measure import BuildResult, CandidateError, ErrorKind, MeasureResult, classify_exception
from ...measure import agreement as agr
from ...measure.runner import failed_build
from ...space import Config
from .arguments import ArgSet
from .configs import launch_kwargs
from .timing import accepts_keyword

NO_GRID = object()  # `run()` called without a grid, as Triton allows: the grid is not passed on


class Launch:
    """One launch of one candidate; the callable handed to timers (`.config` for fakes)."""

    __slots__ = ("config", "run")

    def __init__(self, config: Config, run: Callable[[], object]) -> None:
        self.config = config
        self.run = run

    def __call__(self) -> object:
        return self.run()


class _Blame:
    """Remembers which exception came from the kernel's launch and which from user code."""

    def __init__(self) -> None:
        self.launch: BaseException | None = None
        self.user: BaseException | None = None

    def user_code(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except BaseException as exc:
            self.user = exc
            raise

    def kernel(self, run: Callable[[], object]) -> object:
        try:
            return run()
        except BaseException as exc:
            self.launch = exc
            raise


@dataclass
class Hooks:
    """The decorator's hook options, called as `triton.autotune` calls them."""

    reset_to_zero: tuple[str, ...] = ()
    restore_value: tuple[str, ...] = ()
    pre_hook: Callable[..., Any] | None = None
    post_hook: Callable[..., Any] | None = None

    @property
    def user_defined(self) -> bool:
        return self.pre_hook is not None or self.post_hook is not None

    def call(self, run: Callable[[], object], full: dict[str, Any], config_pre_hook: Any, blame: _Blame,
             defaults: bool) -> Callable[[], object]:
        """Triton's `kernel_call`: config pre_hook, pre_hook, the launch, post_hook. With
        `defaults`, the built-in hooks of reset_to_zero/restore_value run too (as around a
        Triton benchmark); without, the caller resets the arguments itself."""
        pre, post = self.pre_hook, self.post_hook
        zero, keep = self.reset_to_zero, self.restore_value
        saved: dict[str, Any] = {}

        def default_pre() -> None:
            for n in zero:
                if full.get(n) is not None:
                    full[n].zero_()
            saved.clear()
            saved.update({n: full[n].clone() for n in keep if full.get(n) is not None})

        def default_post() -> None:
            for n, value in saved.items():
                full[n].copy_(value)
            saved.clear()

        use_default_pre = defaults and pre is None and bool(zero or keep)
        use_default_post = defaults and post is None and bool(keep)

        def kernel_call() -> object:
            if config_pre_hook is not None:
                blame.user_code(config_pre_hook, full)
            if pre is not None:
                blame.user_code(pre, full)
            elif use_default_pre:
                default_pre()
            try:
                out = blame.kernel(run)
            except BaseException as exc:
                try:
                    if post is not None:
                        blame.user_code(post, full, exception=exc)
                    elif use_default_post:
                        default_post()
                finally:
                    raise
            if post is not None:
                blame.user_code(post, full, exception=None)
            elif use_default_post:
                default_post()
            return out

        return kernel_call


@dataclass
class Candidate:
    """Everything needed to launch the kernel on one argument set."""

    run: Callable[..., Any]  # the wrapped kernel's `run(*args, grid=, warmup=, **kwargs)`
    arg_names: Sequence[str]
    grid: Any
    pre_hooks: Mapping[Config, Callable[..., Any]] = field(default_factory=dict)  # triton.Config.pre_hook
    meta_of: Callable[[Config], dict[str, Any]] = launch_kwargs  # keyword arguments of a configuration

    def launch(self, config: Config, argset: ArgSet) -> Callable[[], object]:
        """The bare launch (no hooks)."""
        args, kwargs, grid, run = argset.args, {**argset.kwargs, **self.meta_of(config)}, self.grid, self.run
        if grid is NO_GRID:
            return lambda: run(*args, **kwargs)
        return lambda: run(*args, grid=grid, warmup=False, **kwargs)

    def full_args(self, config: Config, argset: ArgSet) -> dict[str, Any]:
        return {**argset.named(self.arg_names), **self.meta_of(config)}


class LaunchRunner:
    """The in-process runner for one tuning key (implements `tensortune.measure.Runner`).

    `user_timer`: the timer is the user's (`do_bench=`, `timer=`): its exceptions propagate
    and it gets Triton's `kernel_call`; the winner is not re-timed by another timer.
    """

    def __init__(self, candidate: Candidate, pristine: ArgSet, timer: Any, hooks: Hooks,
                 reference: Callable[..., Any] | None = None,
                 tolerance: "float | Mapping[str, float] | None" = None,
                 cutoff_factor: float | None = 3.0, confirm_timer: Any = None, user_timer: bool = False,
                 verbose: str | None = None) -> None:
        self.candidate = candidate
        self.pristine = pristine
        self.work = pristine.clone()
        self.timer = timer
        self.hooks = hooks
        self.reference = reference
        self.tolerance = tolerance
        self.cutoff_factor = cutoff_factor
        self.confirm_timer = confirm_timer
        self.user_timer = user_timer
        self.verbose = verbose
        names = candidate.arg_names
        self.names = [n for n, _ in self.work.leaves(names)]
        self.leaves = [t for _, t in self.work.leaves(names)]
        self.pristine_leaves = [t for _, t in pristine.leaves(names)]
        self.roles: list[str] | None = None
        self.expected: agr.Outcome | None = None
        self.election: agr.Election | None = None
        self.check = "reference function" if reference else "consensus"
        self._pool: list[tuple[MeasureResult, agr.Outcome]] = []
        self.best_time = float("inf")
        self._setup_kw = accepts_keyword(timer, "setup")
        self._cutoff_kw = cutoff_factor is not None and accepts_keyword(timer, "cutoff")

    # ---- running one candidate ---------------------------------------------------------
    def _call(self, config: Config, blame: _Blame, defaults: bool) -> Callable[[], object]:
        c = self.candidate
        return self.hooks.call(c.launch(config, self.work), c.full_args(config, self.work),
                               c.pre_hooks.get(config), blame, defaults)

    def _sync(self) -> None:
        for t in self.leaves:
            if getattr(t, "is_cuda", False):
                import torch

                torch.cuda.synchronize(t.device)
                return

    def _expect_from_reference(self) -> None:
        """The reference function's results (and so the roles of the arguments)."""
        assert self.reference is not None
        work = self.work
        returned: list[Any] = []

        def run() -> None:
            out = self.reference(*work.args, **work.kwargs)
            if out is not None and not any(out is a for a in (*work.args, *work.kwargs.values())):
                if not isinstance(out, Mapping):
                    raise TypeError("reference= must write its results into the arguments (returning None) "
                                    "or return a mapping of argument name to expected tensor, got "
                                    f"{type(out).__name__}")
                returned.append(out)

        self.roles, self.expected = agr.infer_roles(run, self.leaves, self.pristine_leaves, self.names,
                                                    self.tolerance, self._sync)
        if returned:  # {name: expected}: those arguments are compared whole, the others never
            self.roles, self.expected = agr.named_outcome(returned[0], self.names, self.leaves)

    def _outcome(self, config: Config, blame: _Blame) -> agr.Outcome:
        """Run `config` once on prepared copies; what it computed."""
        call = self._call(config, blame, defaults=False)
        if self.roles is None:  # the first candidate to run tells the arguments' roles
            self.roles, outcome = agr.infer_roles(self._reset_then(call), self.leaves, self.pristine_leaves,
                                                  self.names, self.tolerance, self._sync)
            return outcome
        agr.prepare(self.leaves, self.pristine_leaves, self.roles)
        self._zero()
        call()
        self._sync()
        return agr.snapshot(self.leaves, self.roles)

    def _reset_then(self, call: Callable[[], object]) -> Callable[[], object]:
        def run() -> object:
            self._zero()
            return call()
        return run

    def _zero(self) -> None:
        """reset_to_zero arguments start at zero, as Triton's default hook makes them."""
        if self.hooks.pre_hook is None:
            nargs = self.work.named(self.candidate.arg_names)
            for n in self.hooks.reset_to_zero:
                if nargs.get(n) is not None:
                    nargs[n].zero_()

    # ---- timing ------------------------------------------------------------------------
    def _timed_body(self, config: Config, blame: _Blame) -> tuple[Callable[[], object], Callable[[], None] | None]:
        if self.user_timer and not self._setup_kw:  # a do_bench: exactly Triton's kernel_call
            return self._call(config, blame, defaults=True), None
        body = self._call(config, blame, defaults=False)
        setup = self._setup()
        if setup is not None and not self._setup_kw:
            def with_setup(prepare: Callable[[], None] = setup, run: Callable[[], object] = body) -> object:
                prepare()
                return run()
            return with_setup, None
        return body, setup

    def _timed(self, config: Config, blame: _Blame) -> tuple[float, ...]:
        body, setup = self._timed_body(config, blame)
        kw: dict[str, Any] = {}
        if setup is not None:
            kw["setup"] = setup
        if self._cutoff_kw and self.best_time < float("inf"):
            kw["cutoff"] = self.best_time * self.cutoff_factor
        return tuple(self.timer.time(Launch(config, body), **kw))

    def _setup(self) -> Callable[[], None] | None:
        """Resets before each timed run: reset_to_zero, restore_value and in-place arguments."""
        hooks = self.hooks
        nargs = self.work.named(self.candidate.arg_names)
        zero = [] if hooks.pre_hook is not None else [nargs[n] for n in hooks.reset_to_zero
                                                      if nargs.get(n) is not None]
        restore = [(t, p) for t, p, r in zip(self.leaves, self.pristine_leaves, self.roles or ())
                   if r == agr.INPLACE]
        restore += [(nargs[n], nargs[n].detach().clone()) for n in hooks.restore_value
                    if nargs.get(n) is not None and hooks.post_hook is None
                    and not any(nargs[n] is t for t, _ in restore)]
        if not zero and not restore:
            return None

        def setup() -> None:
            for t, value in restore:
                t.copy_(value)
            for t in zero:
                t.zero_()

        return setup

    # ---- the Runner protocol -----------------------------------------------------------
    def run(self, builds: Sequence[BuildResult]) -> Iterator[MeasureResult]:
        for b in builds:
            if not b.ok:
                yield failed_build(b)
                continue
            if self.verbose:
                print(f"Autotuning kernel {self.verbose} with config {b.config}")
            result, outcome = self._measure(b)
            if result.ok and self.expected is None and outcome is not None:
                self._pool.append((result, outcome))
                if self._pool_decided():
                    yield from self._elect()
                continue
            if result.ok:
                self.best_time = min(self.best_time, result.time)
            yield result
        if self._pool:  # the batch is over: decide with the candidates there are
            yield from self._elect()

    def _measure(self, b: BuildResult) -> tuple[MeasureResult, agr.Outcome | None]:
        start = time.perf_counter()
        blame = _Blame()
        try:
            if self.expected is None and self.reference is not None:
                self._expect_from_reference()
            outcome = self._outcome(b.config, blame)
            if self.expected is not None:
                why = agr.mismatch(outcome, self.expected, self.roles or (), self.names, self.tolerance)
                if why:
                    return MeasureResult.failed(b.config, ErrorKind.WRONG_RESULT, why,
                                                compile_seconds=b.compile_seconds), None
            times = self._timed(b.config, blame)
            if not times:
                raise CandidateError(ErrorKind.RUNTIME_ERROR, "the timer returned no times")
        except BaseException as exc:  # noqa: BLE001 - sorted below: the candidate's, or the user's
            if self._users(exc, blame):
                raise
            if isinstance(exc, CandidateError):
                return MeasureResult.failed(b.config, exc.kind, str(exc), compile_seconds=b.compile_seconds), None
            if not isinstance(exc, Exception):
                raise
            return MeasureResult.failed(b.config, classify_exception(exc), f"{type(exc).__name__}: {exc}",
                                        compile_seconds=b.compile_seconds), None
        result = MeasureResult(b.config, times, compile_seconds=b.compile_seconds,
                               run_seconds=time.perf_counter() - start, extra={"checked_against": self.check})
        return result, outcome

    def _users(self, exc: BaseException, blame: _Blame) -> bool:
        """Whether an exception came from the user's code (it then propagates as it is)."""
        if exc is blame.launch or isinstance(exc, CandidateError):
            return False
        if exc is blame.user or (self.reference is not None and self.expected is None):
            return True  # a hook, or the reference function
        # a do_bench's own exception, unless it is the device failing under the kernel
        return self.user_timer and classify_exception(exc) not in (ErrorKind.CRASHED, ErrorKind.OUT_OF_RESOURCES)

    def _pool_decided(self) -> bool:
        if len(self._pool) >= agr.POOL_LIMIT:
            return True
        if len(self._pool) < agr.POOL:
            return False
        return len(agr.elect([o for _, o in self._pool], self.roles or (), self.tolerance).members) >= 2

    def _elect(self) -> Iterator[MeasureResult]:
        pool, self._pool = self._pool, []
        election = agr.elect([o for _, o in pool], self.roles or (), self.tolerance)
        self.election, self.expected = election, election.expected
        self.check = "consensus" if election.strength == "consensus" else "weak"
        for i, (result, outcome) in enumerate(pool):
            why = None if i in election.members else agr.mismatch(
                outcome, election.expected, self.roles or (), self.names, self.tolerance)
            if why:
                yield MeasureResult.failed(result.config, ErrorKind.WRONG_RESULT,
                                           f"{why} (the reference: {election.note})",
                                           compile_seconds=result.compile_seconds)
                continue
            result = MeasureResult(result.config, result.times, compile_seconds=result.compile_seconds,
                                   run_seconds=result.run_seconds,
                                   extra={**result.extra, "checked_against": self.check})
            self.best_time = min(self.best_time, result.time)
            yield result

    @property
    def check_note(self) -> str:
        """How the candidates were checked, for the tuning's report."""
        if self.reference is not None:
            return "against the reference function"
        if self.election is None:
            return "not checked: no configuration ran"
        return f"{self.election.strength}: {self.election.note}"

    def confirm(self, results: Sequence[MeasureResult], *, within: float = 0.03, rounds: int = 3,
                limit: int = 6) -> Any:
        """Re-time the results within `within` of the best interleaved (`confirm_winners`)."""
        from ...measure.confirm import Confirmation, confirm_winners, near_ties

        ties = near_ties(results, within, limit)
        if not ties:
            return None
        if len(ties) == 1 or self.user_timer:  # a user's do_bench times each configuration once, as Triton's
            best = ties[0]
            return Confirmation(best.config, 1.0, 0.0, {best.config: best.time}, {}, 0)
        blame = _Blame()
        runs, setups = {}, {}
        for r in ties:
            body, setup = self._timed_body(r.config, blame)
            runs[r.config] = Launch(r.config, body)
            if setup is not None:
                setups[r.config] = setup
        return confirm_winners(runs, self.confirm_timer or self.timer, prior={r.config: r.time for r in ties},
                               within=within, rounds=rounds, setup=setups or None)
