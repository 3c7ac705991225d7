"""The dashboard end to end: a database made by really tuning a C kernel on two targets, the real
`tensortune dashboard` process on a free port, and Debian's chromium driven by Playwright clicking
through the page; then `tensortune report`'s file opened in the same browser. Needs chromium
(scripts/services.d/30-chromium.sh) and playwright (the `test` extra)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from dashboard_tuning import WORKLOAD, fill

from tensortune.dashboard import workload_id, workloads_view
from tensortune.db import Database, Target, Workload
from tensortune.measure import ErrorKind, MeasureResult
from tensortune.space import Config

pytestmark = pytest.mark.slow  # tunes for real (some 20 s on 2 cores) and starts a browser

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
NOTHING_WORKED = Workload.make("nothing_worked")
HOSTILE = '<img src=x onerror="window.pwned=1"></script><script>window.pwned=1</script>'


def _tensortune() -> list[str]:
    script = Path(sys.executable).parent / "tensortune"
    return [str(script)] if script.exists() else [sys.executable, "-m", "tensortune.cli.main"]


def _env() -> dict[str, str]:
    src = str(Path(__file__).resolve().parents[1] / "src")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """The database, the two targets, and a hostile workload name (which must stay text)."""
    folder = tmp_path_factory.mktemp("dashboard")
    targets = fill(folder / "records.db", folder / "cc-cache")
    with Database(folder / "records.db") as db:
        db.add(Workload.make(HOSTILE), targets[0], MeasureResult(Config(a=1), (1e-3,)))
        db.add(NOTHING_WORKED, targets[0], MeasureResult.failed(Config(a=1), ErrorKind.TIMEOUT, "took too long"))
    return folder / "records.db", targets


@pytest.fixture(scope="module")
def dashboard_url(tuned):
    process = subprocess.Popen([*_tensortune(), "dashboard", "--db", str(tuned[0]), "--port", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    line = process.stdout.readline()
    found = re.search(r"http://127\.0\.0\.1:\d+/", line)
    if not found:
        process.kill()
        pytest.fail(f"the dashboard did not start: {line}{process.stderr.read()}")
    yield found.group(0)
    process.terminate()
    assert process.wait(timeout=30) is not None


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    chromium = os.environ.get("TENSORTUNE_CHROMIUM", "/usr/bin/chromium")
    if not Path(chromium).exists():
        pytest.fail(f"no chromium at {chromium}: run scripts/services.d/30-chromium.sh (apt-get install chromium)")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture()
def page(browser):
    context = browser.new_context(permissions=["clipboard-read", "clipboard-write"],
                                  viewport={"width": 1280, "height": 900})
    context.set_default_timeout(60_000)  # a shared 2-core machine can be slow; nothing here is timed
    page = context.new_page()
    page.requests, page.errors = [], []
    page.on("request", lambda r: page.requests.append(r.url))
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    yield page
    context.close()


def _ready(page):
    page.wait_for_selector("body[data-ready='1']")


def _open_workload(page, url):
    page.goto(url)
    _ready(page)
    page.locator(f"[data-workload-id='{workload_id(WORKLOAD)}'] [data-testid=workload-link]").click()
    page.wait_for_selector("[data-testid=target]")


def _drawn(page) -> dict:
    """What the workload's page shows, per target id: points per run in both curves, histogram
    counts, failures, best rows, and the comparison's rows."""
    out = {}
    for section in page.locator("[data-testid=target]").all():
        tid = section.get_attribute("data-target-id")
        curves = {}
        for chart in ("curve-trials", "curve-seconds"):
            runs = section.locator(f"[data-testid={chart}] g.run")
            curves[chart] = {g.get_attribute("data-session"): g.locator("circle.pt").count() for g in runs.all()}
        bars = section.locator("[data-testid=histogram] rect.bar")
        out[tid] = {
            "curves": curves,
            "last_best": {g.get_attribute("data-session"): float(g.locator("circle.pt").last.get_attribute("data-best"))
                          for g in section.locator("[data-testid=curve-trials] g.run").all()
                          if g.locator("circle.pt").count()},
            "histogram": sum(int(b.get_attribute("data-count")) for b in bars.all()),
            "failures": {r.get_attribute("data-kind"): int(r.locator("td.num").inner_text())
                         for r in section.locator("[data-testid=failures] tr[data-kind]").all()},
            "best": section.locator("[data-testid=best-row] code.config").all_inner_texts(),
        }
    out["comparison"] = page.locator("[data-testid=comparison]").inner_text()
    return out


