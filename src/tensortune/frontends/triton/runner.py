"""Run and time Triton candidates in this process, each checked against a reference.

For every candidate the runner (1) restores the check copies of the arguments from the
pristine set and runs the candidate once on them, (2) compares every tensor argument
with the reference's (the `reference=` function's result, or else the first candidate
that ran), and (3) times it on the work copies. Any exception, a mismatch, or a timer
failure becomes that candidate's failed result; the others go on.

Hooks follow `triton.autotune`: `reset_to_zero` arguments are zeroed and
`restore_value` arguments restored before every timed run (outside the timed window
when the timer takes `setup=`); a user's `pre_hook`/`post_hook` run around every run;
a `triton.Config`'s own `pre_hook` runs before each launch.

Example (see tests/test_triton_autotune.py for runs under TRITON_INTERPRET=1):
    >>> Launch.__slots__
    ('config', 'run')
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...measure import BuildResult, CandidateError, ErrorKind, MeasureResult, WrongResult, classify_exception
from ...measure.runner import failed_build
from ...space import Config
from .arguments import ArgSet, compare
from .configs import launch_kwargs
from .timing import accepts_keyword


class Launch:
    """One launch of one candidate; the callable handed to timers (`.config` for fakes)."""

    __slots__ = ("config", "run")

    def __init__(self, config: Config, run: Callable[[], object]) -> None:
        self.config = config
        self.run = run

    def __call__(self) -> object:
        return self.run()


@dataclass
class Hooks:
    """The decorator's hook options, applied to one argument set."""

    reset_to_zero: tuple[str, ...] = ()
    restore_value: tuple[str, ...] = ()
    pre_hook: Callable[..., Any] | None = None
    post_hook: Callable[..., Any] | None = None

    @property
    def user_defined(self) -> bool:
        return self.pre_hook is not None or self.post_hook is not None

    def reset(self, nargs: Mapping[str, Any]) -> None:
        """Before a check run: zero what must start at zero (a user's pre_hook, reset only)."""
        if self.pre_hook is not None:
            self.pre_hook(dict(nargs), reset_only=True)
            return
        for name in self.reset_to_zero:
            if nargs.get(name) is not None:
                nargs[name].zero_()


@dataclass
class Candidate:
    """Everything needed to launch the kernel on one argument set."""

    run: Callable[..., Any]  # the wrapped kernel's `run(*args, grid=, warmup=, **kwargs)`
    arg_names: Sequence[str]
    grid: Any
    pre_hooks: Mapping[Config, Callable[..., Any]] = field(default_factory=dict)  # triton.Config.pre_hook

    def launch(self, config: Config, argset: ArgSet) -> Callable[[], object]:
        meta = launch_kwargs(config)
        args, kwargs, grid, run = argset.args, {**argset.kwargs, **meta}, self.grid, self.run
        hook = self.pre_hooks.get(config)
        if hook is None:
            return lambda: run(*args, grid=grid, warmup=False, **kwargs)
        nargs = {**argset.named(self.arg_names), **meta}

        def with_hook() -> object:
            hook(nargs)
            return run(*args, grid=grid, warmup=False, **kwargs)

        return with_hook


