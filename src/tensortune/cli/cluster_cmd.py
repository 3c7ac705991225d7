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
@click.option("--describe", is_flag=True, help="Say which target the resources stand for, instead.")
def resources(slots: int, describe: bool) -> None:
    """Print the --resources JSON for `ray start` on this node.

    Example: ray start --address HEAD:6379 --resources "$(tensortune cluster resources)"
    """
    from ..db import Target
    from ..distributed.resources import describe as describe_target
    from ..distributed.resources import node_resources

    target = Target.cpu()
    if describe:
        click.echo(f"{describe_target(target)}; versions {target.versions_json}")
        return
    click.echo(json.dumps(node_resources(target, slots)))
