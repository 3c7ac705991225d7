"""The dashboard's JSON API and the report, over a real SQLite database written through the public
`Database` API: what each endpoint answers, and a clear 4xx for every bad input. (The browser tests
are in test_dashboard_browser.py.)"""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from tensortune.cli.main import cli
from tensortune.dashboard import make_server, workload_id
from tensortune.dashboard.page import embed_json
from tensortune.db import Database, Target, Workload
from tensortune.measure import ErrorKind, MeasureResult
from tensortune.space import Config

W = Workload.make("mm", "source", {"M": 64})
OTHER = Workload.make("conv", "other source", {"N": 1})
CPU_A = Target.make("cpu", "test cpu", "x86_64", {"cc": "gcc 12"})
CPU_B = Target.make("cpu", "test cpu", "x86_64", {"cc": "clang 16"})
HOSTILE = '</script><script>window.pwned=1</script><img src=x onerror="window.pwned=1">'


def _ok(t, **config):
    return MeasureResult(Config(config), (t, t * 1.01, t * 0.99), compile_seconds=0.1, run_seconds=0.01)


def _fill(db):
    """Two runs on CPU_A, one on CPU_B; failures of the candidate, of the environment and an amendment."""
    at = 1000.0
    runs = [(CPU_A, "s1", [_ok(3e-3, b=1), _ok(2e-3, b=2), MeasureResult.failed(Config(b=3), ErrorKind.CRASHED, "died"),
                           _ok(2.5e-3, b=4)]),
            (CPU_A, "s2", [MeasureResult.failed(Config(b=5), ErrorKind.COMPILE_ERROR, "bad\nmore"),
                           MeasureResult.failed(Config(b=6), ErrorKind.COMPILE_ERROR, "disk full", environment="disk"),
                           _ok(1e-3, b=6), MeasureResult(Config(b=4), (), ErrorKind.CRASHED, "crashed later",
                                                         extra={"amends": True})]),
            (CPU_B, "s3", [_ok(4e-3, b=1), _ok(1.5e-3, b=6)])]
    for target, session, results in runs:
        for r in results:
            at += 1
            db.add(W, target, r, strategy="random", session=session, created_at=at)
    db.add(OTHER, CPU_A, _ok(5e-3, k=1), session="s4", created_at=at + 1)


@pytest.fixture()
def db(tmp_path):
    with Database(tmp_path / "records.db") as db:
        _fill(db)
        yield db


@pytest.fixture()
def api(db):
    server = make_server(db, "127.0.0.1", 0, "records.db")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"

    def get(path, method="GET"):
        request = urllib.request.Request(base + path, method=method, data=b"x" if method == "POST" else None)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                body = response.read()
                return response.status, response.headers, body
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers, exc.read()

    yield get
    server.shutdown()
    server.server_close()


def _json(answer):
    status, headers, body = answer
    assert headers["Content-Type"] == "application/json"
    return status, json.loads(body)


def test_the_workloads_endpoint_lists_each_workload_with_its_targets(api):
    status, data = _json(api("/api/workloads"))
    assert status == 200 and data["database"] == {"label": "records.db", "read_only": False, "damaged": 0}
    by_name = {w["name"]: w for w in data["workloads"]}
    assert set(by_name) == {"mm", "conv"}
    mm = by_name["mm"]
    assert mm["id"] == workload_id(W) and mm["records"] == 10 and mm["best_seconds"] == pytest.approx(1e-3)
    labels = {t["label"]: (t["records"], t["successes"], t["best_seconds"]) for t in mm["targets"]}
    # the two targets differ only in their compiler: the labels say so
    assert labels == {"cpu · test cpu · x86_64 · cc gcc 12": (8, 4, pytest.approx(1e-3)),
                      "cpu · test cpu · x86_64 · cc clang 16": (2, 2, pytest.approx(1.5e-3))}


