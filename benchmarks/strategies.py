"""The strategies benchmark as published in docs/benchmarks/strategies.md.

Runs `tensortune bench strategies` on the six Kernel Tuner spaces of ../shared/datasets
(the default strategy and random search at 20 repeats, the other strategies at fewer)
and `tensortune bench model` (the ranking model the strategies use, and the regression
model at depth 5 and 7), writing JSON and the plot next to the docs page. With
`--held-out-seeds`, the default strategy and random search run again on seeds 20..59,
which no setting was chosen on; with `--h100-spaces`, six strategies run on the
spaces we measured on the H100 (docs/benchmarks/spaces: two matmul grids and seven of the
auto-scheduler's sketch spaces); with `--hundred-seeds`,
the default strategy and random search run 100 repeats on the six spaces and the
H100 ones, for means with small standard errors; with `--without-switches`, the
evolutionary search with `explore_switches=False` (the default until 2026-11-22) runs the
same 100 repeats, printed beside the evolutionary search's own (the default's until the
seventeenth session, strategies_evolutionary_100seeds.json); with
`--without-switches-held-out`, the evolutionary search with and without it run side by side
on seeds 100..199 (the two convolution_milo spaces, N=100 and 200), seeds per-switch
exploring was not found on.

Usage (from the repository root):
    .venv/bin/python benchmarks/strategies.py [--jobs 2] [--out docs/benchmarks] [--other-repeats 5]
        [--skip-strategies] [--skip-model] [--held-out-seeds] [--h100-spaces] [--hundred-seeds]
        [--without-switches] [--without-switches-held-out]
"""

from __future__ import annotations

import argparse
import json
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
    parser.add_argument("--skip-strategies", action="store_true")
    parser.add_argument("--skip-model", action="store_true")
    parser.add_argument("--held-out-seeds", action="store_true")
    parser.add_argument("--h100-spaces", action="store_true")
    parser.add_argument("--hundred-seeds", action="store_true")
    parser.add_argument("--without-switches", action="store_true")
    parser.add_argument("--without-switches-held-out", action="store_true")
    args = parser.parse_args()
    if not os.path.isdir(args.datasets):
        sys.exit(f"no datasets at {args.datasets}")
    # `auto` is `evolutionary` below 100 measurements and `screened_tpe` from 100 up on all six spaces (no
    # budget covers a space), so neither is repeated
    others = ",".join(f"{s}={args.other_repeats}" for s in ("model_based", "annealing", "genetic", "local"))
    os.makedirs(args.out, exist_ok=True)
    strategies = ["bench", "strategies", "--dataset", args.datasets, "--budgets", "20,50,100,200",
                  "--jobs", str(args.jobs)]
    if not args.skip_strategies:
        cli.main([*strategies, "--repeats", str(args.repeats), "--strategies", f"auto,random,{others}",
                  "--output", os.path.join(args.out, "strategies.json")], standalone_mode=False)
    if args.held_out_seeds:
        cli.main([*strategies, "--repeats", "40", "--first-seed", "20", "--strategies", "auto,random",
                  "--output", os.path.join(args.out, "strategies_seeds20-59.json")], standalone_mode=False)
    h100_spaces = os.path.join(here, "..", "docs", "benchmarks", "spaces")
    if args.hundred_seeds:
        cli.main([*strategies, h100_spaces, "--repeats", "100", "--strategies", "auto",
                  "--output", os.path.join(args.out, "strategies_100seeds.json")], standalone_mode=False)
    if args.h100_spaces:
        cli.main(["bench", "strategies", "--dataset", h100_spaces,
                  "--budgets", "20,50,100,200", "--jobs", str(args.jobs), "--repeats", str(args.repeats),
                  "--strategies", "auto,random,model_based,local,annealing,genetic",
                  "--output", os.path.join(args.out, "strategies_h100_spaces.json")], standalone_mode=False)
    if args.without_switches:
        without_switches(args, h100_spaces)
    if args.without_switches_held_out:
        without_switches_held_out(args)
    if not args.skip_model:
        model = ["bench", "model", "--dataset", args.datasets, "--train-fraction", "0.1"]
        for extra, name in (([], "strategies_model"), (["--objective", "regression"], "strategies_model_regression"),
                            (["--objective", "regression", "--max-depth", "7"],
                             "strategies_model_regression_depth7")):
            cli.main([*model, *extra, "--output", os.path.join(args.out, f"{name}.json")], standalone_mode=False)


