"""The cost model with features that are not in the default set, on measured spaces.

Trains the depth-7 regression model (the one to use where its top picks are taken without
measuring) on 10% of each space, 10 splits, as `tensortune bench model` does, three ways:
with the default features only, with the pipelined tile footprint of a Triton matmul
(`num_stages * BLOCK_K * (BLOCK_M + BLOCK_N) * 2` bytes, where the space has those
parameters), and with every product of three numeric parameters. This is how the deep-K
Triton matmul's top-5 error was examined (docs/benchmarks/strategies.md, "The cost model
alone"): neither feature set is in the default features.

Usage (from the repository root):
    .venv/bin/python benchmarks/model_extra_features.py [--datasets DIR_OR_FILE ...] [--splits 10]
        [--json OUT]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
from collections.abc import Callable, Sequence

import numpy as np

from tensortune.bench.model_quality import evaluate_model
from tensortune.bench.replay import cached_dataset
from tensortune.datasets import find_datasets
from tensortune.model import XGBParams
from tensortune.space import Config, Space

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DATASETS = [os.path.join(HERE, "..", "..", "shared", "datasets", "kernel_tuner"),
                    os.path.join(HERE, "..", "docs", "benchmarks", "spaces"),
                    os.path.join(HERE, "..", "docs", "benchmarks", "spaces_held_out")]
MATMUL_TILE = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_stages")
Extra = Callable[[Sequence[Config]], np.ndarray]


def footprint(space: Space) -> Extra | None:
    """Bytes of the pipelined fp16 operand tiles, for spaces with a Triton matmul's parameters."""
    if not set(MATMUL_TILE) <= {p.name for p in space.params}:
        return None
    return lambda configs: np.asarray(
        [c["num_stages"] * c["BLOCK_K"] * (c["BLOCK_M"] + c["BLOCK_N"]) * 2 for c in configs], dtype=float)


def triple_products(space: Space) -> Extra | None:
    """Every product of three numeric parameters with more than two values, all positive."""
    numeric = [p.name for p in space.params if len(p.values) > 2 and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in p.values)]
    triples = list(itertools.combinations(numeric, 3))
    if not triples:
        return None
    return lambda configs: np.asarray([[c[a] * c[b] * c[d] for a, b, d in triples] for c in configs], dtype=float)


VARIANTS = {"footprint": footprint, "triple products": triple_products}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=DEFAULT_DATASETS)
    parser.add_argument("--splits", type=int, default=10)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    params = XGBParams(objective="regression", max_depth=7)
    paths = [str(p) for folder in args.datasets for p in find_datasets(folder)]
    results: dict[str, dict[str, dict[str, float]]] = {}
    print(f"{'space':36s} {'default features':>18s} " + " ".join(f"{v:>18s}" for v in VARIANTS)
          + "   (tau / top-5 %)")
    for path in paths:
        base = evaluate_model(path, splits=args.splits, params=params)
        row = {"default": base}
        for name, make in VARIANTS.items():
            extra = make(cached_dataset(path).space)
            if extra is not None:
                row[name] = evaluate_model(path, splits=args.splits, params=params, extra_features=extra)
        results[base.dataset] = {k: {"kendall_tau": q.kendall_tau, "top5_error_pct": q.top5_error_pct}
                                 for k, q in row.items()}
        cells = [f"{row[k].kendall_tau:.3f} / {row[k].top5_error_pct:6.2f}" if k in row else f"{'-':>15s}"
                 for k in ("default", *VARIANTS)]
        print(f"{base.dataset[:36]:36s} " + " ".join(f"{c:>18s}" for c in cells), flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"model": "regression, depth 7", "train_fraction": 0.1, "splits": args.splits,
                       "datasets": results}, f, indent=2)


if __name__ == "__main__":
    main()
