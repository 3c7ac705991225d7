import json
import re

from click.testing import CliRunner

from tensortune.cli.main import cli
from tensortune.db import Database, Target, Workload
from tensortune.measure import ErrorKind, MeasureResult
from tensortune.space import Config


def seeded_db(path):
    db = Database(path)
    w = Workload.make("my.kernel", "src", {"M": 128})
    t = Target.make("cpu", "test")
    for i in range(4):
        db.add(w, t, MeasureResult(Config(BLOCK=16 * (i + 1)), (1e-3 * (4 - i),)))
    return w


def test_help_everywhere():
    runner = CliRunner()
    for args in ([], ["demo"], ["db"], ["db", "list"], ["db", "show"], ["db", "best"], ["db", "export"],
                 ["db", "import"], ["db", "delete"]):
        out = runner.invoke(cli, args + ["--help"])
        assert out.exit_code == 0, out.output
        assert "Usage" in out.output


def test_db_commands_round_trip(tmp_path):
    path = tmp_path / "a.db"
    seeded_db(path)
    runner = CliRunner()
    out = runner.invoke(cli, ["--db", str(path), "db", "list", "--json"])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.output)
    assert rows[0]["records"] == 4 and rows[0]["workload"].startswith("my.kernel@")
    out = runner.invoke(cli, ["db", "best", "my.kernel", "--db", str(path), "--json"])
    assert json.loads(out.output)[0]["config"] == {"BLOCK": 64}
    out = runner.invoke(cli, ["db", "show", "1", "--db", str(path)])
    assert out.exit_code == 0 and "BLOCK" in out.output
    export = tmp_path / "r.jsonl"
    assert runner.invoke(cli, ["db", "export", str(export), "--db", str(path)]).exit_code == 0
    other = tmp_path / "b.db"
    out = runner.invoke(cli, ["db", "import", str(export), "--db", str(other)])
    assert "imported 4 new records" in out.output
    out = runner.invoke(cli, ["db", "best", "nothing-like-this", "--db", str(path)])
    assert out.exit_code != 0 and "no workload matches" in out.output


def test_db_list_of_an_empty_database_says_so(tmp_path):
    out = CliRunner().invoke(cli, ["--db", str(tmp_path / "new.db"), "db", "list"])
    assert out.exit_code == 0 and "holds no records yet" in out.output, out.output


def test_env_var_selects_the_database(tmp_path, monkeypatch):
    path = tmp_path / "env.db"
    seeded_db(path)
    monkeypatch.setenv("TENSORTUNE_DB", str(path))
    out = CliRunner().invoke(cli, ["db", "list", "--json"])
    assert len(json.loads(out.output)) == 1


def test_corrupt_database_is_a_clean_cli_error(tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"\x00garbage" * 1000)
    out = CliRunner().invoke(cli, ["db", "list", "--db", str(bad)])
    assert out.exit_code != 0
    assert "bad.db" in out.output and "Traceback" not in out.output


def test_demo_tunes_then_answers_from_the_database(tmp_path):
    path = tmp_path / "demo.db"
    runner = CliRunner()
    args = ["demo", "--size", "96", "--trials", "6", "--seconds", "60", "--seed", "0", "--json", "--db", str(path)]
    first = runner.invoke(cli, args)
    assert first.exit_code == 0, first.output
    report = json.loads(first.output)
    assert set(report) >= {"best_config", "best_gflops", "baseline_gflops", "numpy_gflops", "trials",
                           "seconds", "from_db"}
    assert report["from_db"] is False and report["trials"] >= 6
    assert report["best_gflops"] > 0 and report["numpy_gflops"] > 0 and report["baseline_gflops"] > 0
    assert report["best_gflops"] >= report["baseline_gflops"] * 0.999  # the default is a candidate too
    second = json.loads(runner.invoke(cli, args).output)
    assert second["from_db"] is True
    assert second["best_config"] == report["best_config"]
    table = runner.invoke(cli, ["demo", "--size", "96", "--db", str(path)])
    assert "Answered from the database" in table.output


