"""`tensortune cluster`: what a Ray node of this machine's target advertises."""

from __future__ import annotations

import json

import click


@click.group("cluster")
def cluster_group() -> None:
    """Tuning on a Ray cluster (docs/distributed.md)."""


@cluster_group.command("resources")
@click.option("--slots", type=click.IntRange(min=1), default=1, show_default=True,
              help="Measuring actors this node holds (one per CPU socket, or per GPU).")
@click.option("--gpu", is_flag=True,
              help="Also the targets of this machine's GPUs, one measurement slot per GPU (start the node with "
                   "--num-gpus).")
@click.option("--interpreter", is_flag=True,
              help="Also Triton's interpreter on this CPU (TRITON_INTERPRET=1 kernels), --slots slots.")
@click.option("--describe", is_flag=True, help="Say which targets the resources stand for, instead.")
def resources(slots: int, gpu: bool, interpreter: bool, describe: bool) -> None:
    """Print the --resources JSON for `ray start` on this node.

    Example: ray start --address HEAD:6379 --num-gpus 1 --resources "$(tensortune cluster resources --gpu)"
    """
    from ..db import Target
    from ..distributed.resources import describe as describe_target
    from ..distributed.resources import gpu_slots, merged_resources

    targets = {Target.cpu(): slots}
    if gpu:
        found = gpu_slots()
        if not found:
            raise click.ClickException("--gpu: torch sees no GPU on this machine")
        targets.update(found)
    if interpreter:
        from ..frontends.triton.target import interpreter_target
        targets[interpreter_target()] = slots
    if describe:
        for target, n in targets.items():
            click.echo(f"{describe_target(target)}: {n} slot(s); versions {target.versions_json}")
        return
    click.echo(json.dumps(merged_resources(targets)))
