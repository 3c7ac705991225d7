"""The TPE options that are not defaults, replayed on every measured space at 100 seeds.

- `--independent`: the `tpe` strategy with `multivariate=False` (per-parameter densities),
  against which the multivariate default is compared in docs/benchmarks/strategies_experiments.md
  ("TPE in our own hands"; the default form's figures: strategies_tpe_100seeds.json).
- `--without-invalid`: `tpe` with `learn_invalid=False` (an invalid draw is redrawn, and
  nothing is learned from it), the form measured before learned invalid draws became the
  default (strategies_tpe_without_invalid_100seeds.json).
- `--share`: `evolutionary` with `tpe_share=0.5` (half of every plan that is not stalled
  drawn by TPE), against the default's 100-seed figures (strategies_100seeds.json and
  peers_cuda_convolution_100seeds.json, the same seeds).
- `--bandit`: the `bandit` strategy over `evolutionary` and `tpe`, against the same.
- `--screened`: `screened_tpe` (TPE's candidates screened by the cost model) without
  corner bests, as it was from the sixteenth to the eighteenth session, against the same
  (strategies_screened_tpe_100seeds.json).
- `--corners`: `screened_tpe` with `corner_bests=True, corner_fade=False` (each switch
  corner's best kept in TPE's good set for the whole run), against `auto`
  (strategies_corner_bests_100seeds.json).
- `--fade`: `screened_tpe` as it is now, the corners' share shrinking to nothing over the
  budget (`corner_fade=True`), which `auto` runs from 100 measurements up
  (strategies_fade_seeds300-399.json).
- `--learn-repeats`: `tpe` telling a measured configuration's time again whenever it is
  proposed again (`learn_repeats=True`), as Optuna's ask/tell loop does, against Optuna's
  TPE in the peers' 100-seed files (strategies_tpe_repeats_100seeds.json).
- `--screened-repeats`: the default `screened_tpe` with `learn_repeats=True`, against the
  default (strategies_screened_repeats_seeds0-49.json: `--repeats 50 --budgets 100,200
  --only RTX_3090,milo,cuda_conv`).

The spaces: the six Kernel Tuner caches (../shared/datasets/kernel_tuner), the nine H100
spaces (docs/benchmarks/spaces) and the two held out (docs/benchmarks/spaces_held_out).
`--only A,B` keeps the spaces whose file name contains one of the substrings, `--budgets`
picks budgets, `--first-seed` the first of the seeds (convolution_milo-A100 has been
replayed up to seed 599, so held-out checks there start at 600).

`--plot FILE` draws the variants' curves beside `auto`, `tpe` and `evolutionary` from the published
100-seed files; `--plot-only JSON` draws a file this script wrote (or several runs of it
merged) without replaying anything.

Usage (from the repository root):
    .venv/bin/python benchmarks/tpe_variants.py --independent [--json OUT] [--jobs 2]
    .venv/bin/python benchmarks/tpe_variants.py --share [--only convolution_milo-A100 --budgets 100]
    python3 benchmarks/tpe_variants.py --bandit --jobs 16 --datasets DIR   # on 16 cores
    .venv/bin/python benchmarks/tpe_variants.py --plot-only docs/benchmarks/strategies_screened_tpe_100seeds.json \
        --plot docs/benchmarks/strategies_screened_tpe_100seeds.png
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import os
import sys
import time

from tensortune.bench.plot import plot_curves
from tensortune.bench.replay import RunResult, run_many, summarize

HERE = os.path.dirname(os.path.abspath(__file__))
PUBLISHED = os.path.join(HERE, "..", "docs", "benchmarks")
BESIDE = {"auto": ["strategies_100seeds.json", "peers_cuda_convolution_100seeds.json",
                   "strategies_relu_tall_100seeds.json"],
          "tpe": ["strategies_tpe_100seeds.json"],
          "evolutionary": ["strategies_evolutionary_100seeds.json"]}  # the default until the seventeenth session
SPACES = [os.path.join(HERE, "..", "..", "shared", "datasets", "kernel_tuner", "*-*.json.gz"),
          os.path.join(HERE, "..", "docs", "benchmarks", "spaces", "*.json.gz"),
          os.path.join(HERE, "..", "docs", "benchmarks", "spaces_held_out", "*.json.gz")]
VARIANTS = {"independent": ("tpe", {"multivariate": False}),
            "without-invalid": ("tpe", {"learn_invalid": False}),
            "share": ("evolutionary", {"tpe_share": 0.5}),
            "bandit": ("bandit", {"arms": ("evolutionary", "tpe")}),
            "screened": ("screened_tpe", {"corner_bests": False}),
            "corners": ("screened_tpe", {"corner_bests": True, "corner_fade": False}),
            "fade": ("screened_tpe", {"corner_bests": True, "corner_fade": True}),
            "learn-repeats": ("tpe", {"learn_repeats": True}),
            "screened-repeats": ("screened_tpe", {"learn_repeats": True})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in VARIANTS:
        parser.add_argument(f"--{name}", action="store_true")
    parser.add_argument("--budgets", default="20,50,100,200")
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--only", default="")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json", default="")
    parser.add_argument("--runs", default="", help="append every run, as it finishes, to this JSON-lines file "
                        "(for paired comparisons; nothing is lost if the job is stopped)")
    parser.add_argument("--plot", default="", help="write the curves, beside auto's, tpe's and evolutionary's, as PNG")
    parser.add_argument("--plot-only", default="", help="plot this JSON of an earlier run instead of replaying")
    parser.add_argument("--datasets", default="", help="a folder holding the six Kernel Tuner caches, "
                        "where ../shared/datasets/kernel_tuner is not beside the repository")
    args = parser.parse_args()
    if args.plot_only:
        with open(args.plot_only, encoding="utf-8") as f:
            plot_beside_published(json.load(f)["datasets"], args.plot or args.plot_only.replace(".json", ".png"))
        return
    chosen = [name for name in VARIANTS if getattr(args, name.replace("-", "_"))]
    patterns = [os.path.join(args.datasets, "*-*.json.gz")] + SPACES[1:] if args.datasets else SPACES
    only = args.only.split(",")
    paths = sorted(p for pattern in patterns for p in glob.glob(pattern)
                   if any(part in os.path.basename(p) for part in only))
    if not chosen or not paths:
        named = ", ".join(f"--{name}" for name in VARIANTS)
        sys.exit(f"name a variant ({named}) and have spaces to replay (../shared present, or --datasets?)")
    budgets = [int(b) for b in args.budgets.split(",")]
    out = {"repeats": args.repeats, "first_seed": args.first_seed, "budgets": budgets, "datasets": {}}
    for name in chosen:
        strategy, options = VARIANTS[name]
        start = time.perf_counter()
        with open(args.runs or os.devnull, "a", encoding="utf-8") as stream:
            def record(run: RunResult, variant: str = name) -> None:
                stream.write(json.dumps({"variant": variant, **dataclasses.asdict(run)}) + "\n")
                stream.flush()
            summary = summarize(run_many(paths, [strategy], budgets, args.repeats, jobs=args.jobs,
                                         first_seed=args.first_seed, options={strategy: options},
                                         on_result=record))
        print(f"{name}: {strategy} {options}, {len(paths)} spaces, {time.perf_counter() - start:.0f} s")
        for dataset, by_strategy in summary.items():
            out["datasets"].setdefault(dataset, {})[name] = by_strategy[strategy]
            print(f"  {dataset:36s}", " / ".join(f"{by_strategy[strategy][str(b)]['mean']:.3f}" for b in budgets))
        means = [sum(summary[d][strategy][str(b)]["mean"] for d in summary) / len(summary) for b in budgets]
        print(f"  {'mean over the spaces':36s}", " / ".join(f"{m:.3f}" for m in means))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=2)
    if args.plot:
        plot_beside_published(out["datasets"], args.plot)


def plot_beside_published(datasets: dict, path: str) -> None:
    """Curves of the variants in `datasets`, with auto's, tpe's and evolutionary's published
    100-seed figures on the same spaces."""
    summary = {d: dict(by_variant) for d, by_variant in datasets.items()}
    for name, files in BESIDE.items():
        for file in files:
            with open(os.path.join(PUBLISHED, file), encoding="utf-8") as f:
                for dataset, by_strategy in json.load(f)["datasets"].items():
                    if dataset in summary and name in by_strategy:
                        summary[dataset].setdefault(name, by_strategy[name])
    plot_curves(summary, path)
    print(f"plot: {path}")


if __name__ == "__main__":
    main()
