"""Measure the default strategy's column of published benchmark files again, keeping the others.

When `auto` changes, every published figure of it has to be measured again. The other
columns (our other strategies, Kernel Tuner's and Optuna's) do not change, since their
code did not, and re-running the peers for hours would only reproduce them. So for each
file, `auto` runs again on every dataset of the file, on the file's seeds (`first_seed`
and the repeats its cells record) and at `--budgets` (default: all of the file's; a
budget whose choice did not change may be left out and its cells kept). A run shared by
several files (same dataset, seed and budget) is made once.

Each run is appended to the `--runs` file (JSON lines) the moment it ends, and runs
found there are not made again, so the work can be split over several commands (by
`--only` or by a time limit) and resumed. A file is rewritten when all its runs are in:
its `auto` cells, its mean over datasets, and for a peers file the comparison with the
best peer are recomputed, a `refreshed` entry records the date, the budgets, the command
and the machine, and its plot (the PNG beside it, if any) is drawn again.

Usage (from the repository root):
    .venv/bin/python benchmarks/refresh_default.py docs/benchmarks/strategies.json [...]
        --runs .exp/default_runs.jsonl [--budgets 100,200] [--only convolution_milo-A100,...]
        [--datasets DIR ...] [--jobs 2] [--made-on TEXT] [--dry-run]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import datetime
import json
import os
import platform
import sys
import time

from tensortune.bench.replay import ReplayTask, RunResult, mean_over_datasets, run_tasks, summarize
from tensortune.datasets import dataset_name, find_datasets

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from peers import best_peers  # noqa: E402  (a sibling script, not a package)

OURS = "auto"
DEFAULT_DIRS = [os.path.join(HERE, "..", "..", "shared", "datasets", "kernel_tuner"),
                os.path.join(HERE, "..", "docs", "benchmarks", "spaces"),
                os.path.join(HERE, "..", "docs", "benchmarks", "spaces_held_out")]


def dataset_paths(dirs: list[str]) -> dict[str, str]:
    """Dataset name (as the benchmark files key it) -> cache file."""
    return {dataset_name(p): str(p) for d in dirs if os.path.isdir(d) for p in find_datasets(d)}


def wanted_runs(payload: dict, budgets: list[int] | None) -> set[tuple[str, int, int]]:
    """(dataset, budget, seed) of every `auto` run the file's cells stand for."""
    first = int(payload.get("first_seed", 0))
    out = set()
    for ds, per_strategy in payload["datasets"].items():
        for b, cell in per_strategy.get(OURS, {}).items():
            if budgets is None or int(b) in budgets:
                out.update((ds, int(b), first + i) for i in range(int(cell["runs"])))
    return out


def load_runs(path: str) -> dict[tuple[str, int, int], RunResult]:
    """The runs logged at `path`. A last line cut short (the command was killed while writing
    it) is skipped with a warning, and its run is made again; any other bad line is an error."""
    runs: dict[tuple[str, int, int], RunResult] = {}
    if not os.path.exists(path):
        return runs
    with open(path, encoding="utf-8") as f:
        lines = [line for line in f.read().split("\n") if line.strip()]
    for number, line in enumerate(lines, 1):
        try:
            r = RunResult(**json.loads(line))
        except (json.JSONDecodeError, TypeError) as e:
            if number == len(lines):
                print(f"{path}: line {number} is cut short, its run will be made again", flush=True)
                break
            raise SystemExit(f"{path}: line {number} is not a logged run ({e})") from e
        runs[(r.dataset, r.budget, r.seed)] = r
    return runs


