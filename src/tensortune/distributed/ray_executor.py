"""The Ray executor: builds as Ray tasks, measurements on Ray actors, results as they finish.

The driver (the process running the `Tuner`) keeps the search strategy, the cost model
and the records database; it sends each candidate's build to a Ray task on a node of the
target, hands each finished build to a measuring actor of that target (one per GPU or CPU
socket, each with its isolated worker, `depth` candidates queued at a time), and yields
every result the moment `ray.wait` returns it, so the tuner records it at once. When a
run starts, every actor starts the run's worker at once (`MeasureActor.prepare`), while
the first builds compile; with `more`, the run's batch is a window kept full, new
candidates asked for as results come back, so no slot waits for a batch's slowest one.

Faults: a build task whose node dies is run again by Ray elsewhere; a measuring actor
whose node dies (or that stops answering) has its in-flight candidates returned as
failures of the environment, which the tuner measures again on the actors left (without
spending trials), and the actor is replaced once the cluster has a free slot again. What
was recorded stays recorded; a driver that dies is restarted and resumes from the store.

Example (needs a cluster whose nodes advertise this machine's target; see
docs/distributed.md):
    >>> executor = RayExecutor(address="auto")  # doctest: +SKIP
    >>> tensortune.tune(fn, space, executor=executor)  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..db import Target
from ..measure import BuildResult, ErrorKind, MeasureResult, failed_build
from ..measure.executor import RemoteBuild, RemoteRunner, remote_build_of, remote_runner_of
from ..space import Config
from .actor_pool import REFRESH_SECONDS, ActorPool, Slot
from .resources import (describe, local_targets, measure_resource, measures_on_gpu, merged_resources, nodes_of,
                        start_hint, target_resource)

RAY_HINT = "executor='ray' needs Ray: pip install 'tensortune[ray]'"
BUILD_RETRIES = 2  # times Ray runs a build again whose worker or node died
LOST = "the Ray node or actor measuring it was lost"


class RayMissing(ImportError):
    """Ray is not installed (the `ray` extra)."""


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayMissing(RAY_HINT) from None
    return ray


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """ConnectionError at once when nothing listens at a "host:port" address (Ray itself
    retries for minutes, then ends the process)."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return  # "auto", or a form Ray resolves itself
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as exc:
        raise ConnectionError(f"nothing answers at {address} ({exc})") from None


