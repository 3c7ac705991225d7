"""Candidates claimed before they are measured, so that two workers never measure the
same one: a row keyed by (workload, target, configuration digest) in the shared store.

A claim is taken in one statement (an insert that a duplicate key turns away, or an
update of a claim that expired); it lasts a lease that its live worker keeps renewing,
so the candidates of a worker that died are free again once its lease runs out.
`ClaimingStrategy` wraps any search strategy: of what it proposes, a candidate already
recorded is told to it instead of measured, one claimed by another worker is held back
until its record arrives (told) or its claim expires (measured here), or, with nothing
else to propose, for a bounded wait. A run that ends with candidates claimed but not
measured drops their claims at once.

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

from ..db import Database, DatabaseError, Target, Workload
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

    def release(self, configs: Sequence[Config] | None = None) -> int:
        """Drop this owner's claims (their records are in the store by now), or only those
        of `configs` (candidates it will not measure for now)."""
        mine = [claims.c.workload_id == self.workload_id, claims.c.target_id == self.target_id,
                claims.c.owner == self.owner]
        if configs is not None:
            if not configs:
                return 0
            mine.append(claims.c.config_hash.in_(sorted({c.digest for c in configs})))
        return self.db.write(delete(claims).where(*mine))


class ClaimingStrategy(WrappingStrategy):
    """`inner`'s proposals, each claimed before it is handed out for measuring.

    `stop` (set when the worker lost its job) makes `ask` return nothing, which ends
    the run. With nothing left to propose but candidates others still hold, `ask`
    waits (polling every `poll` seconds) for their records or the end of their claims,
    at most `wait_seconds` per candidate and run (two leases by default): then it gives
    up on them for this run, so that two searches holding what the other waits for
    cannot wait forever. When a run ends, the claims of what it proposed but did not
    measure are dropped at once, and those candidates are proposed again first by the
    next run (if no one else measured or holds them by then)."""

    def __init__(self, inner: SearchStrategy, claims_: CandidateClaims, stop: threading.Event | None = None,
                 poll: float = 0.5, wait_seconds: float | None = None) -> None:
        super().__init__(inner.space, inner.seed, inner.budget)
        self.inner, self.claims, self.poll = inner, claims_, poll
        self.wait_seconds = 2 * claims_.lease_seconds if wait_seconds is None else wait_seconds
        self.stop = stop or threading.Event()
        self.name = inner.name  # type: ignore[misc]
        # not proposed yet: held by other workers when proposed, or taken back when a run did
        # not measure them; each with when this run stops waiting on it (None: not waited on yet)
        self.held_back: dict[Config, float | None] = {}
        self.told_from_others = 0
        self.gave_up = 0  # waits on another worker's claim that ran out (one per candidate and run)
        self._given_up: set[Config] = set()  # in this run

    def ask(self, n: int) -> list[Config]:
        out: list[Config] = []
        while len(out) < n and not self.stop.is_set():
            out += self._settle(n - len(out))
            if len(out) >= n:
                break
            fresh = self.inner.ask(n - len(out))
            for config in fresh:
                if not self._learned(config):
                    if self.claims.take(config):
                        out.append(config)
                    else:
                        self.held_back[config] = time.monotonic() + self.wait_seconds
            if not fresh:
                if out or not self._waiting():
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
        ours: list[Config] = []
        waiting: dict[Config, float | None] = {}
        for config, until in self.held_back.items():
            if config in self.seen or self._learned(config):  # seen: told already (recorded before the run)
                continue
            if len(ours) < n and self.claims.take(config):
                ours.append(config)
            else:
                waiting[config] = until
        self.held_back = waiting
        return ours

    def _waiting(self) -> bool:
        """Whether a held-back candidate is still worth waiting for in this run."""
        now = time.monotonic()
        for config, until in list(self.held_back.items()):
            if until is None:
                self.held_back[config] = now + self.wait_seconds
            elif until <= now and config not in self._given_up:
                self._given_up.add(config)
                self.gave_up += 1
        return any(until is not None and until > now for until in self.held_back.values())

    def tell(self, results: Sequence[MeasureResult]) -> None:
        super().tell(results)
        self.inner.tell(results)

    def run_ended(self, unmeasured: Sequence[Config]) -> None:
        """Drop the claims of what the run proposed but did not measure, and take those
        candidates back to propose first next time; the next run waits afresh."""
        try:
            self.claims.release(unmeasured)
        except DatabaseError:
            pass  # they stay claimed (proposed again by the next run) until the job's end or their lease's
        self.held_back = {**dict.fromkeys(unmeasured), **dict.fromkeys(self.held_back)}
        self._given_up.clear()


class TunerClaims:
    """The claims of one owner on whatever workloads and targets its tuners search: one
    `CandidateClaims` per (workload, target), made as tuners of them appear. `wrap` is
    the hook (`tuner_scope`) that makes a job that tunes itself (a model's compile, with
    a tuner per kernel) claim its candidates; `renew` and `release` cover them all.

    Example:
        >>> from tensortune.db import Database, Target, Workload
        >>> from tensortune.measure import CallableRunner
        >>> from tensortune.space import Space
        >>> from tensortune.tuner import Tuner
        >>> db = Database(":memory:")
        >>> held = TunerClaims(db, "w", lease_seconds=60)
        >>> tuner = Tuner(Space({"n": [1, 2]}), CallableRunner(lambda n: n), workload=Workload.make("k"),
        ...               target=Target.make("cpu", "x"), db=db, progress=False)
        >>> held.wrap(tuner), type(tuner.strategy).__name__, len(held.claims)
        (True, 'ClaimingStrategy', 1)
    """

    def __init__(self, db: Database, owner: str, lease_seconds: float, stop: threading.Event | None = None) -> None:
        self.db, self.owner, self.lease_seconds = db, owner, lease_seconds
        self.stop = stop or threading.Event()  # set: every wrapped search proposes nothing more
        self.claims: dict[tuple[int, int], CandidateClaims] = {}
        self._lock = threading.Lock()  # tuners are made in the task scheduler's threads too

    def records_here(self, tuner: Any) -> bool:
        """Whether `tuner` records into this store (the claims and the records must be in one)."""
        db = tuner.db
        return db is self.db or (db is not None and db.location == self.db.location
                                 and str(db.location.path) != ":memory:")

    def wrap(self, tuner: Any) -> bool:
        """Make `tuner`'s search claim each candidate before it is measured; False (left
        as it is) when it records elsewhere, retunes (measures again what is recorded),
        or claims already."""
        if isinstance(tuner.strategy, ClaimingStrategy) or tuner.retune or not self.records_here(tuner):
            return False
        with self._lock:
            ids = self.db.ids(tuner.workload, tuner.target)
            if ids not in self.claims:
                self.claims[ids] = CandidateClaims(self.db, tuner.workload, tuner.target, self.owner,
                                                   self.lease_seconds)
            claims_ = self.claims[ids]
        tuner.strategy = ClaimingStrategy(tuner.strategy, claims_, self.stop)
        return True

    def _all(self) -> list[CandidateClaims]:
        with self._lock:
            return list(self.claims.values())

    def renew(self) -> int:
        return sum(c.renew() for c in self._all())

    def release(self) -> int:
        return sum(c.release() for c in self._all())
