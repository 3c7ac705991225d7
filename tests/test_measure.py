import os
import time

import pytest

from tensortune.measure import CandidateError, ErrorKind, IsolatedWorker, Timer, WrongResult, check_close
from tensortune.measure.builder import ProcessPoolBuilder
from tensortune.space import Config


def _crash():
    os.abort()


def _hang():
    while True:
        time.sleep(0.1)


def _wrong():
    raise WrongResult("off by one")


def _pid():
    return os.getpid()


def _env(name):
    return os.environ.get(name)


def _niceness(config=None):
    return os.nice(0)


def test_compile_workers_yield_the_host_to_the_timing_process():
    from tensortune.measure.triton_compile import ParallelCompiler

    expected = min(19, os.nice(0) + 10)
    with IsolatedWorker(timeout=30) as timing:
        assert timing.call(_niceness) == os.nice(0)  # the worker that times keeps the priority
    assert {r.artifact for r in ProcessPoolBuilder(_niceness, jobs=2).build([Config({"a": 1}), Config({"a": 2})])} \
        == {expected}
    with ParallelCompiler(_niceness, jobs=1) as compiler:
        (result,) = compiler.build([Config({"a": 1})])
        assert result.ok and compiler._workers[0][0].call(_niceness) == expected


def test_worker_survives_crash_and_hang():
    with IsolatedWorker(timeout=2, env={"CUDA_VISIBLE_DEVICES": "3"}) as w:
        first = w.call(_pid)
        assert w.call(_env, "CUDA_VISIBLE_DEVICES") == "3"
        with pytest.raises(CandidateError) as err:
            w.call(_crash)
        assert err.value.kind is ErrorKind.CRASHED and "SIGABRT" in str(err.value)
        with pytest.raises(CandidateError) as err:
            w.call(_hang, timeout=0.5)
        assert err.value.kind is ErrorKind.TIMEOUT
        with pytest.raises(CandidateError) as err:
            w.call(_wrong)
        assert err.value.kind is ErrorKind.WRONG_RESULT
        assert w.call(_pid) != first
        with pytest.raises(CandidateError) as err:
            w.call(int, "not a number")
        assert err.value.kind is ErrorKind.RUNTIME_ERROR and "ValueError" in str(err.value)


def test_timer_repeats_and_warmup():
    calls = []
    t = Timer(warmup_seconds=0.0, min_repeats=4, max_repeats=4, budget_seconds=10)
    times = t.time(lambda: calls.append(1))
    assert len(times) == 4 and len(calls) == 5  # one warm-up call
    assert all(x >= 0 for x in times)
    assert len(Timer(min_repeats=2, max_repeats=3, flush_cache_bytes=1 << 16).time(lambda: None)) >= 2


def test_check_close_where_the_reference_is_nan():
    """Random inputs can leave a kernel's domain (the square root of a negative variance):
    NaN where the reference has NaN is right, and the finite part is still compared."""
    import numpy as np
    e = np.array([np.nan, 1.0, 2.0], np.float32)
    check_close(np.array([np.nan, 1.0, 2.0], np.float32), e)
    with pytest.raises(WrongResult):
        check_close(np.array([np.nan, 1.0, 2.5], np.float32), e)


def test_check_close_tolerances():
    import numpy as np
    a = np.linspace(0, 1, 10, dtype=np.float32)
    check_close(a + 1e-6, a)
    with pytest.raises(WrongResult, match="max abs error"):
        check_close(a + 0.1, a)
    with pytest.raises(WrongResult, match="NaN"):
        check_close(np.full(10, np.nan, np.float32), a)
    with pytest.raises(WrongResult, match="shape"):
        check_close(a[:5], a)


def _build(config):
    if config["x"] == 1:
        raise RuntimeError("cannot build x=1")
    if config["x"] == 2:
        time.sleep(30)
    return config["x"] * 10


def _interrupted(config):
    if config["a"] == 2:
        raise KeyboardInterrupt
    if config["a"] == 3:
        raise SystemExit(1)
    return config["a"]


def test_ctrl_c_in_an_inline_build_stops_the_build_instead_of_failing_the_candidate():
    b = ProcessPoolBuilder(_interrupted, jobs=1)
    [exited] = b.build([Config({"a": 3})])
    assert not exited.ok and "SystemExit" in exited.message  # the build's own exit is its failure
    with pytest.raises(KeyboardInterrupt):
        b.build([Config({"a": 1}), Config({"a": 2})])


