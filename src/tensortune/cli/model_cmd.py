"""`tensortune model ...`: compile and tune a PyTorch model ahead of time, export its records.

    tensortune model tune mypkg.models:make_model --input 1x128:int64:0-50257 --target cuda \\
        --budget 400 --export mypkg/model_records.jsonl

FACTORY is a function returning a model, or (model, example_inputs). `--input` describes
one example input: its shape, dtype and, for integers, the range of its values
(`1x128:int64:0-50257`; floats are drawn from a normal distribution). Shipped with the
package and imported with `tensortune db import`, the records make the same compile on a
user's machine measure nothing.
"""

from __future__ import annotations

from typing import Any

import click

from ..model_inputs import load_model, make_input, parse_input, tensors_device  # noqa: F401 - re-exported
from .common import db_option, executor_errors, executor_options, print_json, resolve_db_path


@click.group("model")
def model_group() -> None:
    """Compile and tune whole PyTorch models."""


@model_group.command("tune")
@click.argument("factory")
@click.option("--input", "inputs", multiple=True, metavar="SHAPE[:DTYPE[:LOW-HIGH]]",
              help="An example input, e.g. 1x128:int64:0-50257 (repeatable, in argument order).")
@click.option("--target", type=click.Choice(["cpu", "cuda"]), default=None,
              help="Where the model runs (default: cuda if a GPU is visible, else cpu).")
@click.option("--budget", type=click.IntRange(min=1), default=None,
              help="Trials for the whole model (default: 32 for each kernel to tune).")
@click.option("--retune", is_flag=True, help="Search again even where records exist.")
@click.option("--prologues", type=click.Choice(["fuse", "materialize", "measure"]), default="measure",
              help="Work several matmuls read (a norm's scaling): in their loads, written once, or whichever "
                   "measures faster (default).")
@click.option("--export", "export_path", type=click.Path(dir_okay=False),
              help="Write the records of every kernel of the model to this JSON-lines file.")
@db_option
@executor_options
@click.option("--enqueue", is_flag=True,
              help="Queue the model as a fleet job in the store instead of tuning it here; `tensortune worker` "
                   "processes tune it (docs/fleet.md). Needs --target and --budget.")
@click.option("--json", "as_json", is_flag=True, help="Print the compile report as JSON.")
@click.pass_context
def model_tune(ctx: click.Context, factory: str, inputs: tuple[str, ...], target: str | None, budget: int | None,
               retune: bool, prologues: str, export_path: str | None, db_path: str | None, executor: str,
               ray_address: str | None, enqueue: bool, as_json: bool) -> None:
    """Import FACTORY (MODULE:NAME or FILE.py:NAME), compile its model for the inputs and tune it
    (or, with --enqueue, queue it for the fleet's workers)."""
    if enqueue:
        _enqueue(ctx, factory, inputs, target, budget, prologues, db_path,
                 {"--retune": retune, "--export": export_path, "--executor ray": executor != "local", "--json": as_json})
        return
    try:
        import torch
    except ImportError:
        raise click.ClickException("tensortune model needs PyTorch: pip install 'tensortune[torch]'") from None
    from ..graph import compile as compile_model

    device = target or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        model, examples = load_model(factory, inputs, tensors_device(device))
    except (ValueError, ImportError, AttributeError, FileNotFoundError, TypeError) as exc:
        raise click.ClickException(str(exc)) from exc
    db = str(resolve_db_path(db_path or (ctx.obj or {}).get("db_path")))
    with executor_errors():
        compiled = compile_model(model, examples, target=device, budget=budget, db=db, retune=retune,
                                 progress=not as_json, prologues=prologues, executor=executor,
                                 ray_address=ray_address)
    exported = None
    if export_path:
        from ..db import Database
        from ..frontends.triton.offline import export_workloads
        exported = export_workloads(Database(db), compiled.workloads, export_path)
    if as_json:
        print_json({"graphs": [r.as_dict() for r in compiled.reports], "exported": exported, "db": db})
        return
    for report in compiled.reports:
        click.echo(report.table())
    if exported is not None:
        click.echo(f"exported {exported} records to {export_path}")


def _enqueue(ctx: click.Context, factory: str, inputs: tuple[str, ...], target: str | None, budget: int | None,
             prologues: str, db_path: str | None, unsupported: dict[str, Any]) -> None:
    """Queue a `model` job (checked as a worker will check it) instead of tuning here."""
    from ..fleet import JobQueue, check_spec
    from ..fleet.kinds import describe
    from .common import open_database

    given = [name for name, value in unsupported.items() if value]
    if given:
        raise click.UsageError(f"--enqueue queues the model for the fleet's workers; {', '.join(given)} "
                               "apply to tuning here")
    if target is None:
        raise click.UsageError("--enqueue needs --target cpu or cuda: the device the workers tune the model for")
    if budget is None:
        raise click.UsageError("--enqueue needs --budget: the trials the workers spend on the whole model")
    spec: dict[str, Any] = {"factory": factory, "inputs": list(inputs), "target": target}
    if prologues != "measure":
        spec["prologues"] = prologues
    try:
        spec = check_spec("model", spec)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    job_id = JobQueue(open_database(ctx, db_path)).enqueue("model", spec, {"trials": budget}, "auto")
    click.echo(f"job {job_id}: {describe('model', spec)}, {budget} trials; queued for `tensortune worker`")