def _expected(db_path: Path, targets: tuple[Target, Target]) -> dict:
    """The same, computed from the records."""
    from tensortune.dashboard.views import target_id

    with Database(db_path) as db:
        out = {}
        for t in targets:
            records = db.records(WORKLOAD, t)
            sessions = Counter(r.session for r in records if r.ok)
            best = {s: min(r.time for r in records if r.ok and r.session == s) for s in sessions}
            out[target_id(t)] = {
                "curves": {"curve-trials": dict(sessions), "curve-seconds": dict(sessions)},
                "last_best": best, "histogram": sum(sessions.values()),
                "failures": dict(Counter(r.error.value for r in records if r.error)),
                "best": [r.config.to_json() for r in db.top_k(WORKLOAD, t, 10)],
            }
        return out


def test_the_dashboard_lists_workloads_and_draws_each_run_from_the_records(tuned, dashboard_url, page):
    page.goto(dashboard_url)
    _ready(page)
    rows = page.locator("[data-testid=workload-row]")
    with Database(tuned[0]) as db:
        assert rows.count() == len(db.workloads()) == 3
    row = page.locator(f"[data-workload-id='{workload_id(WORKLOAD)}']")
    assert row.locator("[data-testid=workload-link]").inner_text() == "axpy"
    with Database(tuned[0]) as db:
        labels = [t["label"] for w in workloads_view(db) if w["id"] == workload_id(WORKLOAD) for t in w["targets"]]
    assert len(labels) == 2 and all(label in row.inner_text() for label in labels)
    # a hostile workload name is shown as text and runs nothing
    assert HOSTILE in page.locator("[data-testid=workloads]").inner_text()
    assert page.evaluate("window.pwned") is None

    row.locator("[data-testid=workload-link]").click()
    page.wait_for_selector("[data-testid=target]")
    assert page.url.endswith(f"#/w/{workload_id(WORKLOAD)}")
    drawn, expected = _drawn(page), _expected(*tuned)
    for tid, want in expected.items():
        got = drawn[tid]
        assert got["curves"] == want["curves"]
        assert got["last_best"] == pytest.approx(want["last_best"])
        assert (got["histogram"], got["failures"], got["best"]) == (want["histogram"], want["failures"], want["best"])
    assert page.errors == []
    assert all(u.startswith(dashboard_url) for u in page.requests), page.requests


def test_copy_puts_a_best_configuration_on_the_clipboard(tuned, dashboard_url, page):
    from playwright.sync_api import expect

    from tensortune.dashboard.views import target_id

    _open_workload(page, dashboard_url)
    target = tuned[1][1]
    section = page.locator(f"[data-testid=target][data-target-id='{target_id(target)}']")
    button = section.locator("[data-testid=best-row]").first.locator("[data-testid=copy]")
    button.click()
    expect(button).to_have_attribute("data-copied", "yes", timeout=30_000)
    with Database(tuned[0]) as db:
        best = db.best(WORKLOAD, target).config
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied == best.to_json() and Config.from_json(copied) == best