def test_bad_arguments_and_files_are_messages_not_tracebacks(tmp_path):
    path = tmp_path / "a.db"
    seeded_db(path)
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(bytes(range(256)) * 4)
    cases = [
        (["db", "best", "my", "-k", "0"], "0 is not in the range"),
        (["db", "show", "my", "--limit", "-1"], "-1 is not in the range"),
        (["db", "export", str(tmp_path / "no" / "such" / "r.jsonl")], "cannot write"),
        (["db", "import", str(binary)], "binary.jsonl: not a JSON-lines file"),
        (["demo", "--size", "0"], "'--size': 0 is not in the range"),
        (["demo", "--seconds", "0"], "'--seconds': 0.0 is not in the range"),
        (["demo", "--trials", "0"], "'--trials': 0 is not in the range"),
        (["demo", "--strategy", "nope"], "unknown strategy 'nope'"),
        (["bench", "model", "--dataset", str(binary)], "binary.jsonl: not a readable Kernel Tuner cache"),
        (["bench", "strategies", "--dataset", str(binary)], "binary.jsonl: not a readable Kernel Tuner cache"),
    ]
    for args, message in cases:
        out = CliRunner().invoke(cli, ["--db", str(path)] + args)
        assert out.exit_code != 0 and message in out.output, (args, out.output)
        assert not isinstance(out.exception, Exception) or isinstance(out.exception, SystemExit), (args, out.exception)


def test_a_damaged_record_is_named_and_the_others_shown_in_every_db_command(tmp_path):
    import sqlite3

    path = tmp_path / "a.db"
    seeded_db(path)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE records SET times_json='[' WHERE id=2")
    conn.commit()
    conn.close()
    export = tmp_path / "r.jsonl"
    for args, shown in ((["db", "show", "1"], "BLOCK"), (["db", "best", "1", "-k", "4"], '"BLOCK":64'),
                        (["db", "export", str(export)], "exported 3 records")):
        out = CliRunner().invoke(cli, ["--db", str(path)] + args)
        assert out.exit_code == 0 and shown in out.output, (args, out.output)
        assert "skipped 1 damaged record(s)" in out.output and "record 2 (JSONDecodeError" in out.output, out.output
    assert len(export.read_text().splitlines()) == 3
    out = CliRunner().invoke(cli, ["--db", str(path), "db", "best", "1", "-k", "4", "--json"])
    assert {r["config"]["BLOCK"] for r in json.loads(out.stdout)} == {16, 48, 64}  # record 2 held 32


def test_workload_names_and_messages_are_printed_as_text_not_markup(tmp_path):
    path = tmp_path / "a.db"
    db = Database(path)
    w = Workload.make("k[/]ernel [bold]x[/bold]", "src")
    db.add(w, Target.make("cpu", "dev[/"), MeasureResult.failed(Config(B=[1, 2]), ErrorKind.CRASHED, "boom [/x]"))
    for args in (["db", "list"], ["db", "show", "1"]):
        out = CliRunner().invoke(cli, ["--db", str(path)] + args)
        assert out.exit_code == 0 and "k[/]ernel [bold]x[/bold]@" in out.output, out.output
    out = CliRunner().invoke(cli, ["--db", str(path), "db", "show", "1"])
    assert "crashed: boom [/x]" in out.output and "dev[/" in out.output and '{"B":[1,2]}' in out.output


def test_db_delete_by_workload_and_by_kind(tmp_path):
    path = tmp_path / "a.db"
    w = seeded_db(path)
    db = Database(path)
    t = Target.make("cpu", "test")
    db.add(w, t, MeasureResult.failed(Config(BLOCK=99), ErrorKind.CRASHED, "boom"))
    db.add(w, t, MeasureResult.failed(Config(BLOCK=98), ErrorKind.COMPILE_ERROR, "disk", environment="no space"))
    other = Workload.make("other", "src")
    db.add(other, t, MeasureResult.failed(Config(BLOCK=1), ErrorKind.CRASHED, "boom"))
    runner = CliRunner()
    out = runner.invoke(cli, ["--db", str(path), "db", "delete"])
    assert out.exit_code == 2 and "name a WORKLOAD" in out.output
    out = runner.invoke(cli, ["--db", str(path), "db", "delete", "--environment"], input="n\n")
    assert out.exit_code == 1 and "Aborted" in out.output and len(db.records(w)) == 6
    out = runner.invoke(cli, ["--db", str(path), "db", "delete", "--environment", "--yes"])
    assert "deleted 1 record(s)" in out.output and len(db.records(w)) == 5
    out = runner.invoke(cli, ["--db", str(path), "db", "delete", "my.kernel", "--kind", "crashed", "--yes"])
    assert "deleted 1 record(s)" in out.output and [r.ok for r in db.records(w)] == [True] * 4
    assert len(db.records(other)) == 1
    out = runner.invoke(cli, ["--db", str(path), "db", "delete", "--failed", "--yes"])
    assert "deleted 1 record(s)" in out.output and db.records(other) == []
    out = runner.invoke(cli, ["--db", str(path), "db", "delete", "1", "--yes"])
    assert "deleted 4 record(s)" in out.output and db.records(w) == []


