"""The strategies benchmark as published in docs/benchmarks/strategies.md.

Runs `tensortune bench strategies` on the six Kernel Tuner spaces of ../shared/datasets
(the default strategy and random search at 20 repeats, the other strategies at fewer)
and `tensortune bench model`, writing JSON and the plot next to the docs page.

Usage (from the repository root):
    .venv/bin/python benchmarks/strategies.py [--jobs 2] [--out docs/benchmarks] [--other-repeats 5]
"""

from __future__ import annotations

import argparse
import os
import sys

from tensortune.cli.main import cli


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default=os.path.join(here, "..", "..", "shared", "datasets", "kernel_tuner"))
    parser.add_argument("--out", default=os.path.join(here, "..", "docs", "benchmarks"))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--other-repeats", type=int, default=5)
    parser.add_argument("--skip-model", action="store_true")
    args = parser.parse_args()
    if not os.path.isdir(args.datasets):
        sys.exit(f"no datasets at {args.datasets}")
    # `auto` is `evolutionary` on all six spaces (no budget covers a space), so that one is not repeated
    others = ",".join(f"{s}={args.other_repeats}" for s in ("model_based", "annealing", "genetic", "local"))
    os.makedirs(args.out, exist_ok=True)
    run = [
        "bench", "strategies", "--dataset", args.datasets, "--budgets", "20,50,100,200",
        "--repeats", str(args.repeats), "--strategies", f"auto,random,{others}", "--jobs", str(args.jobs),
        "--json", os.path.join(args.out, "strategies.json"), "--plot", os.path.join(args.out, "strategies.png"),
    ]
    cli.main(run, standalone_mode=False)
    if not args.skip_model:
        cli.main(["bench", "model", "--dataset", args.datasets, "--train-fraction", "0.1",
                  "--json", os.path.join(args.out, "strategies_model.json")], standalone_mode=False)


if __name__ == "__main__":
    main()
