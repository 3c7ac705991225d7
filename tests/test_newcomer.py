"""What a newcomer meets first: every public name visible, a missing extra named in one
line, and tuning a C function in one call."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tensortune as tt
from tensortune.backends import CProblem
from tensortune.db import Database
from tensortune.frontends.c import c_workload

ROOT = Path(__file__).resolve().parents[1]


def run_python(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "TENSORTUNE_DB": str(tmp_path / "t.db"),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=240)


def test_dir_shows_every_public_name_and_imports_nothing(tmp_path):
    proc = run_python("""
        import sys, tensortune
        names = dir(tensortune)
        assert set(tensortune.__all__) <= set(names), set(tensortune.__all__) - set(names)
        heavy = [m for m in ("tensortune.graph", "tensortune.tuner", "tensortune.frontends.triton") if m in sys.modules]
        assert not heavy, heavy
        print("ok")
    """, tmp_path)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr


def test_type_checkers_see_the_same_names_as_the_lazy_table():
    tree = ast.parse((ROOT / "src" / "tensortune" / "__init__.py").read_text())
    guarded = [node for node in tree.body
               if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING"]
    assert len(guarded) == 1
    imported = {}
    for node in guarded[0].body:
        assert isinstance(node, ast.ImportFrom)
        for alias in node.names:
            imported[alias.name] = "tensortune." + node.module
    assert set(imported) == set(tt._LAZY)
    for name, module in imported.items():  # the module the checker reads is the one the name comes from
        assert getattr(__import__(module, fromlist=[name]), name) is getattr(tt, name)


HIDE = "import sys\nfor m in {modules!r}: sys.modules[m] = None\n"


@pytest.mark.parametrize("modules, code, extra", [
    (["triton"], "import tensortune as tt\ntt.autotune", "triton"),
    (["torch", "triton"], "import tensortune as tt\ntt.compile", "torch"),
    (["torch", "triton"], """
from tensortune import te
A = te.placeholder((8, 8), name="A")
te.autoschedule(te.compute((8, 8), lambda i, j: A[i, j] * 2, name="B"), target="cuda", budget=2)
""", "triton"),
    (["matplotlib"], """
from tensortune.bench.plot import plot_curves
plot_curves({"d": {"random": {"20": {"mean": 0.8, "p10": 0.7}}}}, "x.png")
""", "plot"),
])
def test_a_missing_extra_names_the_extra_in_one_line(modules, code, extra, tmp_path):
    proc = run_python(HIDE.format(modules=modules) + code, tmp_path)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("tensortune.extras.MissingExtra: ") and "needs " in last, proc.stderr
    assert f"pip install 'tensortune[{extra}" in last
    assert "During handling" not in proc.stderr  # the import's own traceback is not chained on


def test_the_command_line_says_which_extra_in_one_line(tmp_path):
    proc = run_python(HIDE.format(modules=["triton"]) + """
