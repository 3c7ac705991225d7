"""Options and helpers shared by the subcommands.

Example:
    >>> resolve_db_path(None, {"TENSORTUNE_DB": "/tmp/a.db"}).name
    'a.db'
    >>> resolve_db_path("sqlite:///runs/a.db")
    'sqlite:///runs/a.db'
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import click

from ..db import Database
from ..settings import Settings, db_location

DB_HELP = ("Records store: a path, sqlite:///PATH or postgresql://USER@HOST/DATABASE "
           "(default: $TENSORTUNE_DB or ~/.cache/tensortune/tuning.db).")


def resolve_db_path(option: str | None, env: Mapping[str, str] | None = None) -> Path | str:
    """The store an option names (a path or a URL), else TENSORTUNE_DB's, else the default."""
    return db_location(option) if option else Settings.from_env(env).db_path


def db_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`--db PATH|URL` on a subcommand; falls back to the group's --db, then TENSORTUNE_DB."""
    return click.option("--db", "db_path", metavar="PATH|URL", default=None, help=DB_HELP)(fn)


def check_strategy(_ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A click callback: `value` must name a registered search strategy (None passes)."""
    from ..search import strategy_names

    if value is not None and value not in strategy_names():
        raise click.BadParameter(f"unknown strategy {value!r}; known: {', '.join(strategy_names())}",
                                 param=param)
    return value


def open_database(ctx: click.Context, db_path: str | None) -> Database:
    """The database the options name (a DatabaseError becomes a message in `cli.main`)."""
    chosen = db_path or (ctx.obj or {}).get("db_path")
    return Database(resolve_db_path(chosen, os.environ))


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def executor_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`--executor local|ray` and `--ray-address` for a command that tunes."""
    fn = click.option("--ray-address", default=None, metavar="HOST:PORT",
                      help="Ray cluster to join with --executor ray (default: $RAY_ADDRESS, else 'auto'; "
                           "'local' starts Ray in this process).")(fn)
    return click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
                        help="Where candidates are built and measured: this machine, or a Ray cluster's "
                             "nodes of this target (docs/distributed.md).")(fn)


@contextlib.contextmanager
def executor_errors() -> Iterator[None]:
    """A missing Ray, an unreachable cluster or one without nodes of the target is a
    message, not a traceback."""
    from ..distributed.actor import TargetMismatch
    from ..distributed.ray_executor import RayMissing
    try:
        yield
    except (RayMissing, TargetMismatch) as exc:
        raise click.ClickException(str(exc)) from None
    except ConnectionError as exc:
        raise click.ClickException(str(exc)) from None
    except RuntimeError as exc:
        if "Ray cluster" not in str(exc):
            raise
        raise click.ClickException(str(exc)) from None
