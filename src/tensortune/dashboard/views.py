"""What the dashboard and the report show, as plain JSON-ready dicts built from the
records database through its public API (`Database.workloads`, `records`, `top_k`).

A workload and a target are named by a stable 16-hex-digit id (a hash of what
identifies them), so a URL stays valid while records are added.

Example:
    >>> import os, tempfile
    >>> from tensortune.db import Database, Target, Workload
    >>> from tensortune.measure import MeasureResult
    >>> from tensortune.space import Config
    >>> db = Database(os.path.join(tempfile.mkdtemp(), "t.db"))
    >>> w = Workload.make("saxpy", "src", {"n": 8})
    >>> _ = db.add(w, Target.make("cpu", "test"), MeasureResult(Config(a=1), (2e-3,)), session="s1")
    >>> view = workload_view(db, workload_id(w))
    >>> view["targets"][0]["sessions"][0]["points"][0]["best"]
    0.002
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter, defaultdict
from typing import Any

from ..db import Database, Record, Target, Workload

DEFAULT_TOP = 10
MAX_TOP = 1000
_ID = re.compile(r"[0-9a-f]{16}")


class BadRequest(ValueError):
    """Input that cannot name anything (a malformed id, a parameter out of range): HTTP 400."""


class NotFound(LookupError):
    """A well-formed id that names nothing in the database: HTTP 404."""


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def workload_id(w: Workload) -> str:
    """The dashboard's id of a workload: 16 hex digits, stable across runs."""
    return _digest(w.name, w.source_hash, w.key_json)


def target_id(t: Target) -> str:
    return _digest(t.kind, t.device, t.arch, t.versions_json)


def check_top(text: str | None) -> int:
    """The `top` parameter: how many best configurations to list per target."""
    if text is None or text == "":
        return DEFAULT_TOP
    if not text.isdigit() or not 1 <= int(text) <= MAX_TOP:
        raise BadRequest(f"top must be a whole number from 1 to {MAX_TOP}, got {text[:40]!r}")
    return int(text)


def find_workload(db: Database, wid: str) -> Workload:
    """The workload whose dashboard id is `wid`; BadRequest if `wid` is not an id at all,
    NotFound if no workload has it."""
    if not isinstance(wid, str) or not _ID.fullmatch(wid):
        raise BadRequest(f"a workload id is 16 hexadecimal digits (see /api/workloads), got {str(wid)[:40]!r}")
    for w, _, _ in db.workloads():
        if workload_id(w) == wid:
            return w
    raise NotFound(f"no workload has id {wid!r} in this database (see /api/workloads)")


def _target_labels(targets: list[Target]) -> dict[Target, str]:
    """A short label per target; versions that differ between targets of the same device
    are added, so that no two labels are the same."""
    base = {t: " · ".join(p for p in (t.kind, t.device, t.arch) if p) for t in targets}
    labels = {}
    for t in targets:
        peers = [u for u in targets if base[u] == base[t]]
        extra = sorted(k for k, v in t.versions.items() if any(u.versions.get(k) != v for u in peers))
        labels[t] = base[t] + "".join(f" · {k} {t.versions[k]}" for k in extra)
    return labels


def _target_head(t: Target, label: str) -> dict[str, Any]:
    return {"id": target_id(t), "label": label, "kind": t.kind, "device": t.device, "arch": t.arch,
            "versions": t.versions}


def _workload_head(w: Workload) -> dict[str, Any]:
    return {"id": workload_id(w), "name": w.name, "source_hash": w.source_hash, "key": w.key,
            "text": w.id_text}


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _targets_of(db: Database, w: Workload) -> list[dict[str, Any]]:
    """The targets a workload was measured on, with their records, successes and best time."""
    per: dict[Target, list[Any]] = defaultdict(lambda: [0, 0, math.inf])
    for rec in db.records(w):
        counts = per[rec.target]
        counts[0] += 1
        if rec.ok:
            counts[1] += 1
            counts[2] = min(counts[2], rec.time)
    labels = _target_labels(list(per))
    return [{**_target_head(t, labels[t]), "records": n, "successes": ok, "best_seconds": _finite(best)}
            for t, (n, ok, best) in per.items()]


Summaries = dict[Workload, tuple[tuple[int, Any], list[dict[str, Any]]]]


def workloads_view(db: Database, cache: Summaries | None = None) -> list[dict[str, Any]]:
    """Every workload with its records, best time and the targets it was measured on.

    `cache` (a dict kept between calls) keeps each workload's targets while its number of
    records and best time stay the same, so that a page reloaded while one workload is
    tuned reads only that workload's records again."""
    cache = {} if cache is None else cache
    out = []
    for w, n, fastest in db.workloads():
        if cache.get(w, ((None, None), None))[0] != (n, fastest):
            cache[w] = ((n, fastest), _targets_of(db, w))
        out.append({**_workload_head(w), "records": n, "best_seconds": fastest, "targets": cache[w][1]})
    return out


