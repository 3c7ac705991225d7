"""Records across processes: a second process measures nothing; offline tuning, the CLI,
shipping records as JSON lines, never-tune mode from the environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_triton_kernels import (interpret, matmul_args, matmul_grid, matmul_kernel,  # noqa: F401
                                 scale_inplace_kernel, torch, triton)

import tensortune as tt
from tensortune.cli.main import cli

TESTS = Path(__file__).parent
CONFIGS = "[triton.Config({'BLOCK_M': m, 'BLOCK_N': n, 'BLOCK_K': 16}) for m in (16, 32) for n in (16, 32)]"


class CountingTimer:
    def __init__(self):
        self.calls = 0

    def time(self, fn):
        self.calls += 1
        fn()
        return (1e-3 / (fn.config["BLOCK_M"] * fn.config["BLOCK_N"]),)


SECOND_PROCESS = textwrap.dedent(f"""
    import json, sys
    sys.path.insert(0, {str(TESTS)!r})
    import test_triton_kernels as K
    import tensortune as tt
    from test_triton_kernels import torch, triton

    class CountingTimer:
        calls = 0
        def time(self, fn):
            CountingTimer.calls += 1
            fn()
            return (1.0,)

    k = tt.autotune(configs={CONFIGS}, key=["M", "N", "K"], timer=CountingTimer())(K.matmul_kernel)
    ok = []
    for M in (20, 40):
        args = K.matmul_args(M, 24, 40)
        k[K.matmul_grid(M, 24)](*args)
        ok.append(bool(torch.allclose(args[2], args[0] @ args[1], rtol=1e-4, atol=1e-4)))
    print(json.dumps({{"calls": CountingTimer.calls, "ok": ok,
                      "sources": sorted((key.values[0], d.source) for key, d in k.decisions().items()),
                      "best": {{str(key.values[0]): d.config.as_dict() for key, d in k.decisions().items()}}}}))
