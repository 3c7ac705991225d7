"""The default strategy against the peers, run side by side on the same replayed spaces.

One `tensortune bench strategies` run holds our default strategy (`auto`), random search
and the peers the issue measured: Optuna 5.0's TPE and nine Kernel Tuner 1.5 strategies
in simulation mode (tensortune.bench.peers), on the six Kernel Tuner spaces of
../shared/datasets and the spaces we measured on the H100
(docs/benchmarks/spaces), at 20, 50, 100 and 200 measurements. Then, per dataset and
budget, the best peer and the ratio of our mean to its mean (above 1: we are ahead),
printed as a table and written to JSON with the raw figures. With `--hundred-seeds`,
100 repeats of our default and of the peers that were the best somewhere at 20 repeats
(TPE, genetic algorithm, simulated annealing, particle swarm, differential evolution),
for means with small standard errors (peers_100seeds.json).

Needs the peers extra: `.venv/bin/pip install -e '.[peers]'`.

By default the run covers every space of ../shared/datasets/kernel_tuner and of
docs/benchmarks/spaces; `--dataset` names others (files or folders) and `--name` the JSON
written. Each run is seeded on its own, so a dataset's figures do not depend on which
others share the run.

Usage (from the repository root):
    .venv/bin/python benchmarks/peers.py [--jobs 2] [--repeats 20] [--out docs/benchmarks] [--hundred-seeds]
        [--dataset PATH ...] [--name peers_sketch_spaces] [--peers optuna:tpe,kt:bayes_opt]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from rich.console import Console
from rich.table import Table

from tensortune.cli.main import cli

PEERS = ["optuna:tpe", "kt:genetic_algorithm", "kt:simulated_annealing", "kt:pso", "kt:diff_evo",
         "kt:bayes_opt", "kt:mls", "kt:greedy_ils", "kt:dual_annealing", "kt:random_sample"]
BEST_SOMEWHERE = PEERS[:5]
OURS = "auto"
SIX = "the six Kernel Tuner spaces"


def best_peers(summary: dict, budgets: list[int], peers: list[str], six: list[str]) -> dict:
    """budget -> {dataset: {best_peer, peer, ours, ratio}} for every dataset, plus a row for
    the mean over the `six` Kernel Tuner spaces (the best peer there has the best mean, as
    the issue ranks peers)."""
    out: dict = {}
    for b in map(str, budgets):
        rows = {}
        for ds, per_strategy in summary.items():
            means = {s: v[b]["mean"] for s, v in per_strategy.items() if s in peers}
            name = max(means, key=lambda s: means[s])
            ours = per_strategy[OURS][b]["mean"]
            rows[ds] = {"best_peer": name, "peer": means[name], "ours": ours, "ratio": round(ours / means[name], 4)}
        if not six:
            out[b] = rows
            continue
        means = {s: sum(summary[ds][s][b]["mean"] for ds in six) / len(six) for s in [*peers, OURS]}
        name = max(peers, key=lambda s: means[s])
        rows[SIX] = {"best_peer": name, "peer": round(means[name], 4), "ours": round(means[OURS], 4),
                     "ratio": round(means[OURS] / means[name], 4)}
        out[b] = rows
    return out


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default=os.path.join(here, "..", "..", "shared", "datasets", "kernel_tuner"))
    parser.add_argument("--out", default=os.path.join(here, "..", "docs", "benchmarks"))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--budgets", default="20,50,100,200")
    parser.add_argument("--hundred-seeds", action="store_true")
    parser.add_argument("--dataset", nargs="+", default=None, help="spaces to run instead of the default ones")
    parser.add_argument("--name", default=None, help="the JSON's name, without .json")
    parser.add_argument("--peers", default=None, help="comma-separated peers instead of the default ones")
    args = parser.parse_args()
    peers, name = (BEST_SOMEWHERE, "peers_100seeds") if args.hundred_seeds else (PEERS, "peers")
    peers = args.peers.split(",") if args.peers else peers
    repeats = 100 if args.hundred_seeds else args.repeats
    datasets = args.dataset or [args.datasets, os.path.join(here, "..", "docs", "benchmarks", "spaces")]
    missing = [d for d in datasets if not os.path.exists(d)]
    if missing:
        sys.exit(f"no datasets at {', '.join(missing)}")
    os.makedirs(args.out, exist_ok=True)
    raw = os.path.join(args.out, f"{args.name or name}.json")
    cli.main(["bench", "strategies", "--dataset", *datasets, "--budgets", args.budgets,
              "--repeats", str(repeats), "--jobs", str(args.jobs), "--strategies", ",".join([OURS, *peers]),
              "--output", raw], standalone_mode=False)
    with open(raw, encoding="utf-8") as f:
        payload = json.load(f)
    summary, budgets = payload["datasets"], payload["budgets"]
    six = [d for d in summary if "H100" not in d]
    ratios = best_peers(summary, budgets, peers, six)
    table = Table(title=f"{OURS} / best peer: mean t_opt/t_best over {repeats} runs (ratio > 1: ahead)")
    table.add_column("dataset")
    for b in budgets:
        table.add_column(f"N={b}", justify="right")
    for ds in [*summary, SIX] if six else summary:
        cells = []
        for b in map(str, budgets):
            row = ratios[b][ds]
            peer = row["best_peer"].removeprefix("kt:")
            cells.append(f"{row['ratio']:.3f} ({row['ours']:.3f} / {row['peer']:.3f} {peer})")
        table.add_row(ds, *cells)
    Console().print(table)
    payload["versus_best_peer"] = ratios
    with open(raw, "w", encoding="utf-8") as f:
        json.dump(payload, f, indent=2)
    print(f"wrote {raw}")


if __name__ == "__main__":
    main()
