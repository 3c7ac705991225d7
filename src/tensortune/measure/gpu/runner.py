"""`GpuRunner`: candidates checked and timed in one isolated worker process per GPU.

Each GPU gets a long-lived worker (`IsolatedWorker` with CUDA_VISIBLE_DEVICES set to
that GPU) that makes the task's arguments once from their descriptions. A candidate
that crashes the process, hangs past `timeout`, or leaves the CUDA context poisoned
(an illegal memory access) is recorded with its error kind; the worker is restarted
and the next candidate goes on. A mismatch with the reference is `wrong_result`, a
kernel over the shared-memory limit `out_of_resources`. Builds may be an iterator
(builds streamed from a parallel compiler are measured as they arrive), and candidates
whose artifacts report the same `binary_digest` are measured once.

Example (CPU tensors and the host clock; a Triton kernel under TRITON_INTERPRET=1 runs
the same way):
    >>> from tensortune.space import Config
    >>> from tensortune.measure import BuildResult
    >>> from tensortune.measure.cuda_timer import CudaTimer
    >>> from tensortune.measure.gpu import GpuTask, TensorArg
    >>> task = GpuTask("tensortune.measure.gpu.fakes:launch",
    ...                (TensorArg((256,)), TensorArg((256,), output=True)),
    ...                reference="tensortune.measure.gpu.fakes:reference", device="cpu",
    ...                timer=CudaTimer(clock="host", budget_seconds=0.01))
    >>> with GpuRunner(task, timeout=30) as runner:
    ...     results = list(runner.run([BuildResult(Config(fault="none")), BuildResult(Config(fault="wrong"))]))
    >>> sorted(str(r.error) for r in results)
    ['None', 'wrong_result']
"""

from __future__ import annotations

import dataclasses
import functools
import queue
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from ...space import Config
from ..confirm import Confirmation, near_ties, shorter
from ..errors import CandidateError, ErrorKind
from ..result import BuildResult, MeasureResult
from ..runner import failed_build
from ..worker import IsolatedWorker
from . import worker_side
from .task import GpuTask


class GpuTaskError(RuntimeError):
    """The task itself is broken (its arguments or reference could not be made)."""


class _Slot:
    """One device and its worker."""

    def __init__(self, device: int | None, env: Mapping[str, str], timeout: float) -> None:
        self.device = device
        full_env = dict(env)
        if device is not None:
            full_env["CUDA_VISIBLE_DEVICES"] = str(device)
        self.worker = IsolatedWorker(timeout=timeout, env=full_env)
        self.ready = False
        self.restarts = 0
        self.name = "cpu" if device is None else f"gpu{device}"


