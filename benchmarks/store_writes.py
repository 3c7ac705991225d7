"""Records written per second by N concurrent processes into one store: SQLite against
PostgreSQL, side by side in one run.

Each cell starts N writer processes on a fresh store (an SQLite file; a PostgreSQL
schema of its own), lets them all start together, and times how long they take to
`Database.add` R records each (one committed insert per record, as the tuner writes
them), from the start signal to the last record committed; the rate is N * R over that
wall time. Cells are measured in rounds, the two
backends interleaved, so that load from other processes hits both alike; the table
shows the median over rounds, and every record is counted back (a lost one is an error).

Usage (from the repository root, with the server of scripts/services.d/10-postgresql.sh):
    .venv/bin/python benchmarks/store_writes.py [--processes 1 2 4 8] [--records 500] [--rounds 3] \
        [--postgres URL] [--json docs/benchmarks/store_writes.json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import tempfile
import time
import uuid

from tensortune.db import Database, Target, Workload
from tensortune.measure import MeasureResult
from tensortune.space import Config

W = Workload.make("bench.store_writes", "v1", {"n": 1})
T = Target.make("cpu", "bench")


def _writer(store: str, proc: int, records: int, start, ready, finished) -> None:
    db = Database(store)
    db.add(W, T, MeasureResult(Config(proc=proc, i=-1), (1.0,)))  # ids made before the clock starts
    ready.put(proc)
    start.wait()
    for i in range(records):
        db.add(W, T, MeasureResult(Config(proc=proc, i=i), (1e-3 + i * 1e-9,), compile_seconds=0.1,
                                   run_seconds=0.01, extra={"repeats": 5}), strategy="bench")
    finished.put(time.monotonic())  # the last record committed (process exit is not timed)
    db.close()


def _cell(store: str, processes: int, records: int) -> float:
    """Records per second of `processes` writers into `store`, all of them checked back."""
    ctx = mp.get_context("spawn")
    start, ready, finished = ctx.Event(), ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(store, p, records, start, ready, finished), daemon=True)
             for p in range(processes)]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=120)
    began = time.monotonic()  # one clock for every process of this machine
    start.set()
    seconds = max(finished.get(timeout=600) for _ in procs) - began
    for p in procs:
        p.join(600)
        if p.exitcode != 0:
            raise RuntimeError(f"a writer into {store} failed (exit code {p.exitcode})")
    written = sum(1 for r in Database(store).records(W, T) if r.strategy == "bench")
    if written != processes * records:
        raise RuntimeError(f"{store}: {written} records of {processes * records} written")
    return processes * records / seconds


def _fresh_postgres(url: str) -> tuple[str, str]:
    import psycopg

    name = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}")
    return f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{name}", name


def _drop_postgres(url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {name} CASCADE")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--records", type=int, default=500, help="records per process")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--postgres", default=os.environ.get("TENSORTUNE_TEST_POSTGRES_URL"),
                    help="a PostgreSQL URL whose database may hold scratch schemas "
                         "(default: $TENSORTUNE_TEST_POSTGRES_URL)")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args()
    if not args.postgres:
        ap.error("give --postgres URL (or source scripts/services.d/10-postgresql.sh)")
    rates: dict[str, dict[int, list[float]]] = {"sqlite": {}, "postgresql": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for n in args.processes:
                for backend in ("sqlite", "postgresql") if r % 2 == 0 else ("postgresql", "sqlite"):
                    if backend == "sqlite":
                        rate = _cell(os.path.join(tmp, f"r{r}_n{n}.db"), n, args.records)
                    else:
                        store, schema = _fresh_postgres(args.postgres)
                        try:
                            rate = _cell(store, n, args.records)
                        finally:
                            _drop_postgres(args.postgres, schema)
                    rates[backend].setdefault(n, []).append(rate)
                    print(f"round {r + 1}: {backend:10s} {n} processes: {rate:8.0f} records/s", flush=True)
    print(f"\n{'processes':>9} | {'SQLite records/s':>16} | {'PostgreSQL records/s':>20} | PostgreSQL / SQLite")
    print(f"{'-' * 9}-+-{'-' * 16}-+-{'-' * 20}-+-{'-' * 19}")
    summary = {}
    for n in args.processes:
        s, p = statistics.median(rates["sqlite"][n]), statistics.median(rates["postgresql"][n])
        summary[n] = {"sqlite": s, "postgresql": p}
        print(f"{n:>9} | {s:>16.0f} | {p:>20.0f} | {p / s:>19.2f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"command": "benchmarks/store_writes.py " + " ".join(
                           f"--{k.replace('_', '-')} {' '.join(map(str, v)) if isinstance(v, list) else v}"
                           for k, v in vars(args).items() if k not in ("json", "postgres")),
                       "machine": f"{platform.node()} {platform.processor() or platform.machine()}, "
                                  f"{os.cpu_count()} CPUs (shared with other work)",
                       "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                       "records_per_process": args.records, "rounds": args.rounds,
                       "median_records_per_second": summary, "every_round": rates}, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