def _is_trial(rec: Record) -> bool:
    """A measurement the tuner charged: not an amendment of an earlier one, not a
    failure of the environment (retried)."""
    res = rec.to_result()
    return not res.amends and not res.environment


def _sessions(records: list[Record]) -> list[dict[str, Any]]:
    """Each tuning run's curve: the best time so far after each successful trial, against
    the trial number and the seconds since the run started (estimated from its first
    record: its time stamp less its compile and run seconds)."""
    by_session: dict[str, list[Record]] = defaultdict(list)
    for rec in records:
        by_session[rec.session].append(rec)
    out = []
    for sid, recs in by_session.items():
        start = min(r.created_at - r.compile_seconds - r.run_seconds for r in recs)
        trials, best, points = 0, math.inf, []
        for rec in recs:
            if not _is_trial(rec):
                continue
            trials += 1
            if rec.ok:
                best = min(best, rec.time)
                points.append({"trial": trials, "seconds": max(0.0, rec.created_at - start), "time": rec.time,
                               "best": best, "config": rec.config.as_dict()})
        strategies = sorted({r.strategy for r in recs if r.strategy})
        out.append({"id": sid, "label": sid or "(no session)", "strategy": ", ".join(strategies),
                    "started_at": start, "ended_at": max(r.created_at for r in recs), "trials": trials,
                    "successes": len(points), "best_seconds": _finite(best), "points": points})
    out.sort(key=lambda s: s["started_at"])
    return out


def _failures(records: list[Record]) -> list[dict[str, Any]]:
    """Failed records by error kind; the environment's failures (retried) and amendments
    (a success found to crash its worker later) apart from the candidates' own."""
    kinds: Counter[tuple[str, str]] = Counter()
    example: dict[tuple[str, str], str] = {}
    for rec in records:
        if rec.ok or rec.error is None:
            continue
        res = rec.to_result()
        cause = "environment" if res.environment else "amends" if res.amends else "candidate"
        key = (rec.error.value, cause)
        kinds[key] += 1
        example.setdefault(key, rec.message.strip().splitlines()[0][:300] if rec.message.strip() else "")
    return [{"kind": k, "cause": c, "count": n, "example": example[(k, c)]}
            for (k, c), n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))]


def _best(rec: Record) -> dict[str, Any]:
    res = rec.to_result()
    return {"config": rec.config.as_dict(), "config_json": rec.config.to_json(), "seconds": rec.time,
            "spread": res.spread, "repeats": len(rec.times), "strategy": rec.strategy, "session": rec.session,
            "created_at": rec.created_at}


def _comparison(db: Database, w: Workload, targets: list[Target], labels: dict[Target, str],
                ) -> dict[str, Any]:
    """The workload across targets: each target's best time (and how many times the
    fastest target's it is), and each target's best configuration as measured on every
    other target (None where it never was)."""
    standing = {t: {r.config.digest: r for r in db.top_k(w, t, MAX_TOP * 10)} for t in targets}
    winners = []
    for t in targets:
        top = next(iter(standing[t].values()), None)
        if top is not None and all(top.config.digest != c["digest"] for c in winners):
            winners.append({"digest": top.config.digest, "config": top.config.as_dict(),
                            "config_json": top.config.to_json(), "best_on": target_id(t)})
    fastest = min((next(iter(s.values())).time for s in standing.values() if s), default=None)
    rows = []
    for t in targets:
        top = next(iter(standing[t].values()), None)
        rows.append({"target": target_id(t), "label": labels[t], "best_seconds": top.time if top else None,
                     "slowdown": top.time / fastest if top and fastest else None,
                     "times": [standing[t][c["digest"]].time if c["digest"] in standing[t] else None
                               for c in winners]})
    return {"configs": winners, "targets": rows}


def workload_view(db: Database, wid: str, top: int = DEFAULT_TOP) -> dict[str, Any]:
    """Everything the dashboard shows of one workload, per target: the runs' curves, the
    measured times, failures by kind and the best configurations; and the comparison
    across targets."""
    w = find_workload(db, wid)
    records = db.records(w)
    by_target: dict[Target, list[Record]] = defaultdict(list)
    for rec in records:
        by_target[rec.target].append(rec)
    targets = list(by_target)
    labels = _target_labels(targets)
    views = []
    for t in targets:
        recs = by_target[t]
        views.append({**_target_head(t, labels[t]), "records": len(recs),
                      "successes": sum(r.ok for r in recs),
                      "times": sorted(r.time for r in recs if r.ok),
                      "sessions": _sessions(recs), "failures": _failures(recs),
                      "best": [_best(r) for r in db.top_k(w, t, top)]})
    return {"workload": {**_workload_head(w), "records": len(records)}, "targets": views,
            "comparison": _comparison(db, w, targets, labels)}
