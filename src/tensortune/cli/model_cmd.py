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

import os
from typing import Any

import click

from .common import db_option, executor_errors, executor_options, print_json, resolve_db_path


@click.group("model")
def model_group() -> None:
    """Compile and tune whole PyTorch models."""


def parse_input(text: str) -> tuple[tuple[int, ...], str, tuple[int, int]]:
    """`2x128:int64:0-1000` -> ((2, 128), "int64", (0, 1000)); dtype defaults to float32."""
    parts = text.split(":")
    try:
        shape = tuple(int(s) for s in parts[0].lower().split("x") if s)
    except ValueError:
        raise ValueError(f"--input {text!r}: the shape must be numbers joined by x, e.g. 2x128") from None
    if not shape or any(s <= 0 for s in shape):
        raise ValueError(f"--input {text!r}: the shape must be positive numbers")
    dtype = parts[1] if len(parts) > 1 and parts[1] else "float32"
    low, high = 0, 100
    if len(parts) > 2:
        try:
            low, high = (int(v) for v in parts[2].split("-"))
        except ValueError:
            raise ValueError(f"--input {text!r}: the range must be LOW-HIGH, e.g. 0-50257") from None
        if high <= low:
            raise ValueError(f"--input {text!r}: the range is empty")
    return shape, dtype, (low, high)


def make_input(spec: tuple[tuple[int, ...], str, tuple[int, int]], device: str) -> Any:
    import torch
    shape, dtype, (low, high) = spec
    dt = getattr(torch, dtype, None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r}")
    if dt.is_floating_point:
        return torch.randn(shape, device=device).to(dt)
    if dt == torch.bool:
        return torch.rand(shape, device=device) < 0.5
    return torch.randint(low, high, shape, device=device, dtype=dt)


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
@click.option("--json", "as_json", is_flag=True, help="Print the compile report as JSON.")
@click.pass_context
def model_tune(ctx: click.Context, factory: str, inputs: tuple[str, ...], target: str | None, budget: int | None,
               retune: bool, prologues: str, export_path: str | None, db_path: str | None, executor: str,
               ray_address: str | None, as_json: bool) -> None:
    """Import FACTORY (MODULE:NAME or FILE.py:NAME), compile its model for the inputs and tune it."""
    try:
        import torch
    except ImportError:
        raise click.ClickException("tensortune model needs PyTorch: pip install 'tensortune[torch]'") from None
    from ..frontends.triton.offline import load_object
    from ..graph import compile as compile_model

    device = target or ("cuda" if torch.cuda.is_available() else "cpu")
    # the GPU target under Triton's interpreter (TRITON_INTERPRET=1) runs on CPU tensors
    tensors_on = "cpu" if device in ("cuda", "gpu") and os.environ.get("TRITON_INTERPRET", "0") not in ("", "0") \
        else device
    try:
        specs = [parse_input(text) for text in inputs]
        make = load_object(factory)
        if not callable(make):
            raise TypeError(f"FACTORY {factory!r} is a {type(make).__name__}, not a function that returns a model")
        made = make()
        model, examples = (made[0], list(made[1])) if isinstance(made, (tuple, list)) else (made, None)
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"FACTORY {factory!r} returned a {type(model).__name__}, not a torch.nn.Module")
        if examples is None:
            if not specs:
                raise ValueError("FACTORY returned a model alone: describe its inputs with --input")
            examples = [make_input(spec, tensors_on) for spec in specs]
        model = model.to(tensors_on).eval()
        examples = [x.to(tensors_on) if isinstance(x, torch.Tensor) else x for x in examples]
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
