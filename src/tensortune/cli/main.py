"""The `tensortune` command: a click group; each subcommand lives in its own module."""

from __future__ import annotations

import click

from ..db import DatabaseError
from .bench_cmd import bench_group
from .cluster_cmd import cluster_group
from .db_cmd import db_group
from .demo_cmd import demo
from .model_cmd import model_group
from .triton_cmd import triton_group


class _Commands(click.Group):
    """A database that cannot be used (corrupt, damaged part-way, read-only, an unwritable
    export) is a message, not a traceback, in every subcommand."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except DatabaseError as exc:
            raise click.ClickException(str(exc)) from exc


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--db", "db_path", type=click.Path(dir_okay=False), default=None,
              help="Records database (default: $TENSORTUNE_DB or ~/.cache/tensortune/tuning.db).")
@click.version_option(package_name="tensortune")
@click.pass_context
def cli(ctx: click.Context, db_path: str | None) -> None:
    """tensortune: make tensor kernels fast by searching for how to run them."""
    ctx.ensure_object(dict)
    ctx.obj["db_path"] = db_path


cli.add_command(demo)
cli.add_command(db_group)
# Subcommand groups of later capabilities register here, one line each.
cli.add_command(triton_group)
cli.add_command(bench_group)
cli.add_command(model_group)
cli.add_command(cluster_group)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