def test_process_pool_builder_isolates_failures_and_hangs():
    b = ProcessPoolBuilder(_build, jobs=2, timeout=3)
    try:
        out = b.build([Config(x=0), Config(x=1), Config(x=2), Config(x=3)])
        assert [r.artifact for r in out] == [0, None, None, 30]
        assert out[1].error is ErrorKind.COMPILE_ERROR and "cannot build" in out[1].message
        assert out[2].error is ErrorKind.TIMEOUT
        assert b.build([Config(x=5)])[0].artifact == 50  # the pool came back
    finally:
        b.close()


ORPHANS = """
import os, signal
from tensortune.measure.builder import ProcessPoolBuilder
from tensortune.space import Config

def pid_of(config):
    return os.getpid()

if __name__ == "__main__":
    b = ProcessPoolBuilder(pid_of, jobs=2)
    print(" ".join(str(r.artifact) for r in b.build([Config(x=i) for i in range(4)])), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def _running(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_build_processes_end_when_the_tuning_process_is_killed(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "orphans.py"
    script.write_text(ORPHANS)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == -9, out.stderr
    pids = {int(p) for p in out.stdout.split()}
    assert pids and os.getpid() not in pids
    deadline = time.monotonic() + 60
    while any(_running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_running(p) for p in pids), "build processes outlived the process that started them"


def test_a_script_that_tunes_without_a_main_guard_is_told_why_its_processes_die(tmp_path):
    """A worker imports the script only for a call that needs something defined in it; then,
    without `if __name__ == "__main__":`, the script's own top-level tuning runs again while
    the process starts up, and it dies before running anything. Calls of library functions
    start workers that never import the script, guard or not."""
    import subprocess
    import sys

    script = tmp_path / "noguard.py"
    script.write_text("from tensortune.measure.builder import ProcessPoolBuilder\n"
                      "from tensortune.space import Config\n"
                      "print('BUILD', ProcessPoolBuilder(len, jobs=2, timeout=60).build([Config(a=1)])[0].message)\n"
                      "from tensortune.measure import IsolatedWorker\n"
                      "print('ABS', IsolatedWorker(timeout=60).call(abs, -1), flush=True)\n"
                      "def double(x):\n"
                      "    return 2 * x\n"
                      "IsolatedWorker(timeout=60).call(double, 2)\n")
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, PYTHONPATH=src), check=False)
    build_line = next(line for line in out.stdout.splitlines() if line.startswith("BUILD"))
    assert "build process died" in build_line and '__name__ == "__main__"' in build_line
    assert "ABS 1" in out.stdout.splitlines()
    assert out.returncode != 0 and 'worker process died (exit code 1); it died before running anything' in out.stderr


def test_a_crash_after_the_processes_have_worked_gets_no_startup_hint():
    with IsolatedWorker(timeout=60) as w:
        assert w.call(abs, -1) == 1
        with pytest.raises(CandidateError) as err:
            w.call(os._exit, 1)
    assert "exit code 1" in str(err.value) and "__main__" not in str(err.value)


def test_processes_that_cannot_be_started_fail_their_candidates_as_the_environments(monkeypatch):
    """fork failing with EAGAIN (too many processes) fails the candidates, as the
    environment's doing (retried later), instead of the tuning run."""
    import errno
    import multiprocessing.context

    def refuse(self):
        raise OSError(errno.EAGAIN, "Resource temporarily unavailable")

    monkeypatch.setattr(multiprocessing.context.SpawnProcess, "start", refuse)
    with pytest.raises(CandidateError) as err:
        IsolatedWorker(timeout=5).call(abs, -1)
    assert err.value.kind is ErrorKind.CRASHED and err.value.environment == "the system cannot start more processes"
    builder = ProcessPoolBuilder(_niceness, jobs=2)
    try:
        out = builder.build([Config(a=1), Config(a=2), Config(a=3)])
    finally:
        builder.close()
    assert [r.environment for r in out] == ["the system cannot start more processes"] * 3
    assert all(r.error is ErrorKind.CRASHED and "cannot start a build process" in r.message for r in out)