from tensortune.cli.main import cli
cli(["triton", "tune", "kernels:matmul", "--shape", "M=64"])
""", tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip() == ("Error: tensortune triton tune needs triton, which is not installed: "
                                   "pip install 'tensortune[triton]'")


SCALE = """
void scale(float* x, const float* y, int n) {
    #pragma omp simd
    for (int i = 0; i < n; i += STEP)
        for (int j = i; j < i + STEP && j < n; j++) x[j] = 2.0f * y[j] + OFFSET;
}
"""


def scale_reference(x, y):
    return {"x": 2.0 * y}


ARGS = [tt.ArrayArg("x", (4096,), role="out"), tt.ArrayArg("y", (4096,)), tt.ScalarArg("n", 4096)]


def test_tune_c_checks_every_candidate_and_keeps_the_records(tmp_path):
    db = Database(tmp_path / "t.db")
    space = {"STEP": [1, 16, 256], "OFFSET": ["0.0f", "1.0f"]}  # an offset of 1 is a wrong result
    result = tt.tune_c(SCALE, "scale", ARGS, space, reference=scale_reference, db=db, progress=False, jobs=1)
    assert result.best_config["OFFSET"] == "0.0f"
    assert {r.config["OFFSET"] for r in result.history if not r.ok} == {"1.0f"}
    assert all(r.error.value == "wrong_result" for r in result.history if not r.ok)
    again = tt.tune_c(SCALE, "scale", ARGS, space, reference=scale_reference, db=db, progress=False, jobs=1)
    assert again.trials == 0 and again.best_config == result.best_config


def test_an_edited_kernel_does_not_reuse_the_old_records(tmp_path):
    db = Database(tmp_path / "t.db")
    space = {"STEP": [1, 16], "OFFSET": ["0.0f"]}
    tt.tune_c(SCALE, "scale", ARGS, space, reference=scale_reference, db=db, progress=False, jobs=1)
    edited = SCALE.replace("2.0f * y[j]", "y[j] + y[j]")
    result = tt.tune_c(edited, "scale", ARGS, space, reference=scale_reference, db=db, progress=False, jobs=1)
    assert result.trials == 2
    assert len(db.workloads()) == 2


def test_a_c_workload_is_keyed_on_source_flags_and_arguments():
    base = CProblem(SCALE, "scale", tuple(ARGS), None)
    other_shape = CProblem(SCALE, "scale", (tt.ArrayArg("x", (64,), role="out"), tt.ArrayArg("y", (64,)),
                                            tt.ScalarArg("n", 64)), None)
    flagged = CProblem(SCALE, "scale", tuple(ARGS), None, flags=("-O2",))
    w = c_workload(base)
    assert w.name == "scale"
    assert c_workload(other_shape).source_hash == w.source_hash and c_workload(other_shape).key != w.key
    assert c_workload(flagged).source_hash != w.source_hash


def test_tune_c_names_a_bad_argument():
    with pytest.raises(TypeError, match="ArrayArg or a ScalarArg"):
        tt.tune_c(SCALE, "scale", [np.zeros(4)], {"STEP": [1]}, db=":memory:", progress=False)


SCRIPT_HEAD = '''
import tensortune as tt
SOURCE = "void twice(float* y, const float* x, int n) { for (int i = 0; i < n; i++) y[i] = 2.0f * x[i] + ZERO; }"
ARGS = [tt.ArrayArg("y", (256,), role="out"), tt.ArrayArg("x", (256,)), tt.ScalarArg("n", 256)]
'''
REFERENCE = '''
def reference(y, x):
    return {"y": 2.0 * x}
'''
CALL = 'tt.tune_c(SOURCE, "twice", ARGS, {"ZERO": ["0.0f"]}, reference=reference, budget=1, jobs=1, progress=False)\n'


def run_script(text: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess, int]:
    script = tmp_path / "tune_it.py"
    script.write_text(text)
    env = {**os.environ, "TENSORTUNE_DB": str(tmp_path / "t.db"),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=240)
    records = sum(n for _, n, _ in Database(tmp_path / "t.db").workloads()) if (tmp_path / "t.db").exists() else 0
    return proc, records


@pytest.mark.slow
def test_an_unguarded_script_is_told_in_one_line_before_measuring(tmp_path):
    proc, records = run_script(SCRIPT_HEAD + REFERENCE + CALL, tmp_path)
    assert proc.returncode == 1 and records == 0
    assert proc.stderr.strip().splitlines()[-1].startswith(f"RuntimeError: {tmp_path / 'tune_it.py'}:8: tune_c runs")
    assert "Process SpawnProcess" not in proc.stderr


@pytest.mark.slow
def test_a_reference_defined_under_the_guard_is_named(tmp_path):
    guarded = SCRIPT_HEAD + 'if __name__ == "__main__":\n' + "".join(
        "    " + line + "\n" for line in (REFERENCE + CALL).strip("\n").splitlines())
    proc, records = run_script(guarded, tmp_path)
    assert proc.returncode == 1 and records == 0
    assert "reference is defined under `if __name__" in proc.stderr.strip().splitlines()[-1]


@pytest.mark.slow
def test_a_guarded_script_tunes(tmp_path):
    proc, records = run_script(SCRIPT_HEAD + REFERENCE + 'if __name__ == "__main__":\n    print(' + CALL.strip()
                               + ".best_config)\n", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "ZERO='0.0f'" in proc.stdout and records >= 1


@pytest.mark.slow
def test_tune_isolated_from_an_unguarded_script_is_told(tmp_path):
    proc, records = run_script("import tensortune as tt\ndef f(x):\n    return x\n"
                               "tt.tune(f, {'x': [1, 2]}, isolate=True, progress=False)\n", tmp_path)
    assert proc.returncode == 1 and records == 0
    assert "tune(isolate=True) runs candidates in spawned worker processes" in proc.stderr.strip().splitlines()[-1]
