"""`tensortune dashboard` (a local web page over the records) and `tensortune report`
(one workload's page as a static HTML file)."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

import click

from ..db import Database, Workload
from .common import db_option, open_database, resolve_db_path


def _chosen_db(ctx: click.Context, db_path: str | None) -> str:
    return db_path or (ctx.obj or {}).get("db_path") or str(resolve_db_path(None, os.environ))


def _open_existing(ctx: click.Context, db_path: str | None) -> tuple[Database, str]:
    """The database to show, and how to name it; a file path that does not exist is an
    error here (looking must not create an empty database)."""
    chosen = _chosen_db(ctx, db_path)
    if "://" not in chosen and not Path(chosen).expanduser().exists():
        raise click.ClickException(f"no records database at {chosen}: tune something first (e.g. `tensortune "
                                   "demo`), or name one with --db")
    return open_database(ctx, db_path), chosen


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@click.command("dashboard")
@db_option
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True,
              help="Port to listen on (0: any free port; the address is printed).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; anything but loopback lets others on the network read the records.")
@click.pass_context
def dashboard(ctx: click.Context, db_path: str | None, port: int, host: str) -> None:
    """Serve a web page over the records database: workloads and targets, each tuning
    run's curve, measured times, failures, best configurations, comparison across targets."""
    from ..dashboard import make_server

    db, label = _open_existing(ctx, db_path)
    try:
        server = make_server(db, host, port, label)
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror or exc}; choose another "
                                   "--port (0 picks a free one)") from None
    bound_host, bound_port = server.server_address[:2]
    shown = f"[{bound_host}]" if ":" in str(bound_host) else bound_host
    if not _is_loopback(host):
        click.echo(f"note: listening on {host}: anyone who can reach this machine can read these records", err=True)
    click.echo(f"tensortune dashboard: {label} at http://{shown}:{bound_port}/ (Ctrl-C stops)", nl=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        click.echo("stopped", err=True)
    finally:
        server.server_close()
        db.close()


def _one_workload(db: Database, text: str) -> Workload:
    from ..dashboard import find_workload
    from .db_cmd import one_workload

    try:
        return find_workload(db, text)
    except (LookupError, ValueError):
        return one_workload(db, text)


@click.command("report")
@click.argument("workload")
@db_option
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), default="report.html",
              show_default=True, help="HTML file to write.")
@click.option("--top", type=click.IntRange(1, 1000), default=10, show_default=True,
              help="Best configurations to list per target.")
@click.pass_context
def report(ctx: click.Context, workload: str, db_path: str | None, output: str, top: int) -> None:
    """Write WORKLOAD's plots and tables (as the dashboard shows them) to one static HTML
    file for sharing. WORKLOAD: its index in `db list`, a prefix of its name, or its
    dashboard id."""
    from ..dashboard import write_report

    db, label = _open_existing(ctx, db_path)
    w = _one_workload(db, workload)
    try:
        path = write_report(db, w, output, top, label)
    except OSError as exc:
        raise click.ClickException(f"cannot write {output}: {exc.strerror or exc}") from None
    finally:
        db.close()
    click.echo(f"wrote {path}: {w.id_text}")
