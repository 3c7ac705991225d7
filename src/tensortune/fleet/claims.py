"""Candidates claimed before they are measured, so that two workers never measure the
same one: a row keyed by (workload, target, configuration digest) in the shared store.

A claim is taken in one statement (an insert that a duplicate key turns away, or an
update of a claim that expired); it lasts a lease that its live worker keeps renewing,
so the candidates of a worker that died are free again once its lease runs out.
`ClaimingStrategy` wraps any search strategy: of what it proposes, a candidate already
recorded is told to it instead of measured, one claimed by another worker is held back
until its record arrives (told) or its claim expires (measured here).

Example:
    >>> from tensortune.db import Database, Target, Workload
    >>> from tensortune.space import Config
    >>> db = Database(":memory:")
    >>> w, t = Workload.make("k"), Target.make("cpu", "x")
    >>> a, b = CandidateClaims(db, w, t, "a", 60), CandidateClaims(db, w, t, "b", 60)
    >>> a.take(Config(x=1)), b.take(Config(x=1)), b.take(Config(x=2))
    (True, False, True)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, update

from ..db import Database, Target, Workload
from ..db.schema import claims
from ..measure import MeasureResult
from ..search import SearchStrategy
from ..search.base import WrappingStrategy
from ..space import Config


class CandidateClaims:
    """The claims of one worker (`owner`) on one workload and target."""

    def __init__(self, db: Database, workload: Workload, target: Target, owner: str,
                 lease_seconds: float) -> None:
        self.db, self.workload, self.target = db, workload, target
        self.owner, self.lease_seconds = owner, lease_seconds
        self.workload_id, self.target_id = db.ids(workload, target)

    def _key(self, config: Config) -> list[Any]:
        return [claims.c.workload_id == self.workload_id, claims.c.target_id == self.target_id,
                claims.c.config_hash == config.digest]

    def take(self, config: Config) -> bool:
        """Claim `config` for this owner: True if it is now ours (new, ours already, or
        another's that expired), False if another live worker holds it."""
        now = time.time()
        expires = now + self.lease_seconds
        inserted = self.db.write(self.db.insert_ignoring_duplicates(claims).values(
            workload_id=self.workload_id, target_id=self.target_id, config_hash=config.digest,
            owner=self.owner, expires_at=expires))
        if inserted == 1:
            return True
        return self.db.write(update(claims).where(
            *self._key(config), (claims.c.owner == self.owner) | (claims.c.expires_at < now))
            .values(owner=self.owner, expires_at=expires)) == 1

    def recorded(self, config: Config) -> MeasureResult | None:
        """The recorded standing of `config` (another worker may have measured it)."""
        rec = self.db.standing_of(self.workload, self.target, config.digest)
        return rec.to_result() if rec is not None else None

    def renew(self) -> int:
        """Extend every live claim of this owner on this workload and target."""
        return self.db.write(update(claims).where(
            claims.c.workload_id == self.workload_id, claims.c.target_id == self.target_id,
            claims.c.owner == self.owner).values(expires_at=time.time() + self.lease_seconds))

    def release(self) -> int:
        """Drop this owner's claims (their records are in the store by now)."""
        return self.db.write(delete(claims).where(
            claims.c.workload_id == self.workload_id, claims.c.target_id == self.target_id,
            claims.c.owner == self.owner))


class ClaimingStrategy(WrappingStrategy):
    """`inner`'s proposals, each claimed before it is handed out for measuring.

    `stop` (set when the worker lost its job) makes `ask` return nothing, which ends
    the run. With nothing left to propose but candidates others still hold, `ask`
    waits (polling every `poll` seconds) for their records or the end of their claims."""

    def __init__(self, inner: SearchStrategy, claims_: CandidateClaims, stop: threading.Event | None = None,
                 poll: float = 0.5) -> None:
        super().__init__(inner.space, inner.seed, inner.budget)
        self.inner, self.claims, self.poll = inner, claims_, poll
        self.stop = stop or threading.Event()
        self.name = inner.name  # type: ignore[misc]
        self.held_back: list[Config] = []  # claimed by other workers when proposed
        self.told_from_others = 0

    def ask(self, n: int) -> list[Config]:
        out: list[Config] = []
        while len(out) < n and not self.stop.is_set():
            out += self._settle(n - len(out))
            if len(out) >= n:
                break
            fresh = self.inner.ask(n - len(out))
            for config in fresh:
                if not self._learned(config):
                    (out if self.claims.take(config) else self.held_back).append(config)
            if not fresh:
                if out or not self.held_back:
                    break
                self.stop.wait(self.poll)  # only candidates others hold are left
        return out

    def _learned(self, config: Config) -> bool:
        """Tell the inner strategy `config`'s record if the store has one."""
        known = self.claims.recorded(config)
        if known is not None:
            self.inner.tell([known])
            self.told_from_others += 1
        return known is not None

    def _settle(self, n: int) -> list[Config]:
        """Held-back candidates whose record arrived (told) or whose claim we now hold."""
        ours, waiting = [], []
        for config in self.held_back:
            if self._learned(config):
                continue
            if len(ours) < n and self.claims.take(config):
                ours.append(config)
            else:
                waiting.append(config)
        self.held_back = waiting
        return ours

    def tell(self, results: Sequence[MeasureResult]) -> None:
        super().tell(results)
        self.inner.tell(results)