""")


def test_a_second_process_measures_nothing_and_never_tune_reads_the_environment(tmp_path):
    db = tmp_path / "shared.db"
    timer = CountingTimer()
    k = tt.autotune(configs=eval(CONFIGS), key=["M", "N", "K"], timer=timer,
                    settings=tt.Settings(db_path=db, progress=False))(matmul_kernel)
    k[matmul_grid(20, 24)](*matmul_args(20, 24, 40))
    assert timer.calls >= 4
    script = tmp_path / "second.py"
    script.write_text(SECOND_PROCESS)
    env = {**os.environ, "TENSORTUNE_DB": str(db), "TENSORTUNE_NEVER_TUNE": "1", "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["calls"] == 0 and got["ok"] == [True, True]
    assert got["sources"] == [[20, "recorded"], [40, "nearest"]]
    assert got["best"]["20"] == k.decision.config.as_dict() == got["best"]["40"]


def test_importing_tensortune_does_not_import_triton():
    code = "import sys, tensortune; print('triton' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["False", "False"], out.stderr


def test_offline_tuning_then_launches_measure_nothing(tmp_path):
    timer = CountingTimer()
    k = tt.autotune(configs=eval(CONFIGS), key=["M", "N", "K"], timer=timer,
                    settings=tt.Settings(db_path=tmp_path / "t.db", progress=False))(matmul_kernel)
    args = matmul_args(20, 24, 40)
    c_before = args[2].clone()
    decision = k.tune(*args, grid=matmul_grid(20, 24))
    assert decision.source == "tuned" and torch.equal(args[2].nan_to_num(), c_before.nan_to_num())
    calls = timer.calls
    k[matmul_grid(20, 24)](*args)
    assert timer.calls == calls
    torch.testing.assert_close(args[2], args[0] @ args[1], rtol=1e-4, atol=1e-4)
    assert k.tune(*args, grid=matmul_grid(20, 24)).source == "recorded" and timer.calls == calls


def test_cli_tunes_shapes_exports_records_and_a_fresh_database_loads_them(tmp_path):
    db, shipped = tmp_path / "build.db", tmp_path / "tuned.jsonl"
    runner = CliRunner()
    res = runner.invoke(cli, ["--db", str(db), "triton", "tune", "test_triton_kernels:scale_tuned",
                              "--shape", "n=100", "--shape", "n=1000", "--export", str(shipped), "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.output)
    keys = [d["key"]["n"] for s in report["shapes"] for d in s["decisions"]]
    assert keys == [128, 1024] and all(s["trials"] == 3 for s in report["shapes"])
    assert report["exported"] == len(shipped.read_text().splitlines()) >= 8
    res = runner.invoke(cli, ["--db", str(db), "triton", "tune", "test_triton_kernels:scale_twice",
                              "--shape", "n=120", "--json"])
    assert res.exit_code == 0, res.output
    (shape,) = json.loads(res.output)["shapes"]
    assert shape["trials"] == 0 and [d["key"]["n"] for d in shape["decisions"]] == [128]

    timer = CountingTimer()
    user = tt.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 32, 64)], key=["n"], bucket="pow2",
                       records=shipped, timer=timer,
                       settings=tt.Settings(db_path=tmp_path / "user.db", progress=False))(scale_inplace_kernel)
    x = torch.randn(1000)
    want = x * 2
    user[lambda m: (triton.cdiv(1000, m["BLOCK"]),)](x, 1000, 2.0)
    torch.testing.assert_close(x, want)
    assert timer.calls == 0 and [d.source for d in user.decisions().values()] == ["recorded"]


def test_cli_reports_bad_targets_and_shapes(tmp_path):
    runner = CliRunner()
    res = runner.invoke(cli, ["--db", str(tmp_path / "x.db"), "triton", "tune", "test_triton_kernels:nope",
                              "--shape", "n=1"])
    assert res.exit_code != 0 and "has no attribute 'nope'" in res.output
    res = runner.invoke(cli, ["triton", "tune", "test_triton_kernels:scale_tuned", "--shape", "n"])
    assert res.exit_code != 0 and "is not NAME=VALUE" in res.output
    res = runner.invoke(cli, ["--db", str(tmp_path / "x.db"), "triton", "tune",
                              "test_triton_kernels:matmul_kernel", "--shape", "n=1"])
    assert res.exit_code != 0 and "not an autotuned kernel" in res.output


def test_cli_names_the_shape_that_does_not_fit_the_inputs_function(tmp_path):
    runner = CliRunner()
    for target, shape, words in (("test_triton_kernels:scale_tuned", "m=100", "missing a required argument: 'n'"),
                                 ("test_triton_kernels:scale_twice", "n=100,k=3", "unexpected keyword argument 'k'")):
        res = runner.invoke(cli, ["--db", str(tmp_path / "x.db"), "triton", "tune", target, "--shape", shape])
        assert res.exit_code == 1 and words in res.output and "does not fit" in res.output, res.output
        assert not isinstance(res.exception, TypeError)


def test_a_module_target_is_found_in_the_current_folder(tmp_path, monkeypatch):
    """The `tensortune` console script's sys.path starts with its own folder, not the current one."""
    from tensortune.frontends.triton.offline import load_object

    (tmp_path / "tt_cwd_kernels.py").write_text("def launch(n):\n    return n\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    try:
        assert load_object("tt_cwd_kernels:launch")(n=3) == 3
    finally:
        sys.modules.pop("tt_cwd_kernels", None)


def test_a_file_target_named_like_a_standard_module_is_refused_not_swapped(tmp_path, monkeypatch):
    """`tensortune triton tune ./random.py:k` must not import the standard library's random."""
    from tensortune.frontends.triton.offline import load_object

    (tmp_path / "random.py").write_text("def k(n):\n    return n\n")
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(ImportError, match=r"the module name 'random' already means .*random.py, not this file"):
        load_object(f"{tmp_path / 'random.py'}:k")
    assert str(tmp_path) not in sys.path
    res = CliRunner().invoke(cli, ["--db", str(tmp_path / "x.db"), "triton", "tune", f"{tmp_path / 'random.py'}:k",
                                   "--shape", "n=4"])
    assert res.exit_code == 1 and "rename the file" in res.output, res.output