class GpuRunner:
    """Runs a `GpuTask`'s candidates on `devices` (GPU indices; None: one worker, devices as visible).

    `timeout` bounds one candidate's check and timing (a hang beyond it is a `timeout`);
    `startup_timeout` bounds starting a worker and making the arguments and reference.
    With `cutoff_factor`, a candidate whose first estimate is that many times slower than
    the best so far is not timed further (its estimate runs are its times).
    """

    def __init__(self, task: GpuTask, *, devices: Sequence[int] | None = None, timeout: float = 60.0,
                 startup_timeout: float = 300.0, env: Mapping[str, str] | None = None,
                 cutoff_factor: float | None = None) -> None:
        self.task = task
        self.timeout = timeout
        self.startup_timeout = startup_timeout
        self.cutoff_factor = cutoff_factor
        self.env = dict(env or {})
        targets: list[int | None] = list(devices) if devices else [None]
        self._slots = [_Slot(d, env or {}, timeout) for d in targets]
        self._scratch = tempfile.mkdtemp(prefix="tensortune-gpu-")
        self._best = float("inf")
        self._lock = threading.Lock()
        self._by_binary: dict[str, MeasureResult] = {}
        self.check_note = ""  # how the candidates were checked (infer_roles tasks: the election's note)
        self._elected = False

    # -- the Runner protocol -------------------------------------------------------------
    def run(self, builds: Iterable[BuildResult]) -> Iterator[MeasureResult]:
        """Yield one result per build, in the order they finish (builds may stream in)."""
        if self.task.infer_roles and self.task.reference is None and not self._elected:
            builds = iter(builds)
            yield from self._election(builds)
        yield from self._run(builds)

    def _election(self, builds: Iterator[BuildResult]) -> Iterator[MeasureResult]:
        """The first candidates, measured one by one in the first worker and held back until
        they have agreed on a reference (`agreement.elect`); then released with their verdicts."""
        from .. import agreement
        from . import inferred

        slot = self._slots[0]
        held: list[MeasureResult] = []
        pooled: list[BuildResult] = []
        for b in builds:
            if not b.ok:
                held.append(failed_build(b))
                continue
            result = self._measure(slot, b)
            if result.extra.get("worker_restarted") and pooled:  # the worker's pool died with it
                redo, pooled = pooled, []
                held = [r for r in held if r.config not in {x.config for x in redo}]
                for again in redo:
                    r = self._measure(slot, again)
                    held.append(r)
                    if r.extra.get("pooled"):
                        pooled.append(again)
            held.append(result)
            if result.extra.get("pooled"):
                pooled.append(b)
                if (len(pooled) >= agreement.POOL and result.extra.get("pool_group", 0) >= 2) \
                        or len(pooled) >= agreement.POOL_LIMIT:
                    break
        if pooled:
            self._ensure_ready(slot)
            reply = slot.worker.call(inferred.elect, self.task, self._scratch, timeout=self.startup_timeout)
            self._elected = True
            self.check_note = f"{reply['strength']}: {reply['note']}"
            for s in self._slots[1:]:
                s.ready = False  # the other workers load the agreed reference
            verdicts = reply["verdicts"]
            for i, r in enumerate(held):
                why = verdicts.get(r.config.to_json()) if r.extra.get("pooled") else None
                extra = {k: v for k, v in r.extra.items() if k not in ("pooled", "pool_group")}
                if why:
                    held[i] = MeasureResult.failed(r.config, ErrorKind.WRONG_RESULT,
                                                   f"{why} (the reference: {reply['note']})",
                                                   compile_seconds=r.compile_seconds, extra=extra)
                elif r.ok:
                    held[i] = dataclasses.replace(r, extra={**extra, "reference": reply["strength"]})
        for r in held:
            if r.ok:
                self._best = min(self._best, r.time)
            yield r

    def _run(self, builds: Iterable[BuildResult]) -> Iterator[MeasureResult]:
        work: queue.Queue[BuildResult | None] = queue.Queue()
        out: queue.Queue[Any] = queue.Queue()
        waiting: dict[str, list[BuildResult]] = {}  # binary digest -> followers of a leader in flight
        stop = threading.Event()

        def feed() -> None:
            count = 0
            try:
                for b in builds:
                    if stop.is_set():
                        break
                    count += 1
                    if not b.ok:
                        out.put(failed_build(b))
                        continue
                    digest = _binary_digest(b)
                    with self._lock:
                        if digest and digest in self._by_binary:
                            out.put(_duplicate(self._by_binary[digest], b))
                            continue
                        if digest and digest in waiting:
                            waiting[digest].append(b)
                            continue
                        if digest:
                            waiting[digest] = []
                    work.put(b)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the consumer
                out.put(exc)
            finally:
                for _ in self._slots:
                    work.put(None)
                out.put(("fed", count))

        def serve(slot: _Slot) -> None:
            while (b := work.get()) is not None:
                if stop.is_set():
                    continue
                try:
                    result = self._measure(slot, b)
                except BaseException as exc:  # noqa: BLE001 - re-raised in the consumer
                    stop.set()
                    out.put(exc)
                    continue
                digest = _binary_digest(b)
                with self._lock:
                    if result.ok:
                        self._best = min(self._best, result.time)
                    followers = waiting.pop(digest, []) if digest else []
                    if digest:
                        self._by_binary[digest] = result
                out.put(result)
                for f in followers:
                    out.put(_duplicate(result, f))

        threads = [threading.Thread(target=feed, daemon=True)]
        threads += [threading.Thread(target=serve, args=(s,), daemon=True) for s in self._slots]
        for t in threads:
            t.start()
        fed: int | None = None
        given = 0
        try:
            while fed is None or given < fed:
                item = out.get()
                if isinstance(item, tuple) and len(item) == 2 and item[0] == "fed":
                    fed = item[1]
                elif isinstance(item, BaseException):
                    raise item
                else:
                    given += 1
                    yield item
        finally:
            stop.set()
            for t in threads[1:]:
                t.join(timeout=self.timeout + 5)

    # -- one candidate -------------------------------------------------------------------
    def _ensure_ready(self, slot: _Slot) -> None:
        if slot.ready:
            return
        try:
            slot.worker.call(worker_side.prepare, self.task, self._scratch, timeout=self.startup_timeout)
        except CandidateError as exc:
            raise GpuTaskError(f"could not prepare task {self.task.name or self.task.digest} on "
                               f"{slot.name}: {exc.kind.value}: {exc}") from None
        slot.ready = True

    def _measure(self, slot: _Slot, build: BuildResult) -> MeasureResult:
        self._ensure_ready(slot)
        cutoff = self._best * self.cutoff_factor if self.cutoff_factor and self._best < float("inf") else None
        start = time.perf_counter()
        extra: dict[str, Any] = {"device": slot.name}
        digest = _binary_digest(build)
        if digest:
            extra["binary"] = digest
        try:
            outcome = slot.worker.call(worker_side.measure, self.task, build.config, self._scratch, cutoff)
        except CandidateError as exc:  # the worker died or hung: it is gone already
            slot.ready = False
            slot.restarts += 1
            extra["worker_restarted"] = True
            return MeasureResult.failed(build.config, exc.kind, str(exc), compile_seconds=build.compile_seconds,
                                        run_seconds=time.perf_counter() - start, extra=extra)
        if not outcome["healthy"]:
            slot.worker.close()
            slot.ready = False
            slot.restarts += 1
            extra["worker_restarted"] = True
        extra.update(outcome["extra"])
        seconds = time.perf_counter() - start
        if outcome["error"]:
            return MeasureResult.failed(build.config, ErrorKind(outcome["error"]), outcome["message"],
                                        compile_seconds=build.compile_seconds, run_seconds=seconds, extra=extra)
        return MeasureResult(build.config, outcome["times"], compile_seconds=build.compile_seconds,
                             run_seconds=seconds, extra=extra)

    # -- confirming the winner -----------------------------------------------------------
    def confirm(self, results: Sequence[MeasureResult], *, within: float = 0.03, rounds: int = 5,
                limit: int = 8, timer: Any = None) -> Confirmation | None:
        """Re-time the results within `within` of the best interleaved on the first device.

        Returns None when nothing succeeded; a single contender is confirmed at once.
        """
        contenders = near_ties(results, within, limit)
        if not contenders:
            return None
        if len(contenders) == 1:
            only = contenders[0]
            return Confirmation(only.config, 1.0, 0.0, {only.config: only.time}, {}, 0)
        slot = self._slots[0]
        self._ensure_ready(slot)
        timer = timer or shorter(self.task.timer, rounds)
        prior = {r.config: r.time for r in contenders}
        budget = self.timeout * max(1, rounds) * len(contenders)
        reply = slot.worker.call(worker_side.confirm, self.task, [r.config for r in contenders], prior,
                                 None, rounds, timer, timeout=budget)
        return reply["confirmation"]

    # -- elsewhere -----------------------------------------------------------------------
    def remote_runner(self) -> Any:
        """The recipe for measuring in a Ray actor that owns one GPU (`measure.executor`):
        a runner of this task with one worker, which sees the actor's GPU as Ray set its
        CUDA_VISIBLE_DEVICES; travelled builds are installed there first
        (`triton_shipping.arrive`)."""
        from ..executor import RemoteRunner
        from ..triton_shipping import arrive

        make = functools.partial(_actor_runner, self.task, self.timeout, self.startup_timeout, self.env,
                                 self.cutoff_factor)
        return RemoteRunner(make, unpack=arrive, timeout=4 * self.timeout + self.startup_timeout + 120,
                            adopt=functools.partial(_adopted, self.task), holds=functools.partial(_holds, self.task))

    # -- lifetime ------------------------------------------------------------------------
    def set_task(self, task: GpuTask) -> None:
        """Measure another task (other shapes, another kernel) with the same workers.

        Each worker makes the new task's arguments on its next candidate and frees the old.
        """
        with self._lock:
            self.task = task
            self._best = float("inf")
            self._by_binary.clear()
            self._elected = False
            self.check_note = ""
        for s in self._slots:
            s.ready = False

    def warm_up(self) -> None:
        """Start every worker and make the task's arguments and reference there now, rather
        than at the first candidate (a Ray actor does this when a run starts)."""
        for slot in self._slots:
            self._ensure_ready(slot)

    @property
    def restarts(self) -> int:
        """How many times a worker was restarted after a crash, hang or poisoned context."""
        return sum(s.restarts for s in self._slots)

    def close(self) -> None:
        for s in self._slots:
            s.worker.close()
            s.ready = False
        shutil.rmtree(self._scratch, ignore_errors=True)

    def __enter__(self) -> "GpuRunner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _actor_runner(task: GpuTask, timeout: float, startup_timeout: float, env: Mapping[str, str],
                  cutoff_factor: float | None, index: int) -> GpuRunner:
    return GpuRunner(task, timeout=timeout, startup_timeout=startup_timeout, env=env, cutoff_factor=cutoff_factor)


