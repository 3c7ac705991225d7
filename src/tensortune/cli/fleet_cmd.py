"""`tensortune queue ...` and `tensortune worker`: fleet mode over a shared records store.

Example (shell):
    tensortune --db postgresql://tt@db.lan/records queue add c_matmul '{"m": 512, "n": 512, "k": 512}' --trials 64
    tensortune --db postgresql://tt@db.lan/records queue add triton mypkg.kernels:matmul --shape M=4096,N=4096,K=4096
    tensortune --db postgresql://tt@db.lan/records worker          # on every host
    tensortune --db postgresql://tt@db.lan/records queue list
"""

from __future__ import annotations

import json
import signal
import sys
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..fleet import JobQueue, Worker, check_spec, job_savings
from ..fleet.kinds import JOB_KINDS, check_budget, describe
from ..progress import format_time
from ..search import strategy_names
from ..tuner import Budget
from .common import check_strategy, db_option, open_database, print_json

console = Console()


@click.group("queue")
def queue_group() -> None:
    """The queue of tuning jobs in the records store, and the savings found."""


def _job(kind: str, spec: Any, budget: Any, strategy: str, where: str) -> tuple[str, dict, dict, str]:
    """A job checked before it is queued; a ClickException naming what is wrong."""
    try:
        spec = check_spec(kind, spec)
        if not isinstance(budget, dict):
            raise ValueError(f"a budget is a JSON object such as {{\"trials\": 32}}, got {budget!r}")
        if JOB_KINDS[kind].check_budget is None:
            Budget.of(budget)
        check_budget(kind, budget)
        if JOB_KINDS[kind].run is not None and strategy != "auto":
            raise ValueError(f"a {kind} job's kernels are searched by their own strategies (a compile's or a "
                             f"kernel's); leave --strategy at auto, got {strategy!r}")
        if strategy not in strategy_names():
            raise ValueError(f"unknown strategy {strategy!r}; known: {', '.join(strategy_names())}")
    except ValueError as exc:
        raise click.ClickException(f"{where}{exc}") from exc
    return kind, spec, budget, strategy


@queue_group.command("add")
@click.argument("kind", required=False, type=click.Choice(sorted(JOB_KINDS)))
@click.argument("spec", required=False)
@db_option
@click.option("--trials", type=click.IntRange(min=1), default=None,
              help="Candidates to measure (default 32; a triton job: its kernel's budget).")
@click.option("--seconds", type=click.FloatRange(min=0, min_open=True), default=None, help="Time budget per job.")
@click.option("--strategy", default="auto", show_default=True, callback=check_strategy, help="Search strategy.")
@click.option("--shape", "shapes", multiple=True, metavar="NAME=VALUE,...",
              help="triton jobs: SPEC is the target (MODULE:NAME) and each shape one job, e.g. M=4096,N=4096,K=4096 "
                   "(repeatable).")
@click.option("--from", "from_file", type=click.Path(exists=True, dir_okay=False),
              help='Jobs as JSON lines: {"kind": ..., "spec": {...}, "budget": {...}, "strategy": ...}.')
