"""`tensortune demo`: the main job."""

from __future__ import annotations

import dataclasses

import click
from rich.console import Console
from rich.table import Table

from ..tuner import Budget
from .common import check_strategy, db_option, executor_errors, executor_options, open_database, print_json


@click.command("demo")
@db_option
@click.option("--size", type=click.IntRange(min=1), default=512, show_default=True,
              help="M = N = K of the float32 matmul.")
@click.option("--seconds", type=click.FloatRange(min=0, min_open=True), default=60.0, show_default=True,
              help="Tuning budget in seconds.")
@click.option("--trials", type=click.IntRange(min=1), default=None,
              help="Also stop after this many measurements by the search (the untuned default is measured too, "
                   "once, and counted in the report).")
@click.option("--strategy", default="auto", show_default=True, callback=check_strategy, help="Search strategy.")
@click.option("--seed", default=None, type=int, help="Seed for a reproducible search.")
@click.option("--retune", is_flag=True, help="Measure again even if the database has a result.")
@click.option("--retry-failed", is_flag=True,
              help="Measure again the configurations recorded as failed (after fixing what failed them).")
@executor_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
@click.pass_context
def demo(ctx: click.Context, db_path: str | None, size: int, seconds: float, trials: int | None,
         strategy: str, seed: int | None, retune: bool, retry_failed: bool, executor: str,
         ray_address: str | None, as_json: bool) -> None:
    """Tune a C matrix multiplication on this CPU and compare it with numpy."""
    from ..demo.matmul import run_demo

    db = open_database(ctx, db_path)
    with executor_errors():
        report = run_demo(db, size, size, size, Budget(trials=trials, seconds=seconds), strategy=strategy,
                          seed=seed, retune=retune, retry_failed=retry_failed, progress=not as_json,
                          executor=executor, ray_address=ray_address)
    if as_json:
        print_json({**dataclasses.asdict(report), "speedup": report.speedup})
        return
    console = Console()
    if report.from_db:
        console.print(f"[bold green]Answered from the database[/] ({report.db}); nothing was measured. "
                      "Use --retune to measure again.")
    table = Table(title=f"float32 matmul {size}x{size}x{size} on this CPU",
                  caption=f"GFLOP/s: 2*M*N*K over the median time. The tuned, default and numpy figures come from "
                          f"re-timing them interleaved in one worker ({report.rounds} rounds), so that the same load "
                          "hits all three; the search's figure is one candidate's median measured while searching "
                          "(what `tensortune db list` shows), which load at that moment can make faster or slower.")
    table.add_column("")
    table.add_column("value", justify="right")
    table.add_row("best configuration", " ".join(f"{k}={v}" for k, v in report.best_config.items()))
    table.add_row("tuned GFLOP/s (re-timed)", f"{report.best_gflops:.1f}")
    table.add_row("untuned default GFLOP/s (re-timed)", f"{report.baseline_gflops:.1f}")
    table.add_row("speed-up over default", f"{report.speedup:.2f}x")
    table.add_row("numpy matmul GFLOP/s (same run)" if not report.from_db else "numpy matmul GFLOP/s (recorded)",
                  f"{report.numpy_gflops:.1f}")
    table.add_row("tuned / numpy", f"{report.best_gflops / report.numpy_gflops:.2f}" if report.numpy_gflops else "-")
    table.add_row("fastest while searching GFLOP/s", f"{report.search_best_gflops:.1f}")
    table.add_row("trials (failed)", f"{report.trials} ({report.failures})")
    table.add_row("wall time", f"{report.seconds:.1f} s")
    table.add_row("records", report.db)
    console.print(table)
