"""A tuning run's record writes: one commit per result (`Database.add`) against the run's
group-commit writer (`RecordWriter`), on SQLite and PostgreSQL, side by side.

One process hands R results over as a tuning loop does, in batches of B (the writer is
flushed at the end of each batch, as the tuner does before telling the strategy).
Reported per cell: the loop's own time per result (what holds the driver back from the
cluster: the commit itself for `add`, the hand-over for the writer), the wall time until
all R are committed, and the commits made. Rounds interleave the two ways and both
stores; every record is counted back (a lost one is an error).

Usage (from the repository root, with the server of scripts/services.d/10-postgresql.sh):
    .venv/bin/python benchmarks/record_writer.py [--records 400] [--batch 32] [--rounds 3] \
        [--postgres URL] [--json docs/benchmarks/record_writer.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
import uuid

from tensortune.db import Database, Target, Workload
from tensortune.db.writer import RecordWriter
from tensortune.measure import MeasureResult
from tensortune.space import Config

T = Target.make("cpu", "bench")


def one_cell(store: str, way: str, records: int, batch: int) -> dict:
    db = Database(store)
    w = Workload.make("bench.record_writer", uuid.uuid4().hex, {"way": way})
    db.ids(w, T)  # ids made before the clock starts
    results = [MeasureResult(Config(i=i), (1e-3 + i * 1e-6,)) for i in range(records)]
    writer = RecordWriter(db, w, T, "bench", "s") if way == "writer" else None
    in_loop = 0.0
    start = time.perf_counter()
    for k in range(0, records, batch):
        for r in results[k:k + batch]:
            t0 = time.perf_counter()
            if writer:
                writer.add(r)
            else:
                db.add(w, T, r, strategy="bench", session="s")
            in_loop += time.perf_counter() - t0
        if writer:
            writer.flush()
    committed = time.perf_counter() - start
    commits = writer.commits if writer else records
    if writer:
        writer.close()
    stored = len(db.records(w, T))
    db.close()
    if stored != records:
        raise RuntimeError(f"{way} on {store}: {stored} of {records} records stored")
    return {"loop_ms_per_result": 1e3 * in_loop / records, "committed_seconds": committed, "commits": commits}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=400)
    parser.add_argument("--batch", type=int, default=32, help="results between flushes (the tuner's batch)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--postgres", default=os.environ.get("TENSORTUNE_TEST_POSTGRES_URL"),
                        help="a PostgreSQL URL (default: $TENSORTUNE_TEST_POSTGRES_URL; none: SQLite only)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    stores = {"sqlite": os.path.join(tempfile.mkdtemp(prefix="tt-recwriter-"), "t.db")}
    if args.postgres:
        stores["postgresql"] = args.postgres
    cells: dict[str, list[dict]] = {}
    for r in range(args.rounds):
        ways = ("add", "writer") if r % 2 == 0 else ("writer", "add")
        for store, where in stores.items():
            for way in ways:
                row = one_cell(where, way, args.records, args.batch)
                cells.setdefault(f"{store}/{way}", []).append(row)
                print(f"  round {r} {store:10s} {way:6s}: loop {row['loop_ms_per_result']:.3f} ms/result, "
                      f"all committed in {row['committed_seconds']:.2f} s, {row['commits']} commits", flush=True)
    table = []
    for key, rows in cells.items():
        store, way = key.split("/")
        table.append({"store": store, "way": way,
                      "loop_ms_per_result": statistics.median(x["loop_ms_per_result"] for x in rows),
                      "committed_seconds": statistics.median(x["committed_seconds"] for x in rows),
                      "commits": statistics.median(x["commits"] for x in rows)})
    out = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform()}, "args": vars(args),
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cells": cells, "summary": table}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    print()
    print(f"{'store':10s} {'way':6s} {'loop ms/result':>14s} {'all committed s':>15s} {'commits':>8s}  "
          f"(median of {args.rounds}, {args.records} records, flushed every {args.batch})")
    for row in table:
        print(f"{row['store']:10s} {row['way']:6s} {row['loop_ms_per_result']:14.3f} {row['committed_seconds']:15.2f} "
              f"{row['commits']:8.0f}")


if __name__ == "__main__":
    main()