def _adopted(task: GpuTask, old: Any) -> GpuRunner | None:
    """An actor's runner of another task, given this one (its worker, with its CUDA
    context, kept), or None when it is not a GpuRunner."""
    if not isinstance(old, GpuRunner):
        return None
    old.set_task(task)
    return old


def _holds(task: GpuTask, old: Any) -> bool:
    """Whether an actor's runner measures this task already (another round of it)."""
    return isinstance(old, GpuRunner) and old.task.digest == task.digest


def _binary_digest(build: BuildResult) -> str:
    return str(getattr(build.artifact, "binary_digest", "") or "")


def _duplicate(result: MeasureResult, build: BuildResult) -> MeasureResult:
    extra = dict(result.extra)
    extra["duplicate_of"] = result.config.to_json()
    return dataclasses.replace(result, config=build.config, compile_seconds=build.compile_seconds,
                               run_seconds=0.0, extra=extra)


def confirmed_result(result: MeasureResult, confirmation: Confirmation) -> MeasureResult:
    """The winner's result with its confirmed times and how sure the choice is, to record."""
    times = confirmation.times.get(result.config) or result.times
    extra = dict(result.extra)
    extra.update(confirmation.as_extra())
    return dataclasses.replace(result, times=tuple(times), extra=extra)


__all__ = ["GpuRunner", "GpuTaskError", "confirmed_result", "Config"]
