"""What runs on the Ray nodes: build tasks and measuring actors.

A `MeasureActor` owns one measurement slot of its node (a GPU, or a CPU socket) and the
runners measuring there, each with its isolated worker, made and started when a run
starts (`prepare`). A new task's runner takes the worker of a runner whose run has ended
(`release`) where the recipe can `adopt` it, first one that `holds` its task already (an
earlier round of the same kernel: no arguments or reference to make again). A runner whose run goes on keeps its worker
(several tasks' rounds at once each measure in a worker of their own, so that no
candidate waits for a task to be swapped in); of the ended ones, `KEPT_FINISHED` are kept
for the next tasks, and past `MAX_RUNNERS` in all the least recently used is adopted or
closed. It measures one candidate per call, so a lost actor loses at
most the calls sent to it. It checks on start that its node is the target it was placed
for (a mislabelled node would record another machine's times under this one's name).

Example (on a node, through `RayExecutor`; here the plain class):
    >>> from tensortune.db import Target
    >>> MeasureActor(Target.make("replay", "x"), 0).ready()["index"]
    0
"""

from __future__ import annotations

import dataclasses
import os
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from ..db import Target
from ..measure import BuildResult, ErrorKind, MeasureResult
from ..measure.executor import RemoteRunner
from ..measure.worker import start_in_background
from ..space import Config

KEPT_FINISHED = 8  # runners of ended runs (with their workers) kept for the next tasks (or rounds) to adopt
MAX_RUNNERS = 16  # runners at once, running or ended: past it the least recently used is adopted or closed


class TargetMismatch(RuntimeError):
    """A node advertises a target it is not."""


def run_build(build: Callable[[Config], BuildResult], config: Config) -> BuildResult:
    """The body of a build task."""
    return build(config)


def node_target(kind: str) -> Target | None:
    """This node's target of `kind`, where it can be told here: the CPU's; the GPU's that
    Ray gave this actor (the first of its CUDA_VISIBLE_DEVICES); Triton's interpreter."""
    if kind == "cpu":
        return Target.cpu()
    if kind in ("cuda", "rocm"):
        import torch

        if not torch.cuda.is_available():
            raise TargetMismatch(f"node {socket.gethostname()} advertises a {kind} target, but this actor sees no "
                                 f"GPU (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}); start the "
                                 "node with --num-gpus and `tensortune cluster resources --gpu`")
        from ..frontends.triton.target import gpu_target
        return gpu_target(0)
    if kind == "triton-interpreter":
        from ..frontends.triton.target import interpreter_target
        return interpreter_target()
    return None


