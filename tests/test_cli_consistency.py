"""One meaning per flag, every figure labelled, progress that never guesses a total,
rows that are never cut, and Ctrl-C as one line."""

from __future__ import annotations

import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

import tensortune as tt
from tensortune.cli.main import cli
from tensortune.db import Database, Target, Workload
from tensortune.measure import MeasureResult
from tensortune.progress import TuneProgress
from tensortune.space import Config

ROOT = Path(__file__).resolve().parents[1]


def test_json_prints_one_object_on_every_command_that_has_it():
    """`--json` is a flag everywhere (print JSON to stdout); files are written by `--output`."""
    def walk(command, path):
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, path + [name])
        yield path, command
    for path, command in walk(cli, []):
        for param in command.params:
            if "--json" in getattr(param, "opts", []):
                assert param.is_flag, f"tensortune {' '.join(path)}: --json takes a value"
            if "--print-json" in getattr(param, "opts", []):
                raise AssertionError(f"tensortune {' '.join(path)} still has --print-json")


def test_bench_model_json_goes_to_stdout_and_output_to_a_file(tmp_path):
    space = ROOT / "docs" / "benchmarks" / "spaces" / "sketch_softmax-H100.json.gz"
    out = tmp_path / "m.json"
    result = CliRunner().invoke(cli, ["bench", "model", "--dataset", str(space), "--splits", "1", "--json",
                                      "--output", str(out)])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert printed == json.loads(out.read_text())
    assert set(next(iter(printed.values()))) >= {"kendall_tau", "top1_error_pct"}


def seeded(path: Path, config: Config) -> Workload:
    db = Database(path)
    w = Workload.make("wide.kernel", "src", {"M": 128})
    db.add(w, Target.make("cpu", "test"), MeasureResult(config, (1e-3, 1.1e-3)), strategy="search")
    return w


def test_db_show_never_cuts_a_configuration(tmp_path):
    config = Config(**{f"PARAMETER_{i}": 1000 + i for i in range(12)})  # far wider than 80 columns
    seeded(tmp_path / "a.db", config)
    out = CliRunner().invoke(cli, ["--db", str(tmp_path / "a.db"), "db", "show", "1"])
    assert out.exit_code == 0, out.output
    assert config.to_json() in out.output


def test_db_figures_say_what_they_measure(tmp_path):
    seeded(tmp_path / "a.db", Config(BLOCK=64))
    runner = CliRunner()
    listed = runner.invoke(cli, ["--db", str(tmp_path / "a.db"), "db", "list"]).output
    assert "best median" in listed
    best = runner.invoke(cli, ["--db", str(tmp_path / "a.db"), "db", "best", "1"]).output
    assert "median time per call" in best and "[test, search]" in best
    as_json = json.loads(runner.invoke(cli, ["--db", str(tmp_path / "a.db"), "db", "best", "1", "--json"]).output)
    assert as_json[0]["strategy"] == "search"


def rendered_progress(total, steps, finish=True) -> str:
    buffer = io.StringIO()
    bar = TuneProgress(total, "t", console=Console(file=buffer, width=200, force_terminal=False))
    with bar:
        for _ in range(steps):
            bar.update(1e-3)
        if finish:
            bar.finish()
    return buffer.getvalue()


def test_progress_without_a_known_total_counts_trials():
    text = rendered_progress(None, 7)
    assert "7 trials" in text and "/?" not in text


def test_progress_ends_at_the_real_total():
    assert "3/3" in rendered_progress(10, 3)


def test_a_budget_larger_than_the_space_counts_to_the_space():
    counts = []

    class Spy(TuneProgress):
        def __init__(self, total, *args, **kwargs):
            counts.append(total)
            super().__init__(total, *args, **kwargs)

    import tensortune.tuner as tuner_module
    original = tuner_module.TuneProgress
    tuner_module.TuneProgress = Spy
    try:
        result = tt.tune(lambda X: X, {"X": [1, 2, 3]}, budget=50, db=":memory:", progress=False)
    finally:
        tuner_module.TuneProgress = original
    assert counts == [3] and result.trials == 3


@pytest.mark.slow
def test_ctrl_c_prints_one_line(tmp_path):
    db = tmp_path / "c.db"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "tensortune.cli.main", "--db", str(db), "demo", "--size", "128",
                             "--seconds", "120"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:  # wait until candidates are being measured
        time.sleep(0.5)
        try:
            with sqlite3.connect(db) as conn:
                if conn.execute("SELECT COUNT(*) FROM records").fetchone()[0] >= 2:
                    break
        except sqlite3.Error:
            pass
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole foreground group
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.strip().splitlines()[-1] == ("interrupted: every measurement made so far is kept in the records "
                                            "database")