def test_demo_refuses_bad_options_before_touching_the_database(tmp_path):
    path = tmp_path / "demo.db"
    runner = CliRunner()
    for args, words in ((["--strategy", "bogus"], "unknown strategy 'bogus'"), (["--size", "0"], "--size"),
                        (["--size", "-3"], "--size"), (["--seconds", "0"], "--seconds"),
                        (["--trials", "0"], "--trials")):
        out = runner.invoke(cli, ["demo", "--db", str(path), *args])
        assert out.exit_code == 2 and words in out.output, out.output
    assert not path.exists()


MODEL_FILE = """
import torch

def make():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))

def not_a_model():
    return "a string"
"""


def test_model_tune_compiles_checks_and_exports_the_records(tmp_path):
    """The CLI's whole path on a real (tiny) model: import the factory, make inputs from
    --input, tune every kernel, check against eager, export the records."""
    pytest = __import__("pytest")
    pytest.importorskip("torch")
    (tmp_path / "tiny_cli_model.py").write_text(MODEL_FILE)
    exported = tmp_path / "records.jsonl"
    out = CliRunner().invoke(cli, ["--db", str(tmp_path / "m.db"), "model", "tune",
                                   f"{tmp_path / 'tiny_cli_model.py'}:make", "--input", "4x8", "--target", "cpu",
                                   "--budget", "4", "--export", str(exported), "--json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.output[out.output.index("{"):])
    assert report["exported"] >= 1 and exported.exists()
    graph = report["graphs"][0]
    assert graph["tasks"] and not graph["fallbacks"]
    checked = re.findall(r"(\S+): ([0-9.e+-]+) \(tolerance ([0-9.e+-]+)\)", graph["check"])
    assert checked and all(float(err) <= float(tol) for _, err, tol in checked), graph["check"]


def test_model_tune_names_a_bad_factory_or_input(tmp_path):
    pytest = __import__("pytest")
    pytest.importorskip("torch")
    (tmp_path / "tiny_cli_bad.py").write_text(MODEL_FILE)
    runner = CliRunner()
    cases = [
        (["os:path", "--input", "2x3"], "'os:path' is a module, not a function that returns a model"),
        ([f"{tmp_path / 'tiny_cli_bad.py'}:not_a_model", "--input", "2x3"], "returned a str, not a torch.nn.Module"),
        ([f"{tmp_path / 'tiny_cli_bad.py'}:make"], "describe its inputs with --input"),
        ([f"{tmp_path / 'tiny_cli_bad.py'}:make", "--input", "2xq"], "the shape must be numbers joined by x"),
        ([f"{tmp_path / 'tiny_cli_bad.py'}:make", "--input", "2x8:int64:9-3"], "the range is empty"),
        ([f"{tmp_path / 'tiny_cli_bad.py'}:make", "--input", "2x8:float77"], "unknown dtype 'float77'"),
        (["no_such_module_anywhere:make", "--input", "2x8"], "No module named 'no_such_module_anywhere'"),
    ]
    for args, message in cases:
        out = runner.invoke(cli, ["--db", str(tmp_path / "m.db"), "model", "tune", *args, "--target", "cpu"])
        assert out.exit_code != 0 and message in out.output, (args, out.output)
        assert "Traceback" not in out.output