class MeasureActor:
    """Measures candidates for the runners the driver registers, one call at a time."""

    def __init__(self, target: Target, index: int) -> None:
        here = node_target(target.kind)
        if here is not None and here != target:
            raise TargetMismatch(f"node {socket.gethostname()} advertises the target {target.device} "
                                 f"({target.arch}, {target.versions_json}) but is {here.device} ({here.arch}, "
                                 f"{here.versions_json}); start it with `tensortune cluster resources`'s output")
        self.target = target
        self.index = index
        self.node = _node_id()
        self.runners: OrderedDict[str, tuple[Any, RemoteRunner]] = OrderedDict()
        self.finished: set[str] = set()  # runners whose run has ended (`release`): the first to be adopted
        self.starting: dict[str, threading.Thread] = {}  # runners whose worker `prepare` is starting

    def ready(self) -> dict[str, Any]:
        return {"index": self.index, "host": socket.gethostname(), "pid": os.getpid(), "node": self.node,
                "gpus": self.gpus}

    @property
    def gpus(self) -> str:
        """The GPUs Ray gave this actor, as its CUDA_VISIBLE_DEVICES says ("" for none)."""
        return os.environ.get("CUDA_VISIBLE_DEVICES", "") if _ray_gpu_ids() else ""

    def _runner(self, key: str, recipe_box: list[Any]) -> tuple[Any, RemoteRunner]:
        if key not in self.runners:
            recipe = recipe_box[0]
            if not isinstance(recipe, RemoteRunner):  # an object reference: fetched once per actor
                import ray
                recipe = ray.get(recipe)
            runner = self._adopt_finished(recipe)
            if runner is None and len(self.runners) >= MAX_RUNNERS:  # the least recently used goes
                self.settle(next(iter(self.runners)))
                _, (old, _) = self.runners.popitem(last=False)
                runner = recipe.adopt(old) if recipe.adopt is not None else None
                if runner is None:
                    _close(old)
            self.runners[key] = (runner if runner is not None else recipe.make(self.index), recipe)
        self.finished.discard(key)
        self.runners.move_to_end(key)
        return self.runners[key]

    def _adopt_finished(self, recipe: RemoteRunner) -> Any:
        """A runner of a run that has ended, given the new task where the recipe can take
        it (its worker kept: no new process, no new CUDA context), else None."""
        if recipe.adopt is None:
            return None
        ended = [k for k in self.runners if k in self.finished]  # least recently used first
        if recipe.holds is not None:  # those holding this task already before all others
            ended.sort(key=lambda k: not recipe.holds(self.runners[k][0]))
        for key in ended:
            self.settle(key)
            runner = recipe.adopt(self.runners[key][0])
            if runner is not None:
                del self.runners[key]
                self.finished.discard(key)
                return runner
        return None

    def release(self, key: str) -> None:
        """The run measuring with this runner has ended: the next task's runner may take its
        worker (the runner is kept until then, for that run's late results)."""
        if key in self.runners:
            self.finished.add(key)
        ended = [k for k in self.runners if k in self.finished]  # least recently used first
        for old in ended[:max(0, len(ended) - KEPT_FINISHED)]:
            self.forget(old)

    def prepare(self, key: str, recipe_box: list[Any]) -> dict[str, Any]:
        """Make the task's runner and start its worker (`warm_up()`, where the runner has
        one) before any candidate arrives: sent to every actor when a run starts, so the
        actors start their workers at once and in parallel with the run's first builds.
        The worker starts in a thread of its own, so that several tasks' workers start
        together and candidates of other tasks are measured meanwhile; the task's first
        candidate waits for it (`settle`). A failure is left for that candidate to meet
        (and record)."""
        started, fresh = time.time(), key not in self.runners
        try:
            runner, _ = self._runner(key, recipe_box)
        except Exception as exc:  # noqa: BLE001 - the first candidate meets it again, recorded
            return {"started": started, "seconds": time.time() - started, "error": f"{type(exc).__name__}: {exc}"}
        warm_up = getattr(runner, "warm_up", None)
        if warm_up is not None and fresh:  # (a runner in use is never started again behind its back)
            self.starting[key] = start_in_background(warm_up, f"start-{key[:8]}")
        return {"started": started, "seconds": time.time() - started, "error": ""}

    def settle(self, key: str) -> None:
        """Wait until the worker `prepare` started for this task is ready (or failed)."""
        thread = self.starting.pop(key, None)
        if thread is not None:
            thread.join()

    def measure(self, key: str, recipe_box: list[Any], build: BuildResult) -> list[MeasureResult]:
        """The results of one built candidate (amendments of earlier ones may follow it)."""
        runner, recipe = self._runner(key, recipe_box)
        self.settle(key)
        if build.ok and recipe.unpack is not None:
            try:
                build = dataclasses.replace(build, artifact=recipe.unpack(build.artifact))
            except Exception as exc:  # noqa: BLE001 - the transfer's fault, not the candidate's
                return [MeasureResult.failed(build.config, ErrorKind.CRASHED,
                                             f"the built candidate could not be unpacked on this node: {exc}",
                                             environment="artifact transfer failed",
                                             compile_seconds=build.compile_seconds)]
        results = list(runner.run([build]))
        where: dict[str, Any] = {"ray_node": self.node, "ray_actor": self.index}
        if self.gpus:
            where["ray_gpus"] = self.gpus
        return [dataclasses.replace(r, extra={**r.extra, **where}) for r in results]

    def late(self, key: str) -> list[MeasureResult]:
        if key not in self.runners:
            return []
        self.settle(key)
        runner, _ = self.runners[key]
        return list(getattr(runner, "late_results", tuple)())

    def forget(self, key: str) -> None:
        self.settle(key)
        self.finished.discard(key)
        entry = self.runners.pop(key, None)
        if entry is not None:
            _close(entry[0])

    def shutdown(self) -> None:
        for key in list(self.starting):
            self.settle(key)
        for runner, _ in self.runners.values():
            _close(runner)
        self.runners.clear()
        self.finished.clear()


def _node_id() -> str:
    """The Ray node this actor lives on ("" outside Ray)."""
    try:
        import ray
        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""
    except ImportError:
        return ""


def _ray_gpu_ids() -> list[Any]:
    """The GPU ids Ray assigned to this worker ([] outside Ray or without GPUs)."""
    try:
        import ray
        return list(ray.get_gpu_ids()) if ray.is_initialized() else []
    except (ImportError, RuntimeError):
        return []


def _close(runner: Any) -> None:
    close = getattr(runner, "close", None)
    if close is not None:
        close()