WITHOUT = {"evolutionary": {"explore_switches": False}}


def without_switches(args: argparse.Namespace, h100_spaces: str) -> None:
    """The default against the same search without per-switch exploring, 100 seeds on the six spaces and
    the H100 ones."""
    from tensortune.bench.replay import run_many, summarize
    from tensortune.datasets import find_datasets

    paths = [str(p) for folder in (args.datasets, h100_spaces) for p in find_datasets(folder)]
    summary = summarize(run_many(paths, ["evolutionary"], [20, 50, 100, 200], 100, jobs=args.jobs, options=WITHOUT))
    with open(os.path.join(args.out, "strategies_without_switches_100seeds.json"), "w", encoding="utf-8") as f:
        json.dump({"datasets": summary, "options": WITHOUT, "repeats": 100}, f, indent=2)
    # since the seventeenth session `auto` is `screened_tpe` from 100 measurements up: compare with the
    # evolutionary search's own 100 seeds
    default_path = os.path.join(args.out, "strategies_evolutionary_100seeds.json")
    default: dict = {}
    if os.path.exists(default_path):
        with open(default_path, encoding="utf-8") as f:
            default = json.load(f)["datasets"]
    print("evolutionary (strategies_evolutionary_100seeds.json) / explore_switches=False, mean over 100 seeds")
    for ds, per in summary.items():
        cells = []
        for b in ("20", "50", "100", "200"):
            ours = default.get(ds, {}).get("evolutionary", {}).get(b, {}).get("mean", float("nan"))
            cells.append(f"{ours:.3f} / {per['evolutionary'][b]['mean']:.3f}")
        print(f"  {ds[:34]:34s} " + "  ".join(cells))


WITHOUT_LABEL = "evolutionary[explore_switches=False]"


def without_switches_held_out(args: argparse.Namespace) -> None:
    """The evolutionary search with and without per-switch exploring, on seeds 100..199 of the
    two spaces it moves most (found on seeds 0..59 of convolution_milo-A4000)."""
    from tensortune.bench.replay import run_many, summarize

    paths = [os.path.join(args.datasets, f"convolution_milo-{gpu}.json.gz") for gpu in ("A100", "A4000")]
    summary = summarize(run_many(paths, ["evolutionary"], [100, 200], 100, jobs=args.jobs, first_seed=100))
    without = summarize(run_many(paths, ["evolutionary"], [100, 200], 100, jobs=args.jobs, first_seed=100,
                                 options=WITHOUT))
    for ds in summary:
        summary[ds][WITHOUT_LABEL] = without[ds]["evolutionary"]
    with open(os.path.join(args.out, "strategies_without_switches_seeds100-199.json"), "w", encoding="utf-8") as f:
        json.dump({"datasets": summary, "options": {WITHOUT_LABEL: WITHOUT["evolutionary"]}, "repeats": 100,
                   "first_seed": 100}, f, indent=2)
    print("seeds 100..199: evolutionary with / without explore_switches, mean ±se")
    for ds, per in summary.items():
        cells = [f"N={b}: " + " / ".join(f"{per[k][b]['mean']:.3f} ±{per[k][b]['se']:.3f}"
                                         for k in ("evolutionary", WITHOUT_LABEL)) for b in ("100", "200")]
        print(f"  {ds:24s} " + "  ".join(cells))


if __name__ == "__main__":
    main()
