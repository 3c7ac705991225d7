"""`tensortune triton ...`: tune Triton kernels ahead of time and export their records.

    tensortune triton tune mypkg.kernels:matmul_kernel --shape M=4096,N=4096,K=4096 \\
        --shape M=8192,N=1024,K=1024 --export mypkg/tuned.jsonl

TARGET is an autotuned kernel with an `@kernel.inputs` function, or a function taking
the shape as keyword arguments that launches autotuned kernels.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from .common import check_strategy, db_option, print_json, resolve_db_path


@click.group("triton")
def triton_group() -> None:
    """Tune Triton kernels decorated with @tensortune.autotune ahead of time."""


@triton_group.command("tune")
@click.argument("target")
@click.option("--shape", "shapes", multiple=True, metavar="NAME=VALUE,...",
              help="A shape to tune for, e.g. M=4096,N=4096,K=4096 (repeatable).")
@click.option("--shapes-file", type=click.Path(exists=True, dir_okay=False),
              help="A JSON file holding a list of shapes (objects of NAME: VALUE).")
@click.option("--budget", type=click.IntRange(min=1), default=None,
              help="Measurements per key (default: the kernel's).")
@click.option("--strategy", default=None, callback=check_strategy, help="Search strategy (default: the kernel's).")
@click.option("--force", is_flag=True, help="Go on searching keys that are already tuned.")
@click.option("--export", "export_path", type=click.Path(dir_okay=False),
              help="Write the records of every key tuned to this JSON-lines file.")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def triton_tune(ctx: click.Context, target: str, shapes: tuple[str, ...], shapes_file: str | None,
                budget: int | None, strategy: str | None, force: bool, export_path: str | None,
                db_path: str | None, as_json: bool) -> None:
    """Import TARGET (MODULE:NAME or FILE.py:NAME) and tune it for each shape."""
    import os

    chosen = db_path or (ctx.obj or {}).get("db_path")
    saved = os.environ.get("TENSORTUNE_DB")
    if chosen:  # kernels open their database on first use, from the settings
        os.environ["TENSORTUNE_DB"] = str(resolve_db_path(chosen))
    try:
        _tune(target, shapes, shapes_file, budget, strategy, force, export_path, as_json)
    finally:
        if saved is None:
            os.environ.pop("TENSORTUNE_DB", None)
        else:
            os.environ["TENSORTUNE_DB"] = saved


def _tune(target: str, shapes: tuple[str, ...], shapes_file: str | None, budget: int | None,
          strategy: str | None, force: bool, export_path: str | None, as_json: bool) -> None:
    from ..extras import needs_extra
    with needs_extra("tensortune triton tune"):
        from ..frontends.triton.offline import (TargetError, decided_workloads, export_workloads, load_object,
                                                parse_shape, tune_shapes)

    try:
        wanted = [parse_shape(s) for s in shapes]
        if shapes_file:
            loaded = json.loads(Path(shapes_file).read_text())
            if not isinstance(loaded, list) or not all(isinstance(s, dict) for s in loaded):
                raise ValueError(f"{shapes_file} must hold a JSON list of objects")
            wanted += loaded
        if not wanted:
            raise ValueError("give at least one --shape or --shapes-file")
        obj = load_object(target)
    except (ValueError, ImportError, AttributeError, FileNotFoundError) as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        reports = tune_shapes(obj, wanted, budget=budget, strategy=strategy, force=force)
    except TargetError as exc:
        raise click.ClickException(str(exc)) from exc
    exported = None
    if export_path:
        pairs = decided_workloads(reports)
        dbs = {id(k.context().db): k.context().db for k, _ in pairs}
        if len(dbs) > 1:
            raise click.ClickException("the kernels use different databases; export each with `tensortune db export`")
        exported = export_workloads(next(iter(dbs.values())), [w for _, w in pairs], export_path) if dbs else 0
    if as_json:
        print_json({"shapes": [r.to_json() for r in reports], "exported": exported, "export_path": export_path})
        return
    for r in reports:
        for name, d in r.decisions:
            click.echo(f"{name} {d.key.as_dict()} -> {d.config.to_json()} ({d.source})")
        click.echo(f"  {r.trials} measurements for {r.shape}")
    if exported is not None:
        click.echo(f"exported {exported} records to {export_path}")
