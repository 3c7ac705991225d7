"""The `tensortune` command: a click group; each subcommand lives in its own module."""

from __future__ import annotations

import click

from ..db import DatabaseError
from ..extras import MissingExtra
from .bench_cmd import bench_group
from .common import DB_HELP
from .dashboard_cmd import dashboard, report
from .cluster_cmd import cluster_group
from .db_cmd import db_group
from .demo_cmd import demo
from .fleet_cmd import queue_group, worker
from .model_cmd import model_group
from .triton_cmd import triton_group


class _Commands(click.Group):
    """A database that cannot be used (corrupt, damaged part-way, read-only, an unwritable
    export), a missing optional extra and Ctrl-C are one line, not a traceback, in every subcommand."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except (DatabaseError, MissingExtra) as exc:
            raise click.ClickException(str(exc)) from exc
        except KeyboardInterrupt:
            click.echo("interrupted: every measurement made so far is kept in the records database", err=True)
            ctx.exit(130)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--db", "db_path", metavar="PATH|URL", default=None, help=DB_HELP)
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
cli.add_command(dashboard)
cli.add_command(report)
cli.add_command(queue_group)
cli.add_command(worker)
cli.add_command(cluster_group)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
