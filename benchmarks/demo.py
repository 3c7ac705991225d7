"""The main job's figures: tune the C matmul from a fresh database, then ask again.

Prints a table and writes docs/benchmarks/demo.json (or --json PATH):

    .venv/bin/python benchmarks/demo.py --seconds 60
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

from tensortune.db import Database
from tensortune.demo.matmul import run_demo
from tensortune.tuner import Budget


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--json", default="docs/benchmarks/demo.json")
    opts = parser.parse_args()
    db = Database(Path(tempfile.mkdtemp(prefix="tensortune-demo-")) / "tuning.db")
    n = opts.size
    first = run_demo(db, n, n, n, Budget(seconds=opts.seconds), progress=False)
    start = time.perf_counter()
    second = run_demo(db, n, n, n, Budget(seconds=opts.seconds), progress=False)
    second_seconds = time.perf_counter() - start
    rows = [
        ("tuned GFLOP/s", f"{first.best_gflops:.1f}"),
        ("untuned default GFLOP/s", f"{first.baseline_gflops:.1f}"),
        ("speed-up over default", f"{first.speedup:.2f}x"),
        ("numpy GFLOP/s (same run, interleaved)", f"{first.numpy_gflops:.1f}"),
        ("tuned / numpy", f"{first.best_gflops / first.numpy_gflops:.2f}"),
        ("trials (failed)", f"{first.trials} ({first.failures})"),
        ("tuning wall time", f"{first.seconds:.1f} s"),
        ("second run: from database", f"{second.from_db} in {second_seconds:.2f} s"),
        ("best configuration", json.dumps(first.best_config, sort_keys=True)),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    out = {"date": time.strftime("%Y-%m-%d"), "machine": platform.processor() or platform.machine(),
           "first": first.__dict__, "second_from_db": second.from_db, "second_seconds": second_seconds}
    Path(opts.json).write_text(json.dumps(out, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