def test_a_workload_shows_each_runs_curve_times_failures_and_best(api, db):
    status, data = _json(api(f"/api/workloads/{workload_id(W)}"))
    assert status == 200 and data["workload"]["name"] == "mm" and data["workload"]["records"] == 10
    a = next(t for t in data["targets"] if t["versions"]["cc"] == "gcc 12")
    s1, s2 = a["sessions"]
    assert (s1["id"], s1["trials"], s1["successes"]) == ("s1", 4, 3)
    assert [(p["trial"], p["best"]) for p in s1["points"]] == [(1, 3e-3), (2, 2e-3), (4, 2e-3)]
    # the environment's failure and the amendment are not trials; the curve starts at the run's start
    assert (s2["id"], s2["trials"], [(p["trial"], p["best"]) for p in s2["points"]]) == ("s2", 2, [(2, 1e-3)])
    assert s2["points"][0]["seconds"] == pytest.approx(1007 - 1005)  # its first record, a failure, at 1005
    assert a["times"] == sorted(r.time for r in db.records(W, CPU_A) if r.ok)
    assert {(f["kind"], f["cause"]): f["count"] for f in a["failures"]} == {
        ("crashed", "candidate"): 1, ("compile_error", "candidate"): 1, ("compile_error", "environment"): 1,
        ("crashed", "amends"): 1}
    assert next(f for f in a["failures"] if f["cause"] == "candidate" and f["kind"] == "compile_error")["example"] == "bad"
    # b=4 crashed its worker after it returned: it is no longer among the best
    assert [b["config"] for b in a["best"]] == [{"b": 6}, {"b": 2}, {"b": 1}]
    assert a["best"][0]["config_json"] == '{"b":6}' and a["best"][0]["repeats"] == 3


def test_the_comparison_puts_each_targets_best_on_every_target(api):
    _, data = _json(api(f"/api/workloads/{workload_id(W)}"))
    cmp = data["comparison"]
    assert [c["config"] for c in cmp["configs"]] == [{"b": 6}]  # the best on both targets
    rows = {r["label"].rsplit(" ", 2)[-2]: r for r in cmp["targets"]}
    assert rows["gcc"]["slowdown"] == 1.0 and rows["clang"]["slowdown"] == pytest.approx(1.5)
    assert rows["clang"]["times"] == [pytest.approx(1.5e-3)]


def test_top_limits_the_best_configurations(api):
    _, data = _json(api(f"/api/workloads/{workload_id(W)}?top=1"))
    assert all(len(t["best"]) == 1 for t in data["targets"])


@pytest.mark.parametrize("path, status, words", [
    ("/api/workloads/xyz", 400, "16 hexadecimal digits"),
    ("/api/workloads/%3Cscript%3E", 400, "16 hexadecimal digits"),
    ("/api/workloads/0123456789abcdef", 404, "no workload has id '0123456789abcdef'"),
    ("/api/workloads/{id}?top=0", 400, "top must be a whole number from 1 to 1000"),
    ("/api/workloads/{id}?top=ten", 400, "got 'ten'"),
    ("/api/workloads/{id}?colour=red", 400, "unknown parameter(s) ['colour']"),
    ("/api/workloads/{id}/more", 404, "no API endpoint"),
    ("/api/records", 404, "no API endpoint /api/records"),
    ("/favicon.ico", 404, "no page at '/favicon.ico'"),
])
def test_bad_input_is_a_4xx_that_names_the_problem(api, path, status, words):
    got, data = _json(api(path.format(id=workload_id(W))))
    assert got == status and words in data["error"]


def test_the_dashboard_only_reads(api, db):
    got, data = _json(api("/api/workloads", method="POST"))
    assert got == 405 and "only reads" in data["error"]
    assert len(db.records(W)) == 10
    status, headers, body = api("/api/workloads", method="HEAD")
    assert status == 200 and body == b"" and int(headers["Content-Length"]) > 0


def test_the_page_is_self_contained(api):
    status, headers, body = api("/")
    page = body.decode()
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert "default-src 'none'" in page and "connect-src 'self'" in page
    # no address outside the page but the SVG namespace's name (the browser test records every request)
    assert "src=" not in page and "<link" not in page
    assert "//" not in page.replace("http://www.w3.org/2000/svg", "").replace("// ", "")


def test_embedded_data_cannot_end_its_script_element():
    text = embed_json({"name": HOSTILE, "n": 1})
    assert "<" not in text and ">" not in text and json.loads(text) == {"name": HOSTILE, "n": 1}