def refreshed(payload: dict, runs: dict[tuple[str, int, int], RunResult], wanted: set, note: dict) -> dict:
    """The file with its `auto` cells made of `runs` and everything derived from them recomputed."""
    fresh = summarize(runs[k] for k in sorted(wanted))
    out = copy.deepcopy(payload)
    for ds, per_strategy in fresh.items():
        out["datasets"][ds][OURS].update(per_strategy[OURS])
    if "mean" in out:
        out["mean"] = mean_over_datasets(out["datasets"])
    if "versus_best_peer" in out:
        summary = out["datasets"]
        peers = sorted({s for per in summary.values() for s in per if ":" in s})
        six = [d for d in summary if "H100" not in d]
        out["versus_best_peer"] = best_peers(summary, out["budgets"], peers, six)
    out["refreshed"] = note
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+")
    p.add_argument("--runs", required=True, help="JSON lines of runs made (read, then appended to)")
    p.add_argument("--budgets", default=None, help="comma-separated budgets to re-run (default: all)")
    p.add_argument("--only", default=None, help="run now only datasets whose name holds one of these (comma-separated)")
    p.add_argument("--datasets", nargs="+", default=DEFAULT_DIRS, help="folders holding the datasets")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--made-on", default=None, help="the machine the runs were made on (default: this one)")
    p.add_argument("--dry-run", action="store_true", help="say what would run, run nothing")
    args = p.parse_args()
    budgets = [int(b) for b in args.budgets.split(",")] if args.budgets else None
    payloads = {}
    for f in args.files:
        with open(f, encoding="utf-8") as fh:
            payloads[f] = json.load(fh)
    wanted = {f: wanted_runs(payload, budgets) for f, payload in payloads.items()}
    runs = load_runs(args.runs)
    paths = dataset_paths(args.datasets)
    todo = sorted(set().union(*wanted.values()) - set(runs))
    if args.only:
        todo = [k for k in todo if any(part in k[0] for part in args.only.split(","))]
    missing = sorted({k[0] for k in todo} - set(paths))
    if missing:
        sys.exit(f"no dataset file for {', '.join(missing)} under {', '.join(args.datasets)}")
    print(f"{len(runs)} runs on record, {len(todo)} to make", flush=True)
    if args.dry_run:
        return
    start = time.perf_counter()
    os.makedirs(os.path.dirname(os.path.abspath(args.runs)), exist_ok=True)
    with open(args.runs, "a", encoding="utf-8") as log:
        def keep(r: RunResult) -> None:
            runs[(r.dataset, r.budget, r.seed)] = r
            log.write(json.dumps(dataclasses.asdict(r)) + "\n")
            log.flush()

        run_tasks([ReplayTask(paths[ds], OURS, b, seed) for ds, b, seed in todo], args.jobs, keep)
    print(f"made {len(todo)} runs in {time.perf_counter() - start:.0f} s", flush=True)
    note = {"strategy": OURS, "budgets": budgets or "all", "date": datetime.date.today().isoformat(),
            "command": "benchmarks/refresh_default.py " + " ".join(sys.argv[1:]),
            "machine": args.made_on or f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"}
    for f, payload in payloads.items():
        if not wanted[f] <= set(runs):
            print(f"{f}: {len(wanted[f] - set(runs))} runs still missing, left as it was")
            continue
        fresh = refreshed(payload, runs, wanted[f], note)
        with open(f, "w", encoding="utf-8") as out:
            json.dump(fresh, out, indent=2)
        print(f"{f}: {len(wanted[f])} runs of {OURS}, rewritten")
        redraw(f, fresh)


def redraw(path: str, payload: dict) -> None:
    """The file's plot drawn again, as `bench strategies` draws it, where it has one."""
    from tensortune.bench.plot import plot_curves
    from tensortune.cli.bench_cmd import PUBLISHED_TPE_MEAN

    png = os.path.splitext(path)[0] + ".png"
    if not os.path.exists(png):
        return
    live_tpe = any("optuna:tpe" in per for per in payload["datasets"].values())
    plot_curves(payload["datasets"], png, {} if live_tpe else {"optuna_tpe (published)": PUBLISHED_TPE_MEAN})
    print(f"{png}: redrawn")


if __name__ == "__main__":
    main()
