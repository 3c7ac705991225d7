"""`tensortune db ...`: look into, export, import and prune the records database.

Names and messages from the database are printed as plain text, never as rich markup.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..db import DamagedRecords, Database, Workload, export_jsonl, import_jsonl
from ..measure import ErrorKind
from ..progress import format_time
from .common import db_option, open_database, print_json



def _console() -> Console:
    """A terminal's width on a terminal; into a pipe or a file, rows are never cut or wrapped."""
    console = Console()
    return console if console.is_terminal else Console(width=100_000)


@click.group("db")
def db_group() -> None:
    """Look into, export, import and delete the tuning records."""


@contextlib.contextmanager
def _noting_damage(db: Database) -> Iterator[None]:
    """Damaged records are skipped; say which, once, on stderr, after the command's output."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DamagedRecords)
        yield
    if db.damaged:
        named = ", ".join(f"record {i} ({why})" for i, why in sorted(db.damaged.items())[:5])
        more = f" and {len(db.damaged) - 5} more" if len(db.damaged) > 5 else ""
        click.echo(f"note: skipped {len(db.damaged)} damaged record(s) of {db.where}: {named}{more}", err=True)


def one_workload(db: Database, text: str) -> Workload:
    """The one workload whose name starts with `text` (a click error naming the problem otherwise)."""
    found = db.find_workloads(text)
    if not found:
        raise click.ClickException(f"no workload matches {text!r}; see `tensortune db list`")
    if len(found) > 1:
        names = "\n  ".join(w.id_text for w in found)
        raise click.ClickException(f"{text!r} matches {len(found)} workloads:\n  {names}")
    return found[0]


@db_group.command("list")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def db_list(ctx: click.Context, db_path: str | None, as_json: bool) -> None:
    """Every workload with its number of records and the fastest median time recorded."""
    db = open_database(ctx, db_path)
    rows = db.workloads()
    if as_json:
        print_json([{"index": i, "workload": w.id_text, "records": n, "best_seconds": b}
                    for i, (w, n, b) in enumerate(rows, 1)])
        return
    if not rows:
        click.echo(f"{db.where} holds no records yet: tune something (e.g. `tensortune demo`) or `db import` a file")
        return
    where = " (read-only)" if db.read_only else ""
    table = Table(title=escape(f"workloads in {db.where}{where}"),
                  caption="best median: the fastest record's median time per call, over every device")
    for col in ("#", "workload", "records", "best median"):
        table.add_column(col)
    for i, (w, n, best) in enumerate(rows, 1):
        table.add_row(str(i), escape(w.id_text), str(n), format_time(best) if best is not None else "-")
    _console().print(table)


@db_group.command("show")
@click.argument("workload")
@db_option
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True, help="Rows to show.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def db_show(ctx: click.Context, workload: str, db_path: str | None, limit: int, as_json: bool) -> None:
    """Records of WORKLOAD (its index in `db list`, or a prefix of its name)."""
    db = open_database(ctx, db_path)
    w = one_workload(db, workload)
    with _noting_damage(db):
        records = db.records(w)
        if as_json:
            print_json([r.to_json() for r in records[:limit]])
            return
        table = Table(title=escape(f"{w.id_text}: {len(records)} records"))
        table.add_column("config", overflow="fold")  # on a terminal, wrapped: never cut
        for col in ("median", "spread", "error", "device", "strategy"):
            table.add_column(col)
        for r in records[:limit]:
            res = r.to_result()
            error = f"{r.error.value}: {r.message[:60]}" if r.error else ""
            if res.environment:
                error = f"{error} (environment: retried)"
            table.add_row(escape(r.config.to_json()), format_time(res.time), f"{res.spread:.1%}" if r.ok else "",
                          escape(error), escape(r.target.device), escape(r.strategy))
        _console().print(table)


@db_group.command("best")
@click.argument("workload")
@db_option
@click.option("-k", "top", type=click.IntRange(min=1), default=1, show_default=True,
              help="How many of the fastest to show.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def db_best(ctx: click.Context, workload: str, db_path: str | None, top: int, as_json: bool) -> None:
    """The fastest configuration(s) of WORKLOAD."""
    db = open_database(ctx, db_path)
    w = one_workload(db, workload)
    with _noting_damage(db):
        best = db.top_k(w, None, top)
    if not best:
        raise click.ClickException(f"{w.id_text} has no successful measurement")
    if as_json:
        print_json([{"config": r.config.as_dict(), "seconds": r.time, "device": r.target.device,
                     "strategy": r.strategy} for r in best])
        return
    click.echo("median time per call, configuration [device, what measured it]")
    for r in best:
        click.echo(f"{format_time(r.time):>12}  {r.config.to_json()}  [{r.target.device}, {r.strategy}]")


@db_group.command("export")
@click.argument("file", type=click.Path(dir_okay=False))
@db_option
@click.option("--workload", default=None, help="Only workloads whose id starts with this.")
@click.pass_context
def db_export(ctx: click.Context, file: str, db_path: str | None, workload: str | None) -> None:
    """Write records to FILE as JSON lines (to ship tuned results with a package)."""
    db = open_database(ctx, db_path)
    with _noting_damage(db):
        n = export_jsonl(db, file, workload)
    click.echo(f"exported {n} records to {file}")


@db_group.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@db_option
@click.pass_context
def db_import(ctx: click.Context, file: str, db_path: str | None) -> None:
    """Add the records of a JSON-lines FILE (records already present are skipped)."""
    db = open_database(ctx, db_path)
    n = import_jsonl(db, file)
    click.echo(f"imported {n} new records from {file} into {db.where}")


KINDS = sorted(k.value for k in ErrorKind) + ["ok"]


@db_group.command("delete")
@click.argument("workload", required=False)
@db_option
@click.option("--kind", "kinds", multiple=True, type=click.Choice(KINDS),
              help="Only records of this kind: an error kind, or ok for successes (repeatable).")
@click.option("--failed", is_flag=True, help="Only failed records (any error kind).")
@click.option("--environment", is_flag=True,
              help="Only failures of the environment (a full disk, a missing compiler, a busy GPU).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
def db_delete(ctx: click.Context, workload: str | None, db_path: str | None, kinds: tuple[str, ...],
              failed: bool, environment: bool, yes: bool) -> None:
    """Delete the records of WORKLOAD (its index in `db list`, or a prefix of its name), or
    the records of some kinds in every workload; the next tuning measures them again."""
    if workload is None and not (kinds or failed or environment):
        raise click.UsageError("name a WORKLOAD, or choose records with --kind, --failed or --environment")
    db = open_database(ctx, db_path)
    w = one_workload(db, workload) if workload is not None else None
    what = [*kinds] + (["failed"] if failed else []) + (["environment"] if environment else [])
    scope = f"{'the ' + ' or '.join(what) + ' records' if what else 'every record'} of " \
            f"{w.id_text if w else 'every workload'}"
    if not yes:
        click.confirm(f"delete {scope} from {db.where}?", abort=True)
    n = db.delete_records(w, kinds=kinds, failed=failed, environment=environment)
    click.echo(f"deleted {n} record(s): {scope}")
