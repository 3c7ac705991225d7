"""Where the cost model ranks a space's optimum when it never saw it, by how much it saw.

For each training share and each of several random splits, the model trains on that share
of the configurations other than the optimum and scores the rest plus the optimum. Printed
and written: the optimum's rank among the held-out configurations in each split, and the
top-5 error of that split. This tells a model that cannot learn an outlier from one that
has not seen enough around it (docs/benchmarks/strategies.md, "The cost model
alone"). Also written: how far the optimum stands out from its one-parameter neighbours,
and with `--compare` (the same kernel measured on another device) where that device's
times rank it.

Usage (from the repository root):
    .venv/bin/python benchmarks/model_optimum_rank.py [--dataset ../shared/datasets/kernel_tuner/convolution_milo-A100.json.gz]
        [--fractions 0.1,0.5,0.9] [--splits 10] [--compare OTHER_CACHE] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np

from tensortune.bench.replay import cached_dataset
from tensortune.model import FeatureExtractor, XGBParams, XGBRankModel, top_k_error

HERE = os.path.dirname(os.path.abspath(__file__))
A100 = os.path.join(HERE, "..", "..", "shared", "datasets", "kernel_tuner", "convolution_milo-A100.json.gz")
MODELS = {"rank": None, "regression, depth 7": XGBParams(objective="regression", max_depth=7)}


def optimum_ranks(path: str, fraction: float, splits: int, params: XGBParams | None) -> dict:
    """The optimum's rank among the held-out configurations, and the top-5 error, per split."""
    ds = cached_dataset(path)
    fx = FeatureExtractor(ds.space)
    configs = list(ds.results)
    times = np.asarray([ds.results[c].time for c in configs])
    X = fx.configs(configs)
    best = int(np.argmin(np.where(np.isfinite(times), times, np.inf)))
    ranks, errors = [], []
    for split in range(splits):
        others = np.asarray([i for i in np.random.default_rng(split).permutation(len(configs)) if i != best])
        n_train = int(round(fraction * len(configs)))
        train, test = others[:n_train], np.append(others[n_train:], best)
        model = XGBRankModel(params, seed=split, feature_names=fx.names)
        model.fit(X[train], times[train])
        scores = model.predict(X[test])
        ranks.append(int((scores > scores[-1]).sum()) + 1)
        errors.append(top_k_error(scores, times[test], 5))
    return {"held_out": len(configs) - n_train, "ranks": sorted(ranks), "median_rank": float(np.median(ranks)),
            "top5_error_pct": round(float(np.mean(errors)), 2)}


def neighbourhood(path: str, compare: str | None) -> dict:
    """The optimum's best one-parameter neighbour (its score, t_opt / t) and, with
    `compare`, the optimum's rank and score among that device's measured configurations."""
    ds = cached_dataset(path)
    best = ds.best_config
    near = [ds.score(r.time) for c, r in ds.results.items()
            if r.ok and sum(c[k] != best[k] for k in best) == 1]
    out = {"optimum": dict(best), "neighbours": len(near), "best_neighbour_score": round(max(near), 4)}
    if compare:
        other = cached_dataset(compare)
        order = sorted((r.time for r in other.results.values() if r.ok))
        there = other.results[best]
        out["compare"] = {"dataset": other.name, "score": round(other.score(there.time), 4),
                          "rank": order.index(there.time) + 1, "of": len(order)}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default=A100)
    p.add_argument("--fractions", default="0.1,0.5,0.9")
    p.add_argument("--splits", type=int, default=10)
    p.add_argument("--compare", default=None, help="the same space measured on another device")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    near = neighbourhood(args.dataset, args.compare)
    print(f"optimum {near['optimum']}: best of its {near['neighbours']} one-parameter neighbours scores "
          f"{near['best_neighbour_score']:.3f}" + (f"; on {near['compare']['dataset']} it ranks "
          f"{near['compare']['rank']} of {near['compare']['of']} (score {near['compare']['score']:.3f})"
          if "compare" in near else ""))
    out: dict = {"dataset": os.path.basename(args.dataset), "splits": args.splits, "neighbourhood": near,
                 "results": {}}
    for name, params in MODELS.items():
        for fraction in (float(f) for f in args.fractions.split(",")):
            r = optimum_ranks(args.dataset, fraction, args.splits, params)
            out["results"].setdefault(name, {})[str(fraction)] = r
            print(f"{name:20s} trained on {fraction:4.0%}: optimum ranked {r['ranks']} of {r['held_out']} "
                  f"(median {r['median_rank']:g}), top-5 error {r['top5_error_pct']:.1f}%")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
