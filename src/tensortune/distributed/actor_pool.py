"""The measuring actors of one target, kept as many as the cluster has measurement slots.

An actor is used once its `ready()` has returned (a node that is not its target refuses
there); a lost actor is dropped and replaced when a slot is free again; actors beyond the
cluster's slots (a dead node not yet forgotten) are never placed and are ended.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..db import Target
from ..measure import BuildResult
from .resources import measure_resource

REFRESH_SECONDS = 1.0  # how often the driver looks for lost or new measurement slots


@dataclass
class Slot:
    """One measuring actor and what was sent to it."""

    actor: Any
    index: int
    ready: bool = False
    inflight: int = 0
    since: float = field(default_factory=time.monotonic)
    prepared: set[str] = field(default_factory=set)  # runner keys sent to the actor's `prepare`


class ActorPool:
    """The measuring actors of one target: kept as many as the cluster has slots.
    Runs measuring through it at once (from threads) hold `lock` while they change it."""

    def __init__(self, ray: Any, actor_class: Any, target: Target, cpus: float, gpus: float,
                 wait_for_slots: float) -> None:
        self.ray, self.actor_class, self.target = ray, actor_class, target
        self.cpus, self.gpus, self.wait_for_slots = cpus, gpus, wait_for_slots
        self.resource = measure_resource(target)
        self.slots: dict[Any, Slot] = {}  # ready ref (pending) or actor id -> slot
        self.pending: dict[Any, Slot] = {}  # ready() ref -> slot not started yet
        self.stale: dict[Any, Slot] = {}  # calls of a run that was left early: slot freed when they end
        self.counter = itertools.count()
        self.last_refresh = -math.inf
        self.lost_since: float | None = None  # when the pool was last left without a ready actor
        self.lost_actors = 0
        self.lock = threading.RLock()

    # ---- the actors -----------------------------------------------------------------------
    def capacity(self) -> int:
        """Measurement slots the cluster has for this target now."""
        return int(self.ray.cluster_resources().get(self.resource, 0))

    def refresh(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last_refresh < REFRESH_SECONDS:
            return
        self.last_refresh = now
        self._settle_stale()
        want = self.capacity()
        live = [s for s in self.slots.values()]
        for _ in range(want - len(live)):
            self._start()
        surplus = len(live) - want
        for slot in list(self.pending.values()):  # more actors than slots: never placeable
            if surplus <= 0:
                break
            self._drop(slot, kill=True)
            surplus -= 1
        if self.ready_slots():
            self.lost_since = None
        elif self.lost_since is None:
            self.lost_since = now

    def _start(self) -> None:
        index = next(self.counter)
        actor = self.actor_class.options(num_cpus=self.cpus, num_gpus=self.gpus, resources={self.resource: 1},
                                         max_restarts=0, max_concurrency=1).remote(self.target, index)
        slot = Slot(actor, index)
        ref = actor.ready.remote()
        self.pending[ref] = slot
        self.slots[id(slot)] = slot

    def started(self, ref: Any) -> None:
        """An actor's `ready()` returned (or failed: a node that is not its target, or died)."""
        slot = self.pending.pop(ref)
        try:
            self.ray.get(ref)
        except self.ray.exceptions.RayTaskError as exc:
            from .actor import TargetMismatch
            cause = exc.as_instanceof_cause() if hasattr(exc, "as_instanceof_cause") else exc
            self._drop(slot)
            if isinstance(cause, TargetMismatch):
                raise TargetMismatch(str(cause).splitlines()[-1]) from None
            logging.getLogger(__name__).warning("a measuring actor failed to start: %s", exc)
            return
        except self.ray.exceptions.RayError as exc:
            logging.getLogger(__name__).warning("a measuring actor was lost while starting: %s", exc)
            self._drop(slot)
            return
        slot.ready = True

    def lost(self, slot: Slot) -> None:
        if id(slot) in self.slots:
            self.lost_actors += 1
            self._drop(slot, kill=True)
        self.last_refresh = -math.inf  # look for a replacement at once

    def _drop(self, slot: Slot, kill: bool = False) -> None:
        self.slots.pop(id(slot), None)
        for ref, s in list(self.pending.items()):
            if s is slot:
                del self.pending[ref]
        if kill:
            try:
                self.ray.kill(slot.actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass

    def ready_slots(self) -> list[Slot]:
        return [s for s in self.slots.values() if s.ready]

    def free(self, depth: int) -> Slot | None:
        """The ready actor with the fewest calls queued, if it has room for another."""
        ready = [s for s in self.ready_slots() if s.inflight < depth]
        return min(ready, key=lambda s: s.inflight) if ready else None

    def hopeless(self) -> bool:
        """No actor is ready, and none has been for `wait_for_slots` seconds."""
        return (not self.ready_slots() and self.lost_since is not None
                and time.monotonic() - self.lost_since >= self.wait_for_slots)

    def leave(self, calls: dict[Any, tuple[Slot, BuildResult, float]]) -> None:
        """A run stopped with these calls in flight: their slots free up when they end."""
        for ref, (slot, _, _) in calls.items():
            self.stale[ref] = slot

    def _settle_stale(self) -> None:
        if not self.stale:
            return
        done, _ = self.ray.wait(list(self.stale), num_returns=len(self.stale), timeout=0)
        for ref in done:
            self.stale.pop(ref).inflight -= 1

    def close(self) -> None:
        """Close each actor's runners (their workers), then end the actors."""
        closing = [s.actor.shutdown.remote() for s in self.slots.values() if s.ready]
        try:
            self.ray.wait(closing, num_returns=len(closing), timeout=10)
        except Exception:  # noqa: BLE001 - a lost actor: its workers went with it
            pass
        for slot in list(self.slots.values()):
            try:
                self.ray.kill(slot.actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.slots.clear()
        self.pending.clear()
        self.stale.clear()