def test_the_comparison_shows_each_target_and_its_best_on_the_others(tuned, dashboard_url, page):
    from tensortune.dashboard.views import target_id

    _open_workload(page, dashboard_url)
    table = page.locator("[data-testid=comparison]")
    with Database(tuned[0]) as db:
        bests = {t: db.best(WORKLOAD, t) for t in tuned[1]}
        standing = {t: {r.config.digest: r.time for r in db.top_k(WORKLOAD, t, 1000)} for t in tuned[1]}
    fastest = min(bests, key=lambda t: bests[t].time)
    winners = list(dict.fromkeys(bests[t].config.digest for t in tuned[1]))
    for t in tuned[1]:
        row = table.locator(f"tr[data-target-id='{target_id(t)}']")
        cells = row.locator("td.num").all_inner_texts()
        assert ("fastest" in cells[1]) == (t == fastest)
        # one cell per target's best configuration: its time here, or "not measured"
        measured = ["not measured" if d not in standing[t] else "s" for d in winners]
        assert [("not measured" if c == "not measured" else "s") for c in cells[2:]] == measured
    copies = table.locator("[data-testid=copy]")
    assert copies.count() == len(winners)


def test_a_workload_without_a_success_says_so(dashboard_url, page):
    page.goto(f"{dashboard_url}#/w/{workload_id(NOTHING_WORKED)}")
    _ready(page)
    section = page.locator("[data-testid=target]")
    assert section.locator("[data-testid=curve-trials]").text_content() == "no successful trial"
    assert section.locator("tr[data-kind=timeout]").inner_text().split("\t")[:2] == ["timeout", "1"]
    assert "No successful configuration." in section.inner_text() and page.errors == []


def test_a_bad_workload_address_shows_the_servers_error(dashboard_url, page):
    page.goto(dashboard_url + "#/w/not-an-id")
    _ready(page)
    assert "16 hexadecimal digits" in page.locator("[data-testid=error]").inner_text()
    page.goto(dashboard_url + "#/w/0123456789abcdef")
    page.reload()
    _ready(page)
    assert "no workload has id '0123456789abcdef'" in page.locator("[data-testid=error]").inner_text()


def test_the_static_report_shows_what_the_dashboard_shows(tuned, dashboard_url, page, tmp_path):
    out = tmp_path / "report.html"
    done = subprocess.run([*_tensortune(), "report", "axpy", "--db", str(tuned[0]), "-o", str(out)],
                          check=False, capture_output=True, text=True, env=_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    _open_workload(page, dashboard_url)
    live = _drawn(page)
    page.requests.clear()
    page.goto(out.as_uri())
    _ready(page)
    assert _drawn(page) == live
    assert page.requests == [out.as_uri()]  # nothing else loaded: the file is self-contained
    assert page.errors == []


def test_a_report_of_a_hostile_name_shows_it_as_text(tuned, page, tmp_path):
    out = tmp_path / "hostile.html"
    done = subprocess.run([*_tensortune(), "report", workload_id(Workload.make(HOSTILE)), "--db", str(tuned[0]),
                           "-o", str(out)], check=False, capture_output=True, text=True, env=_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    page.goto(out.as_uri())
    _ready(page)
    assert page.locator("[data-testid=workload-title]").inner_text().startswith(HOSTILE)
    assert page.evaluate("window.pwned") is None and page.errors == []


def test_live_shows_a_run_while_it_is_tuned(tuned, dashboard_url, page):
    from dashboard_tuning import tune
    from playwright.sync_api import expect

    from tensortune.dashboard.views import target_id

    _open_workload(page, dashboard_url)
    target = tuned[1][0]
    runs = page.locator(f"[data-testid=target][data-target-id='{target_id(target)}'] [data-testid=curve-trials] g.run")
    before = runs.count()
    page.locator("#live").check()
    with Database(tuned[0]) as db:
        tune(db, "cc", tuned[0].parent / "cc-cache", seed=4, trials=3)
        sessions = {r.session for r in db.records(WORKLOAD, target)}
    expect(runs).to_have_count(before + 1, timeout=30_000)
    assert len(sessions) == before + 1 and page.errors == []