def test_report_writes_one_html_file_with_the_workloads_data(tmp_path, db):
    db.add(Workload.make(HOSTILE), CPU_A, _ok(1e-3, a=1))
    out = tmp_path / "report.html"
    result = CliRunner().invoke(cli, ["report", "mm", "--db", str(db.path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert f"wrote {out}: mm@" in result.output
    html = out.read_text()
    data = json.loads(html.split('<script type="application/json" id="tt-data">')[1].split("</script>")[0])
    assert data["workload"]["id"] == workload_id(W) and len(data["targets"]) == 2
    hostile = CliRunner().invoke(cli, ["report", workload_id(Workload.make(HOSTILE)), "--db", str(db.path),
                                       "-o", str(tmp_path / "h.html")])
    assert hostile.exit_code == 0, hostile.output
    html = (tmp_path / "h.html").read_text()
    embedded = html.split('<script type="application/json" id="tt-data">')[1].split("</script>")[0]
    assert HOSTILE not in html and json.loads(embedded)["workload"]["name"] == HOSTILE


@pytest.mark.parametrize("args, words", [
    (["report", "nothing"], "no workload matches 'nothing'"),
    (["report", "1", "-o", "/nonexistent-folder/r.html"], "cannot write /nonexistent-folder/r.html"),
    (["report", "mm", "--top", "0"], "0 is not in the range"),
])
def test_report_input_errors_are_one_line(db, args, words):
    result = CliRunner().invoke(cli, [*args, "--db", str(db.path)])
    assert result.exit_code != 0 and words in result.output and "Traceback" not in result.output


def test_looking_at_a_database_that_does_not_exist_does_not_create_it(tmp_path):
    for command in (["dashboard", "--port", "0"], ["report", "1"]):
        result = CliRunner().invoke(cli, [*command, "--db", str(tmp_path / "missing.db")])
        assert result.exit_code == 1 and "no records database at" in result.output
    assert not (tmp_path / "missing.db").exists()


def test_a_busy_port_is_a_clear_error(db, api):
    status, _, _ = api("/api/workloads")
    taken = make_server(db, "127.0.0.1", 0)
    try:
        result = CliRunner().invoke(cli, ["dashboard", "--db", str(db.path), "--port",
                                          str(taken.server_address[1])])
    finally:
        taken.server_close()
    assert status == 200 and result.exit_code == 1 and "cannot listen on 127.0.0.1:" in result.output


def test_failures_count_every_failed_record(db):
    from tensortune.dashboard import workload_view

    view = workload_view(db, workload_id(W))
    counted = Counter()
    for t in view["targets"]:
        for f in t["failures"]:
            counted[f["kind"]] += f["count"]
    assert counted == Counter(r.error.value for r in db.records(W) if r.error)


def test_the_workloads_list_follows_new_records(api, db):
    _, before = _json(api("/api/workloads"))
    db.add(W, CPU_B, _ok(0.5e-3, b=7), session="s5")
    db.add(OTHER, CPU_B, _ok(1e-3, k=2), session="s6")
    _, after = _json(api("/api/workloads"))
    counts = {w["name"]: sorted((t["label"][-8:], t["records"]) for t in w["targets"]) for w in after["workloads"]}
    assert counts == {"mm": [("c gcc 12", 8), ("clang 16", 3)], "conv": [("c gcc 12", 1), ("clang 16", 1)]}
    assert [w["records"] for w in after["workloads"]] == [w["records"] + 1 for w in before["workloads"]]


def test_the_database_may_be_named_before_the_command(tmp_path, db):
    out = tmp_path / "r.html"
    result = CliRunner().invoke(cli, ["--db", str(db.path), "report", "conv", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "conv@" in result.output and out.exists()


def _ctrl_c_as_from_a_shell() -> None:
    """The child starts with SIGINT delivered and not ignored, as from a terminal, whatever
    the test process inherited or earlier tests left (both survive exec)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_the_dashboard_process_serves_until_ctrl_c(db):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1] / "src"),
                                                         os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen([sys.executable, "-m", "tensortune.cli.main", "dashboard", "--db", str(db.path),
                                "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                               preexec_fn=_ctrl_c_as_from_a_shell)
    try:
        line = process.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/", line).group(0)
        with urllib.request.urlopen(url + "api/workloads", timeout=30) as response:
            assert {w["name"] for w in json.load(response)["workloads"]} == {"mm", "conv"}
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert f"{db.path} at http://127.0.0.1:" in line
    assert process.returncode == 0 and err.strip() == "stopped"