class RayExecutor:
    """Builds on Ray tasks and measures on Ray actors of the target (`Executor`).

    `address`: the cluster ("auto": the one this machine belongs to; "local": start Ray in
    this process with this machine's targets: its CPU, its GPUs, and Triton's interpreter
    under TRITON_INTERPRET=1; None: `RAY_ADDRESS`, else "auto").
    `measure_cpus`/`measure_gpus`: what each measuring actor holds (1 CPU by default, so
    that builds never share its core); `measure_gpus` defaults to 1 for a GPU target (an
    actor owns one GPU: Ray sets its CUDA_VISIBLE_DEVICES) and 0 otherwise. `build_cpus`:
    per build task. `depth`: candidates queued on an actor at once (2 hides the round trip).
    `wait_for_slots`: seconds a run waits for a measuring actor before the candidates
    waiting for one are given back as the environment's failures.

    Several tuners may measure through one executor at once, from threads (the task
    scheduler's concurrent rounds): they share its actors.
    """

    name = "ray"

    def __init__(self, address: str | None = None, *, measure_cpus: float = 1.0, measure_gpus: float | None = None,
                 build_cpus: float = 1.0, depth: int = 2, wait_for_slots: float = 120.0) -> None:
        if depth < 1:
            raise ValueError(f"depth must be at least 1, got {depth}")
        self.address = address
        self.measure_cpus, self.measure_gpus, self.build_cpus = measure_cpus, measure_gpus, build_cpus
        self.depth = depth
        self.wait_for_slots = wait_for_slots
        self._ray: Any = None
        self._owns_ray = False
        self._pools: dict[Target, ActorPool] = {}
        self._runners: dict[int, tuple[Any, str, Any]] = {}  # id(runner) -> (runner, key, recipe ref)
        self._remote: dict[str, Any] = {}
        self._lock = threading.RLock()  # the actor pools and runners, shared by concurrent runs

    # ---- connection ---------------------------------------------------------------------------
    def connect(self) -> Any:
        """Join the cluster (once); returns the `ray` module."""
        if self._ray is not None:
            return self._ray
        ray = import_ray()
        if not ray.is_initialized():
            address = self.address or os.environ.get("RAY_ADDRESS") or "auto"
            kwargs: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": False,
                                      "include_dashboard": False}
            if address == "local":
                kwargs["resources"] = merged_resources(local_targets())
                address = None
            try:
                if address is not None:
                    _check_reachable(address)
                ray.init(address=address, **kwargs)
            except (ConnectionError, RuntimeError, ValueError, SystemExit) as exc:  # Ray exits on a lost GCS
                raise ConnectionError(f"cannot join the Ray cluster at {address!r}: {exc}; start one with "
                                      f"`ray start --head --resources \"$(tensortune cluster resources)\"`, or pass "
                                      "ray_address='local' to start Ray in this process") from None
            self._owns_ray = True
        from .actor import MeasureActor, run_build
        self._remote = {"build": ray.remote(max_retries=BUILD_RETRIES)(run_build),
                        "actor": ray.remote(MeasureActor)}
        self._ray = ray
        return ray

    def gpus_per_actor(self, target: Target) -> float:
        """GPUs each measuring actor of `target` holds."""
        if self.measure_gpus is not None:
            return self.measure_gpus
        return 1.0 if measures_on_gpu(target) else 0.0

    def _pool(self, target: Target | None) -> ActorPool:
        with self._lock:
            return self._open_pool(target)

    def _open_pool(self, target: Target | None) -> ActorPool:
        ray = self.connect()
        target = target or Target.cpu()
        if target not in self._pools:
            pool = ActorPool(ray, self._remote["actor"], target, self.measure_cpus, self.gpus_per_actor(target),
                              self.wait_for_slots)
            if pool.capacity() == 0:
                raise RuntimeError(f"the Ray cluster has no node that measures for {describe(target)}: "
                                   f"{start_hint(target)}")
            if self._build_slots(target) < 1:
                raise RuntimeError(f"the Ray cluster's nodes of {describe(target)} have no CPU left to build on once "
                                   f"their measuring actors hold {self.measure_cpus:g} each: give the nodes more "
                                   "CPUs (ray start --num-cpus), or pass measure_cpus=0")
            pool.refresh(force=True)
            self._pools[target] = pool
        return self._pools[target]

    def _key(self, runner: Any, recipe: RemoteRunner) -> tuple[str, Any]:
        with self._lock:
            entry = self._runners.get(id(runner))
            if entry is None or entry[0] is not runner:
                entry = (runner, uuid.uuid4().hex, self._ray.put(recipe))
                self._runners[id(runner)] = entry
            return entry[1], entry[2]

    # ---- the executor ---------------------------------------------------------------------------
    def _build_slots(self, target: Target) -> int:
        """Builds the target's nodes can run at once, next to their measuring actors."""
        total = 0
        for node in nodes_of(target, self.connect().nodes()):
            cpus = node["Resources"].get("CPU", 0)
            slots = node["Resources"].get(measure_resource(target), 0)
            total += max(0, int((cpus - slots * self.measure_cpus) / max(self.build_cpus, 1e-9) + 1e-9))
        return total

    def parallelism(self, builder: Any, target: Target | None = None) -> int:
        """Twice the build slots of the target's nodes, plus what the actors queue."""
        target = target or Target.cpu()
        slots = sum(n["Resources"].get(measure_resource(target), 0) for n in nodes_of(target, self.connect().nodes()))
        return 2 * max(1, self._build_slots(target)) + self.depth * int(slots)

    streams = True  # measure() takes `more`: candidates are asked for as slots free up

    def measure(self, builder: Any, runner: Any, configs: Sequence[Config], target: Target | None = None,
                more: Callable[[int], Sequence[Config]] | None = None) -> Iterator[MeasureResult]:
        """Build and measure `configs`, yielding each result as it arrives. With `more`,
        the batch is a window kept full: whenever a slot's worth of it has come back,
        `more(k)` is asked for up to `k` further candidates (an empty answer: none now),
        so no slot waits for the slowest candidate of a batch."""
        recipe_build = remote_build_of(builder)
        recipe_run = remote_runner_of(runner)
        pool = self._pool(target)
        key, recipe_ref = self._key(runner, recipe_run)
        with pool.lock:
            self._prepare(pool, key, recipe_ref)
        return self._measure(pool, recipe_build, recipe_run, key, recipe_ref, list(dict.fromkeys(configs)), more)

    def _prepare(self, pool: ActorPool, key: str, recipe_ref: Any) -> None:
        """Have every actor (started or starting) make this runner and start its worker now,
        in parallel, ahead of the candidates queued behind it on the actor (called with
        `pool.lock` held)."""
        for slot in list(pool.slots.values()):
            if key not in slot.prepared:
                slot.prepared.add(key)
                slot.actor.prepare.remote(key, [recipe_ref])  # its answer is not needed: a failure recurs

    def _measure(self, pool: ActorPool, recipe_build: RemoteBuild, recipe_run: RemoteRunner, key: str,
                 recipe_ref: Any, configs: list[Config],
                 more: Callable[[int], Sequence[Config]] | None) -> Iterator[MeasureResult]:
        ray = self._ray
        options: dict[str, Any] = {"num_cpus": self.build_cpus}
        if recipe_build.native:
            options["resources"] = {target_resource(pool.target): 1}
        slots = max(1, self._build_slots(pool.target))
        builds: dict[Any, tuple[Config, float]] = {}
        ready: deque[BuildResult] = deque()
        calls: dict[Any, tuple[Slot, BuildResult, float]] = {}

        def submit(new: Sequence[Config]) -> None:
            # a build queued behind others waits for them: its deadline counts the waves before it
            now, taken = time.monotonic(), {c for c, _ in builds.values()} | {b.config for b in ready} | {
                b.config for _, b, _ in calls.values()}
            for c in dict.fromkeys(new):
                if c not in taken:
                    k = len(builds)
                    builds[self._remote["build"].options(**options).remote(recipe_build.build, c)] = \
                        (c, now + recipe_build.timeout * (1 + k // slots + 1))

        submit(configs)
        window = len(configs)
        low = window - max(1, min(slots, window // 2))  # refill once a build slot's worth has come back
        answered = False  # a result arrived since `more` was last asked
        try:
            while True:
                if more is not None and answered and len(builds) + len(ready) + len(calls) <= low:
                    answered = False
                    submit(more(window - len(builds) - len(ready) - len(calls)))
                if not (builds or ready or calls):
                    break
                with pool.lock:
                    pool.refresh()
                    self._prepare(pool, key, recipe_ref)  # actors started since (replacing lost ones)
                    while ready and (slot := pool.free(self.depth)) is not None:
                        b = ready.popleft()
                        ref = slot.actor.measure.remote(key, [recipe_ref], b)
                        slot.inflight += 1
                        calls[ref] = (slot, b, time.monotonic() + recipe_run.timeout)
                    hopeless = bool(ready) and not calls and pool.hopeless()
                    starting = list(pool.pending)
                if hopeless:
                    answered = True
                    while ready:
                        b = ready.popleft()
                        yield MeasureResult.failed(b.config, ErrorKind.CRASHED,
                                                   f"no measuring actor of {describe(pool.target)} was left in the "
                                                   f"Ray cluster for {self.wait_for_slots:.0f} s",
                                                   environment="no Ray node of the target",
                                                   compile_seconds=b.compile_seconds)
                    continue
                waiting = list(builds) + list(calls) + starting
                deadlines = [d for _, d in builds.values()] + [d for _, _, d in calls.values()]
                timeout = REFRESH_SECONDS if not deadlines else \
                    min(REFRESH_SECONDS, max(0.0, min(deadlines) - time.monotonic()))
                done, _ = ray.wait(waiting, num_returns=1, timeout=timeout) if waiting else ([], [])
                if done and len(waiting) > 1:  # all that are done by now, not one per pass (a pass is a wait)
                    rest = [r for r in waiting if r not in done]
                    done += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
                if not waiting:
                    time.sleep(timeout)
                for ref in done:
                    if ref in builds:
                        config, _ = builds.pop(ref)
                        built = self._built(ref, config)
                        if built.ok:
                            ready.append(built)
                        else:
                            answered = True
                            yield failed_build(built)
                    elif ref in calls:
                        slot, b, _ = calls.pop(ref)
                        with pool.lock:
                            slot.inflight -= 1
                        answered = True
                        yield from self._measured(pool, ref, slot, b)
                    else:
                        with pool.lock:
                            if ref in pool.pending:  # (another run's thread may have seen it start)
                                pool.started(ref)
                for result in self._overdue(pool, builds, calls, ready):
                    answered = True
                    yield result
        finally:
            for ref in builds:  # a run left early (its time is up): its builds are not needed
                ray.cancel(ref, force=True)
            with pool.lock:
                pool.leave(calls)

    def _built(self, ref: Any, config: Config) -> BuildResult:
        ray = self._ray
        try:
            return ray.get(ref)
        except ray.exceptions.TaskCancelledError:
            return BuildResult(config, None, ErrorKind.TIMEOUT, "the build was cancelled past its timeout")
        except ray.exceptions.WorkerCrashedError as exc:
            return BuildResult(config, None, ErrorKind.CRASHED,
                               f"the build crashed its Ray worker {BUILD_RETRIES + 1} times: {str(exc)[:300]}")
        except ray.exceptions.RayError as exc:  # a lost node, an unimportable module there
            return BuildResult(config, None, ErrorKind.CRASHED, f"the Ray build task failed: {str(exc)[:2000]}",
                               environment=f"Ray build failed: {type(exc).__name__}")

    def _measured(self, pool: ActorPool, ref: Any, slot: Slot, build: BuildResult) -> Iterator[MeasureResult]:
        ray = self._ray
        try:
            results = ray.get(ref)
        except ray.exceptions.RayActorError as exc:
            with pool.lock:
                pool.lost(slot)
            yield self._lost(build, str(exc))
            return
        except ray.exceptions.RayError as exc:
            yield MeasureResult.failed(build.config, ErrorKind.CRASHED, f"the Ray measurement failed: {exc}"[:2000],
                                       environment=f"Ray measurement failed: {type(exc).__name__}",
                                       compile_seconds=build.compile_seconds)
            return
        yield from results

    @staticmethod
    def _lost(build: BuildResult, why: str) -> MeasureResult:
        first = why.strip().splitlines()[0][:300] if why.strip() else ""
        return MeasureResult.failed(build.config, ErrorKind.CRASHED, f"{LOST}: {first}", environment=LOST,
                                    compile_seconds=build.compile_seconds, extra={"requeued": True})

    def _overdue(self, pool: ActorPool, builds: dict[Any, tuple[Config, float]],
                 calls: dict[Any, tuple[Slot, BuildResult, float]], ready: deque[BuildResult]) -> Iterator[MeasureResult]:
        """Builds past their timeout are the candidate's timeouts; an actor past its
        runner's limits is stuck: it is replaced and its calls are the environment's."""
        now = time.monotonic()
        for ref, (config, deadline) in list(builds.items()):
            if deadline <= now:
                del builds[ref]
                self._ray.cancel(ref, force=True)
                yield failed_build(BuildResult(config, None, ErrorKind.TIMEOUT, "build did not finish in time"))
        stuck = {slot for ref, (slot, _, deadline) in calls.items() if deadline <= now}
        for slot in stuck:
            with pool.lock:
                pool.lost(slot)
            for ref, (s, b, _) in list(calls.items()):
                if s is slot:
                    del calls[ref]
                    yield self._lost(b, "the actor stopped answering within its runner's limits")

    def late_results(self, runner: Any) -> tuple[MeasureResult, ...]:
        entry = self._runners.get(id(runner))
        if entry is None or self._ray is None:
            return ()
        ray, out = self._ray, []
        for pool in list(self._pools.values()):
            with pool.lock:
                refs = [s.actor.late.remote(entry[1]) for s in pool.ready_slots()]
            for ref in refs:
                try:
                    out.extend(ray.get(ref, timeout=60))
                except ray.exceptions.RayError:
                    pass  # a lost actor: its worker went with it
            with pool.lock:  # the run has ended: the next run's runner may take its workers
                for slot in pool.ready_slots():
                    slot.actor.release.remote(entry[1])
        return tuple(out)

    def close(self) -> None:
        """Stop the measuring actors (and leave the Ray connection this executor opened)."""
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()
        self._runners.clear()
        if self._ray is not None and self._owns_ray:
            self._ray.shutdown()
        self._ray, self._owns_ray = None, False

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
