"""`tensortune bench ...`: compare search strategies and the cost model on measured spaces."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from .common import print_json

console = Console(stderr=True)

# Optuna 5.0's TPE on the six Kernel Tuner spaces of ../shared/datasets (mean over the six;
# 20 fresh runs per budget), as published in the issue that set the targets.
PUBLISHED_TPE_MEAN = {"20": 0.809, "50": 0.896, "100": 0.946, "200": 0.973}


def _repeat_count(name: str, count: str) -> int:
    """N of a `NAME=N` item of --strategies: a positive whole number."""
    if not count.strip().isdigit() or int(count) < 1:
        raise click.BadParameter(f"{name}={count}: N, the runs of {name}, must be a whole number of at least 1",
                                 param_hint="--strategies")
    return int(count)


def _int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {text!r}",
                                 param_hint="--budgets") from None
    if not values or any(v < 1 for v in values):
        raise click.BadParameter(f"budgets must be positive integers, got {text!r}", param_hint="--budgets")
    return values


def _dataset_paths(datasets: tuple[str, ...]) -> list[str]:
    from ..bench.replay import cached_dataset
    from ..datasets import find_datasets

    paths: list[str] = []
    for d in datasets:
        p = Path(d)
        if p.is_dir():
            paths += [str(x) for x in find_datasets(p)]
        elif p.exists():
            paths.append(str(p))
        else:
            raise click.BadParameter(f"no such file or folder: {d}", param_hint="--dataset")
    if not paths:
        raise click.BadParameter("no Kernel Tuner cache found", param_hint="--dataset")
    for path in paths:  # read once here, before hours of runs (and cached for the forked workers)
        try:
            cached_dataset(path)
        except ValueError as exc:
            text = str(exc) if path in str(exc) else f"{path}: not a readable Kernel Tuner cache ({exc})"
            raise click.BadParameter(text, param_hint="--dataset") from None
    return paths


@click.group("bench")
def bench_group() -> None:
    """Benchmarks on replayed measured spaces (Kernel Tuner caches)."""


@bench_group.command("strategies")
@click.option("--dataset", "datasets", multiple=True, required=True,
              help="A Kernel Tuner cache (.json/.json.gz) or a folder of them; repeatable.")
@click.argument("more", nargs=-1, type=click.Path())
@click.option("--budgets", default="20,50,100,200", show_default=True, help="Measurement budgets.")
@click.option("--repeats", type=click.IntRange(min=1), default=20, show_default=True,
              help="Fresh runs per budget (seeds FIRST_SEED..FIRST_SEED+N-1).")
@click.option("--first-seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Seed of the first repeat.")
@click.option("--strategies", default="auto,random", show_default=True,
              help="Comma-separated strategies; random is always added as the baseline. "
                   "NAME=N runs that strategy N repeats only. Peers run side by side: "
                   "kt:<strategy> (Kernel Tuner 1.5, simulation mode), optuna:tpe.")
@click.option("--jobs", type=click.IntRange(min=1), default=max(1, (os.cpu_count() or 1)), show_default="the CPU count",
              help="Worker processes.")
@click.option("--output", "-o", "json_out", type=click.Path(dir_okay=False), default=None,
              help="Write {datasets: dataset -> strategy -> budget -> {mean, se, p10, ...}, mean: ...} "
                   "to this JSON file.")
@click.option("--plot", "plot_out", type=click.Path(dir_okay=False), default=None,
              help="Write the curves as PNG (default: next to --output).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as one JSON object instead of tables.")
def bench_strategies(datasets: tuple[str, ...], more: tuple[str, ...], budgets: str, repeats: int,
                     first_seed: int, strategies: str, jobs: int, json_out: str | None,
                     plot_out: str | None, as_json: bool) -> None:
    """Score strategies by t_opt / t_best_found after N measurements (1.0 = optimum found).

    Each (dataset, strategy, budget, repeat) is a fresh tuning run with the Tuner and a
    replay runner; failed configurations count as measurements.
    """
    from ..bench.peers import check_peer, is_peer
    from ..bench.plot import plot_curves
    from ..bench.replay import mean_over_datasets, run_many, summarize
    from ..search import strategy_names

    paths = _dataset_paths(datasets + more)
    budget_list = _int_list(budgets)
    names: list[str] = []
    reps: dict[str, int] = {}
    for item in strategies.split(","):
        name, _, count = item.strip().partition("=")
        if not name:
            continue
        if is_peer(name):
            try:
                check_peer(name)
            except ValueError as exc:
                raise click.BadParameter(str(exc), param_hint="--strategies") from None
        elif name not in strategy_names():
            raise click.BadParameter(f"unknown strategy {name!r}; known: {', '.join(strategy_names())} "
                                     "(or a peer: kt:<Kernel Tuner strategy>, optuna:tpe)",
                                     param_hint="--strategies")
        names.append(name)
        reps[name] = _repeat_count(name, count) if count else repeats
    if "random" not in names:
        names.append("random")
        reps["random"] = repeats
    total = sum(len(paths) * len(budget_list) * reps[n] for n in names)
    console.print(f"{total} runs: {len(paths)} datasets x {names} x budgets {budget_list}; {jobs} jobs")
    start = time.perf_counter()
    done = [0]

    def progress(_r: object) -> None:
        done[0] += 1
        if done[0] % max(1, total // 20) == 0:
            console.print(f"  {done[0]}/{total} runs, {time.perf_counter() - start:.0f} s")

    results = run_many(paths, names, budget_list, reps, jobs=jobs, on_result=progress, first_seed=first_seed)
    summary = summarize(results)
    means = mean_over_datasets(summary)
    if not as_json:
        _print_tables(summary, means, budget_list)
    console.print(f"{len(results)} runs in {time.perf_counter() - start:.0f} s")
    payload = {"datasets": summary, "mean": means, "budgets": budget_list,
               "repeats": reps, "first_seed": first_seed, "wall_seconds": round(time.perf_counter() - start, 1)}
    if as_json:
        print_json(payload)
    if json_out:
        with open(json_out, "w", encoding="utf-8") as f:
            json.dump(payload, f, indent=2)
        plot_out = plot_out or str(Path(json_out).with_suffix(".png"))
    if plot_out:
        # the published line is a mean over the six Kernel Tuner spaces; a live TPE run replaces it
        published = {} if "optuna:tpe" in names else {"optuna_tpe (published)": PUBLISHED_TPE_MEAN}
        plot_curves(summary, plot_out, published)
        console.print(f"plot: {plot_out}")


def _mean_known(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(sum(known) / len(known), 4) if known else None


def _error_cell(row: dict, k: int) -> str:
    """`2.10%`, or `8.65% (1 failed)` when in one split all of the top-k failed."""
    error, failed = row[f"top{k}_error_pct"], row.get(f"top{k}_failed_splits", 0)
    text = "-" if error is None else f"{error:.2f}%"
    return text + (f" ({failed} failed)" if failed else "")


def _score_cell(stats: dict) -> str:
    """`0.955 ±0.003 (0.869)`: mean, its standard error, 10th percentile."""
    return f"{stats['mean']:.3f} ±{stats['se']:.3f} ({stats['p10']:.3f})"


def _print_tables(summary: dict, means: dict, budgets: list[int]) -> None:
    out = Console()
    table = Table(title="mean ±standard error (p10) of t_opt / t_best over repeats")
    table.add_column("dataset")
    table.add_column("strategy")
    for b in budgets:
        table.add_column(f"N={b}", justify="right")
    for ds, per_strategy in summary.items():
        for st, per_budget in per_strategy.items():
            cells = [_score_cell(per_budget[str(b)]) if str(b) in per_budget else "-" for b in budgets]
            table.add_row(ds, st, *cells)
    for st, per_budget in means.items():
        table.add_row("[bold]mean over datasets", st, *[f"{per_budget.get(str(b), float('nan')):.3f}"
                                                         for b in budgets])
    out.print(table)


@bench_group.command("model")
@click.option("--dataset", "datasets", multiple=True, required=True,
              help="A Kernel Tuner cache (.json/.json.gz) or a folder of them; repeatable.")
@click.argument("more", nargs=-1, type=click.Path())
@click.option("--train-fraction", default=0.1, show_default=True, help="Share of the space trained on.")
@click.option("--splits", type=click.IntRange(min=1), default=10, show_default=True,
              help="Random splits averaged over.")
@click.option("--members", type=click.IntRange(min=1), default=1, show_default=True,
              help="1: one XGBRankModel (what the strategies use); N: a bootstrap ensemble of N.")
@click.option("--objective", type=click.Choice(["rank", "regression"]), default="rank", show_default=True,
              help="The model's training objective (rank: pairwise, what the strategies use).")
@click.option("--max-depth", type=click.IntRange(min=1), default=None,
              help="Depth of the trees (default: the model's, as the strategies use).")
@click.option("--output", "-o", "json_out", type=click.Path(dir_okay=False), default=None,
              help="Write dataset -> {kendall_tau, top1_error_pct, top5_error_pct, ...} (and mean) to this JSON file.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as one JSON object instead of a table.")
def bench_model(datasets: tuple[str, ...], more: tuple[str, ...], train_fraction: float, splits: int,
                members: int, objective: str, max_depth: int | None, json_out: str | None, as_json: bool) -> None:
    """Rank quality of the cost model on the configurations it was not trained on."""
    from ..bench.model_quality import evaluate_model
    from ..model import XGBParams

    if not 0 < train_fraction < 1:
        raise click.BadParameter("must be between 0 and 1", param_hint="--train-fraction")
    params = XGBParams(objective=objective) if max_depth is None else \
        XGBParams(objective=objective, max_depth=max_depth)
    results = {}
    for path in _dataset_paths(datasets + more):
        q = evaluate_model(path, train_fraction, splits, members=members, params=params)
        results[q.dataset] = q.to_json()
    if len(results) > 1:
        keys = ("kendall_tau", "top1_error_pct", "top5_error_pct")
        results["mean"] = {k: _mean_known([r[k] for r in results.values()]) for k in keys}
    if json_out:
        with open(json_out, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
    if as_json:
        print_json(results)
        return
    trees = f"{objective}, depth {params.max_depth}"
    what = f"cost model ({trees})" if members == 1 else f"ensemble of {members} cost models ({trees})"
    table = Table(title=f"{what} trained on {train_fraction:.0%} of each space ({splits} splits)",
                  caption="(N failed): splits where all of the top-k failed, left out of that mean"
                  if any(r.get("top1_failed_splits") or r.get("top5_failed_splits") for r in results.values())
                  else None)
    for col in ("dataset", "Kendall tau", "top-1 error", "top-5 error", "fit"):
        table.add_column(col, justify="left" if col == "dataset" else "right")
    for name, r in results.items():
        fit = f"{r['fit_seconds'] * 1000:.0f} ms" if "fit_seconds" in r else ""
        table.add_row(name, f"{r['kendall_tau']:.3f}", _error_cell(r, 1), _error_cell(r, 5), fit)
    Console().print(table)
