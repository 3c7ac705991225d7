"""benchmarks/gpu_common.py, the part of the GPU benchmark scripts that needs no GPU: the
interleaved rounds, the row loop that keeps every measured row in the JSON, the name
selection and the exit status. The scripts themselves run in test_benchmark_scripts.py."""

import importlib.util
import json
from collections import namedtuple
from pathlib import Path

import pytest

# loaded from its file: the benchmarks folder is not put on the path (its modules' names are common words)
_SPEC = importlib.util.spec_from_file_location("gpu_common",
                                               Path(__file__).parents[1] / "benchmarks" / "gpu_common.py")
gc = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(gc)


class _Timer:
    """Times a call as the runs it is given, in turn (seconds)."""

    def __init__(self, *runs: tuple[float, ...]) -> None:
        self.runs = list(runs)

    def time(self, fn):
        fn()
        return self.runs.pop(0)


def test_each_round_times_every_contender_once_in_order():
    calls = []
    timer = _Timer((1e-6, 5e-6, 2e-6), (4e-6,), (3e-6, 1e-6), (7e-6, 9e-6))
    got = gc.interleaved_us({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, timer, 2)
    assert calls == ["a", "b", "a", "b"]
    assert got == {"a": [pytest.approx(2.0), pytest.approx(2.0)], "b": [pytest.approx(4.0), pytest.approx(8.0)]}


def test_every_row_is_written_as_it_is_measured_and_a_failure_is_that_rows(tmp_path, capsys):
    path = tmp_path / "bench.json"
    report = {"rows": {}, "skipped": []}
    seen_on_disk = []

    def measure(name):
        seen_on_disk.append(sorted(json.loads(path.read_text())["rows"]) if path.exists() else None)
        if name == "bad":
            raise ValueError("no kernel")
        return {"correct": True, "us": 1.0}

    def skip(name):
        if name == "late":
            report["skipped"].append(name)
            return True
        return False

    gc.measure_rows(["a", "bad", "late", "b"], measure, report, "rows", path, start=0.0, skip=skip)
    assert seen_on_disk == [None, ["a"], ["a"]]
    written = json.loads(path.read_text())
    assert written == report and sorted(written["rows"]) == ["a", "b"] and written["skipped"] == ["late"]
    assert written["failed"] == {"bad": "ValueError: no kernel"} and written["seconds"] > 0
    assert "[bad] FAILED: ValueError: no kernel" in capsys.readouterr().out
    assert gc.exit_status(report, "rows") == 1
    del report["failed"]
    assert gc.exit_status(report, "rows") == 0
    report["rows"]["b"]["correct"] = False
    assert gc.exit_status(report, "rows") == 1


def test_names_select_items_and_an_unknown_name_is_said(capsys):
    Item = namedtuple("Item", "name")
    items = [Item("q-proj"), Item("up-proj"), Item("down-proj")]
    assert gc.select_by_name(items, "", "shapes") == items
    assert gc.select_by_name(items, " down-proj, q-proj ", "shapes") == [items[0], items[2]]
    assert gc.select_by_name(items, "q-proj,z,y", "shapes") is None
    assert capsys.readouterr().err == "unknown shapes ['y', 'z']; known: ['q-proj', 'up-proj', 'down-proj']\n"
