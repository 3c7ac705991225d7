"""Triton's own autotuner tests (test_triton_upstream_autotuner.py) run once with
`triton.autotune` and once with `tensortune.autotune`, each in its own pytest process: every
test that passes with Triton's decorator on this machine passes with ours."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def outcomes(decorator: str, tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "TENSORTUNE_UPSTREAM_DECORATOR": decorator, "TENSORTUNE_DB": str(tmp_path / f"{decorator}.db")}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider",
                           str(HERE / "test_triton_upstream_autotuner.py")],
                          cwd=HERE.parent, env=env, capture_output=True, text=True, timeout=600)
    found = dict((m.group(2), m.group(1)) for m in re.finditer(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL)\S* (\S+)",
                                                               proc.stdout, re.M))
    assert found, proc.stdout[-2000:] + proc.stderr[-2000:]
    return found


@pytest.mark.slow
def test_every_upstream_test_that_passes_with_triton_passes_with_tensortune(tmp_path):
    triton_ran = outcomes("triton", tmp_path)
    ours = outcomes("tensortune", tmp_path)
    passed_with_triton = {t for t, o in triton_ran.items() if o == "PASSED"}
    assert len(passed_with_triton) >= 18
    assert {t: ours.get(t) for t in passed_with_triton if ours.get(t) != "PASSED"} == {}