class LaunchRunner:
    """The in-process runner for one tuning key (implements `tensortune.measure.Runner`)."""

    def __init__(self, candidate: Candidate, pristine: ArgSet, timer: Any, hooks: Hooks,
                 reference: Callable[..., Any] | None = None,
                 tolerance: "float | Mapping[str, float] | None" = None,
                 cutoff_factor: float | None = 3.0, confirm_timer: Any = None) -> None:
        self.candidate = candidate
        self.pristine = pristine
        self.work = pristine.clone()
        self.timer = timer
        self.hooks = hooks
        self.reference = reference
        self.tolerance = tolerance
        self.cutoff_factor = cutoff_factor
        self.confirm_timer = confirm_timer
        self.expected: dict[str, Any] | None = None
        self.reference_source = "reference function" if reference else "first configuration that ran"
        self.best_time = float("inf")
        self._setup_kw = accepts_keyword(timer, "setup")
        self._cutoff_kw = cutoff_factor is not None and accepts_keyword(timer, "cutoff")

    # ---- correctness -----------------------------------------------------------------
    def _fresh_work(self) -> dict[str, Any]:
        self.work.restore_from(self.pristine)
        nargs = self.work.named(self.candidate.arg_names)
        self.hooks.reset(nargs)
        return nargs

    def _snapshot(self, only: Sequence[str] | None = None) -> dict[str, Any]:
        return {n: t.detach().clone() for n, t in self.work.tensors(self.candidate.arg_names)
                if only is None or n in only}

    def _expect_from_reference(self) -> None:
        assert self.reference is not None
        self._fresh_work()
        out = self.reference(*self.work.args, **self.work.kwargs)
        if out is None or any(out is a for a in (*self.work.args, *self.work.kwargs.values())):
            # wrote in place (returning None, or one of the arguments as `c.copy_(a @ b)` does)
            self.expected = self._snapshot()
        elif isinstance(out, Mapping):
            self.expected = {str(k): v.detach() for k, v in out.items()}
        else:
            raise TypeError("reference= must write its results into the arguments (returning None) "
                            f"or return a mapping of argument name to expected tensor, got {type(out).__name__}")

    def check(self, config: Config) -> None:
        """Run `config` once on fresh copies and compare; raises WrongResult on a mismatch."""
        if self.expected is None and self.reference is not None:
            self._expect_from_reference()
        self._fresh_work()
        self.candidate.launch(config, self.work)()
        _synchronize(self.work)
        if self.expected is None:
            self.expected = self._snapshot()
            return
        actual = dict(self.work.tensors(self.candidate.arg_names))
        for name, want in self.expected.items():
            if name not in actual:
                raise WrongResult(f"reference returned {name!r}, which is not a tensor argument")
            compare(name, actual[name], want, self.tolerance)

    # ---- timing ------------------------------------------------------------------------
    def _timed(self, config: Config) -> tuple[float, ...]:
        run = self.candidate.launch(config, self.work)
        nargs = self.work.named(self.candidate.arg_names)
        setup = self._setup(nargs)
        hooks = self.hooks
        if hooks.user_defined:
            full = {**nargs, **launch_kwargs(config)}
            pre, post = hooks.pre_hook, hooks.post_hook

            def with_hooks() -> object:
                if pre is not None:
                    pre(full)
                try:
                    out = run()
                except Exception as exc:
                    if post is not None:
                        post(full, exception=exc)
                    raise
                if post is not None:
                    post(full, exception=None)
                return out

            body: Callable[[], object] = with_hooks
        elif setup is not None and not self._setup_kw:
            def with_setup(prepare: Callable[[], None] = setup) -> object:
                prepare()
                return run()

            body, setup = with_setup, None
        else:
            body = run
        kw: dict[str, Any] = {}
        if setup is not None:
            kw["setup"] = setup
        if self._cutoff_kw and self.best_time < float("inf"):
            kw["cutoff"] = self.best_time * self.cutoff_factor
        return tuple(self.timer.time(Launch(config, body), **kw))

    def _setup(self, nargs: Mapping[str, Any]) -> Callable[[], None] | None:
        hooks = self.hooks
        if hooks.user_defined or not (hooks.reset_to_zero or hooks.restore_value):
            return None
        zero = [nargs[n] for n in hooks.reset_to_zero if nargs.get(n) is not None]
        saved = [(nargs[n], nargs[n].detach().clone()) for n in hooks.restore_value if nargs.get(n) is not None]

        def setup() -> None:
            for t in zero:
                t.zero_()
            for t, value in saved:
                t.copy_(value)

        return setup

    def run(self, builds: Sequence[BuildResult]) -> Iterator[MeasureResult]:
        for b in builds:
            if not b.ok:
                yield failed_build(b)
                continue
            start = time.perf_counter()
            try:
                self.check(b.config)
                times = self._timed(b.config)
                if not times:
                    raise CandidateError(ErrorKind.RUNTIME_ERROR, "the timer returned no times")
            except CandidateError as exc:
                yield MeasureResult.failed(b.config, exc.kind, str(exc), compile_seconds=b.compile_seconds)
                continue
            except Exception as exc:  # noqa: BLE001 - the candidate's failure, recorded
                yield MeasureResult.failed(b.config, classify_exception(exc), f"{type(exc).__name__}: {exc}",
                                           compile_seconds=b.compile_seconds)
                continue
            result = MeasureResult(b.config, times, compile_seconds=b.compile_seconds,
                                   run_seconds=time.perf_counter() - start,
                                   extra={"checked_against": self.reference_source})
            self.best_time = min(self.best_time, result.time)
            yield result

    def confirm(self, results: Sequence[MeasureResult], *, within: float = 0.03, rounds: int = 3,
                limit: int = 6) -> Any:
        """Re-time the results within `within` of the best interleaved (`confirm_winners`)."""
        from ...measure.confirm import Confirmation, confirm_winners, near_ties

        ties = near_ties(results, within, limit)
        if not ties:
            return None
        if len(ties) == 1:
            return Confirmation(ties[0].config, 1.0, 0.0, {ties[0].config: ties[0].time}, {}, 0)
        runs = {r.config: Launch(r.config, self.candidate.launch(r.config, self.work)) for r in ties}
        return confirm_winners(runs, self.confirm_timer or self.timer, prior={r.config: r.time for r in ties},
                               within=within, rounds=rounds)


def _synchronize(argset: ArgSet) -> None:
    for a in argset.args:
        if hasattr(a, "is_cuda") and a.is_cuda:
            import torch

            torch.cuda.synchronize(a.device)
            return