@click.pass_context
def queue_add(ctx: click.Context, kind: str | None, spec: str | None, db_path: str | None, trials: int | None,
              seconds: float | None, strategy: str, shapes: tuple[str, ...], from_file: str | None) -> None:
    """Queue a job: KIND and SPEC, its JSON (c_matmul: {"m": 512, "n": 512, "k": 512}; te_cpu:
    {"workload": "matmul", "args": [256, 256, 256]}; model: {"factory": "mypkg.models:small_mlp",
    "inputs": ["4x64:float32"], "target": "cpu"}; triton: {"target": "mypkg.kernels:matmul",
    "shape": {"M": 4096, "N": 4096, "K": 4096}}, or the target and --shape; see docs/fleet.md);
    or many with --from. A job already queued or running is not queued twice. Without
    --trials or --seconds, a triton job tunes with its kernel's budget, the others 32 trials."""
    if (kind is None) == (from_file is None):
        raise click.UsageError("give KIND and SPEC, or --from FILE")
    if shapes and kind != "triton":
        raise click.UsageError("--shape is for triton jobs: queue add triton MODULE:NAME --shape M=..,N=..")
    wanted = []
    if kind is not None:
        budget = {k: v for k, v in (("trials", trials), ("seconds", seconds)) if v is not None} or \
            dict(JOB_KINDS[kind].default_budget)
        for parsed in _specs(spec, shapes):
            wanted.append(_job(kind, parsed, budget, strategy, ""))
    else:
        with open(from_file, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = f"{from_file}:{n}: "
                try:
                    row = json.loads(line)
                except ValueError as exc:
                    raise click.ClickException(f"{where}not JSON: {exc}") from exc
                if not isinstance(row, dict) or set(row) - {"kind", "spec", "budget", "strategy"}:
                    raise click.ClickException(f"{where}a job is an object with kind, spec, budget, strategy")
                row_kind = str(row.get("kind"))
                default = dict(JOB_KINDS[row_kind].default_budget) if row_kind in JOB_KINDS else {"trials": 32}
                wanted.append(_job(row_kind, row.get("spec"), row.get("budget", default),
                                   str(row.get("strategy", "auto")), where))
    queue = JobQueue(open_database(ctx, db_path))
    for job in wanted:
        job_id = queue.enqueue(*job)
        click.echo(f"job {job_id}: {describe(job[0], job[1])} {job[2]} ({job[3]})")


def _specs(spec: str | None, shapes: tuple[str, ...]) -> list[Any]:
    """SPEC as JSON; with --shape, SPEC is a triton target and each shape one spec."""
    if not shapes:
        try:
            return [json.loads(spec) if spec is not None else None]
        except ValueError as exc:
            raise click.ClickException(f"SPEC is not JSON: {exc}") from exc
    if spec is None:
        raise click.UsageError("give the target: queue add triton MODULE:NAME --shape M=..,N=..")
    from ..extras import needs_extra
    with needs_extra("queue add triton"):
        from ..frontends.triton.offline import parse_shape
    try:
        return [{"target": spec, "shape": parse_shape(text)} for text in shapes]
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc


@queue_group.command("list")
@db_option
@click.option("--status", type=click.Choice(["queued", "running", "done", "failed"]), default=None)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def queue_list(ctx: click.Context, db_path: str | None, status: str | None, as_json: bool) -> None:
    """Every job: its state, who runs it, and its best time against its default configuration."""
    db = open_database(ctx, db_path)
    rows = []
    for job in JobQueue(db).list(status):
        s = job_savings(db, job)
        rows.append((job, s))
    if as_json:
        print_json([{"id": j.id, "kind": j.kind, "spec": j.spec, "budget": j.budget, "strategy": j.strategy,
                     "status": j.status, "owner": j.owner, "attempts": j.attempts, "trials_done": j.trials_done,
                     "message": j.message, "baseline_seconds": s.baseline, "best_seconds": s.best,
                     "speedup": s.speedup} for j, s in rows])
        return
    if not rows:
        click.echo(f"no jobs in {db.where}: queue some with `tensortune queue add`")
        return
    table = Table(title=escape(f"jobs in {db.where}"))
    for col in ("id", "job", "status", "worker", "trials", "default", "best", "speedup"):
        table.add_column(col)
    for j, s in rows:
        planned = j.budget.get("trials", "-")
        table.add_row(str(j.id), escape(describe(j.kind, j.spec)), escape(j.status + _status_note(j)),
                      escape(j.owner), f"{j.trials_done}/{planned}",
                      format_time(s.baseline) if s.baseline else "-", format_time(s.best) if s.best else "-",
                      f"{s.speedup:.2f}x" if s.speedup else "-")
    console.print(table)
    counts = {k: sum(1 for j, _ in rows if j.status == k) for k in ("queued", "running", "done", "failed")}
    found = [s for _, s in rows if s.saved is not None]
    summary = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
    if found:
        summary += f"; time saved against the defaults: {sum(s.saved for s in found) / len(found):.1%} on average"
    click.echo(summary)


def _status_note(job: Any) -> str:
    """Why a job failed; for a done job of a kind that tunes itself (a model), what it did."""
    if job.status == "failed":
        return f" ({job.message[:60]})"
    kind = JOB_KINDS.get(job.kind)
    if job.status == "done" and kind is not None and kind.run is not None and "; " in job.message:
        return f" ({job.message.split('; ', 1)[1][:60]})"
    return ""


@click.command("worker")
@db_option
@click.option("--lease", type=click.FloatRange(min=1), default=60.0, show_default=True,
              help="Seconds a job and its candidate claims stay this worker's without a heartbeat.")
@click.option("--jobs", type=click.IntRange(min=1), default=None, help="Build processes (default: CPU count).")
@click.option("--max-jobs", type=click.IntRange(min=1), default=None, help="Stop after this many jobs.")
@click.option("--exit-when-idle", is_flag=True, help="Stop when no job is left instead of waiting for more.")
@click.option("--poll", type=click.FloatRange(min=0.1), default=2.0, show_default=True,
              help="Seconds between looks at an empty queue.")
@click.pass_context
def worker(ctx: click.Context, db_path: str | None, lease: float, jobs: int | None, max_jobs: int | None,
           exit_when_idle: bool, poll: float) -> None:
    """Take tuning jobs from the queue, tune them and record the results (on any number of
    hosts at once, with a PostgreSQL store). SIGTERM or Ctrl-C stops after the candidates in
    flight and queues the current job again (a second one stops at once)."""
    db = open_database(ctx, db_path)
    w = Worker(db, lease_seconds=lease, jobs=jobs, poll_seconds=poll,
               log=lambda line: click.echo(f"[{w.owner}] {line}", err=True))

    received: list[int] = []

    def stop(signum: int, frame: Any) -> None:
        received.append(signum)
        if w.stopping.is_set():  # asked twice: leave now (the job's lease returns it to the queue)
            raise SystemExit(128 + signum)
        click.echo(f"[{w.owner}] stopping after the candidates in flight; the job goes back to the queue", err=True)
        w.interrupt()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    outcomes = w.run(max_jobs=max_jobs, exit_when_idle=exit_when_idle)
    done = sum(1 for o in outcomes if o.status == "done")
    click.echo(f"{w.owner}: {len(outcomes)} job(s), {done} done, {sum(o.trials for o in outcomes)} candidates measured")
    sys.stdout.flush()
    if received:
        raise SystemExit(128 + received[0])
