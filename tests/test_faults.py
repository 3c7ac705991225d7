"""The fault-injection suite: each fault a candidate, the environment or a file can inflict,
injected for real, and for each the guarantees of docs/database.md and
docs/gpu_measurement.md checked: the run finishes, the right candidate carries the right
error kind, no record is lost, and no process is left behind.

Candidate faults live in one C kernel (faults/kernel.c, one MODE each) tuned through the
real compiler, builder, isolated runner, tuner and SQLite database.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from fault_helpers import (MARK, MODES, busy_gpu_once, fault_problem, into_worker_sockets, kill_marked,
                           left_behind, sometimes_faulty, sometimes_faulty_reference)

import tensortune as tt
from tensortune.backends import CBuilder, CCompiler, CRunner
from tensortune.db import Database, DatabaseError, Target, Workload, import_jsonl
from tensortune.measure import CandidateError, ErrorKind, IsolatedWorker, Timer
from tensortune.measure.worker import WorkerLost
from tensortune.space import Categorical, Config, Space
from tensortune.tuner import Tuner, TuningFailed

SRC = str(Path(__file__).parent.parent / "src")
QUICK = Timer(warmup_seconds=0, min_repeats=3, budget_seconds=0.01)
W = Workload.make("faults.saxpy", "kernel.c")
T = Target.make("cpu", "fault-injection")


@pytest.fixture
def mark(monkeypatch):
    """A fresh mark in the environment of every process the test starts (and theirs)."""
    value = uuid.uuid4().hex
    monkeypatch.setenv(MARK, value)
    yield value
    kill_marked(value)


def _child_env(mark: str) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=SRC + os.pathsep + str(Path(__file__).parent), **{MARK: mark})


# ---- candidate faults in the C path ------------------------------------------------------------
ORDER = ["good", "segfault", "abort", "exit", "spin", "heap_overflow", "wrong", "nan", "no_compile", "compile_hang",
         "fork", "memory_bomb", "garbage", "partial_header", "leak_thread", "fast"]
EXPECTED = {
    "good": (None, ""), "segfault": (ErrorKind.CRASHED, "SIGSEGV"), "abort": (ErrorKind.CRASHED, "SIGABRT"),
    "exit": (ErrorKind.CRASHED, "exit code 1"), "spin": (ErrorKind.TIMEOUT, "no result within"),
    "heap_overflow": (ErrorKind.CRASHED, "SIGSEGV"), "wrong": (ErrorKind.WRONG_RESULT, "max abs error"),
    "nan": (ErrorKind.WRONG_RESULT, "NaN"), "no_compile": (ErrorKind.COMPILE_ERROR, "does not compile"),
    "compile_hang": (ErrorKind.TIMEOUT, "compiler ran past"), "fork": (None, ""),
    "memory_bomb": (ErrorKind.OUT_OF_RESOURCES, "memory limit"),
    "garbage": (ErrorKind.CRASHED, "malformed reply"), "partial_header": (ErrorKind.TIMEOUT, "no result within"),
    "leak_thread": (ErrorKind.CRASHED, "left the worker broken after it returned"), "fast": (None, ""),
}


def test_every_candidate_fault_lands_on_its_candidate_and_nothing_outlives_the_run(tmp_path, mark):
    """Sixteen candidates in one run, two builds at a time, one reused worker: every fault
    recorded on the candidate that caused it, with its kind, including the kernel whose
    leftover thread crashes the worker once the next (the fastest) candidate loads; the
    fastest correct kernel wins."""
    fifo = tmp_path / "never-written.h"
    os.mkfifo(fifo)
    problem = fault_problem(fifo)
    space = Space([Categorical("MODE", [MODES[m] for m in ORDER])])
    db = Database(tmp_path / "faults.db")
    builder = CBuilder(problem, CCompiler(cache_dir=tmp_path / "cache", timeout=3), jobs=2)
    runner = CRunner(problem, QUICK, timeout=3, memory_limit=384 << 20)
    try:
        result = Tuner(space, runner, builder=builder, workload=W, target=T, db=db, strategy="exhaustive",
                       budget=100, progress=False).run()
    finally:
        runner.close()
        builder.close()
    name = {v: k for k, v in MODES.items()}
    latest = {name[r.config["MODE"]]: r for r in db.records(W, T)}
    assert set(latest) == set(ORDER) and result.trials == len(ORDER)
    for mode, (kind, words) in EXPECTED.items():
        rec = latest[mode]
        assert rec.error is kind and words in rec.message, (mode, rec.error, rec.message)
        assert (rec.ok and rec.time > 0) if kind is None else not rec.times, mode
    assert "__main__" not in latest["exit"].message  # no start-up hint for a candidate's own exit(1)
    # the thread left by leak_thread crashed the worker while `fast` ran: `fast` was measured
    # again alone, `leak_thread` replayed and amended; its earlier success is kept, not used
    leak = [r for r in db.records(W, T) if r.config["MODE"] == MODES["leak_thread"]]
    assert [r.ok for r in leak] == [True, False] and leak[1].extra["amends"]
    assert result.best.config["MODE"] == MODES["fast"] and db.best(W, T).config["MODE"] == MODES["fast"]
    assert MODES["leak_thread"] not in {r.config["MODE"] for r in db.top_k(W, T, 20)}
    assert len(db.records(W, T)) == len(ORDER) + 1  # every result committed, the amendment too
    assert left_behind(mark) == []  # nor the fork's child, nor the compiler stuck on the FIFO
    assert not list((tmp_path / "cache").glob("*.tmp"))


def test_a_crash_in_a_reused_worker_is_blamed_on_the_candidate_only_when_it_crashes_alone(tmp_path, mark):
    """A segfault after good candidates crashes alone too: it is the candidate's. The good
    candidates before it keep their results; nothing is amended."""
    problem = fault_problem()
    builder = CBuilder(problem, CCompiler(cache_dir=tmp_path), jobs=1)
    runner = CRunner(problem, QUICK, timeout=5)
    try:
        results = list(runner.run(builder.build([Config(MODE=MODES[m]) for m in ("good", "fast", "segfault")])))
    finally:
        runner.close()
    assert [r.error for r in results] == [None, None, ErrorKind.CRASHED]
    assert "again alone in a fresh worker" in results[2].message
    assert left_behind(mark) == []


# ---- the worker's result channel ----------------------------------------------------------------
def _write_into_the_channel(data: bytes, then_sleep: float = 0.0, after_reply: bool = False) -> int:
    import threading

    def write() -> None:
        if after_reply:
            time.sleep(0.3)
        into_worker_sockets(data)

    if after_reply:
        threading.Thread(target=write, daemon=True).start()
    else:
        write()
    time.sleep(then_sleep)
    return 0


@pytest.mark.parametrize("data, then_sleep, kind, words", [
    (b"\x80\x04garbage", 0.0, ErrorKind.CRASHED, "malformed reply"),
    (b"TTr1\x00\x00\x00", 60.0, ErrorKind.TIMEOUT, "no result within 2.0 s"),
    (b"TTr1" + (1).to_bytes(8, "big") + (1 << 62).to_bytes(8, "big"), 0.0, ErrorKind.CRASHED, "more than any reply"),
    (b"TTr1" + (7).to_bytes(8, "big") + (1).to_bytes(8, "big") + b"x" + bytes(16), 0.0, ErrorKind.CRASHED,
     "digest does not match"),
])
def test_every_read_from_a_worker_has_a_deadline_and_every_malformed_reply_is_the_callers_failure(
        data, then_sleep, kind, words, mark):
    with IsolatedWorker(timeout=2) as worker:
        assert worker.call(abs, -1) == 1
        with pytest.raises(WorkerLost) as err:
            worker.call(_write_into_the_channel, data, then_sleep)
        assert err.value.kind is kind and words in str(err.value) and err.value.served == 1
        assert worker.call(abs, -2) == 2  # a fresh process took over
    assert left_behind(mark) == []


def test_bytes_written_into_the_channel_after_a_reply_do_not_fail_the_next_call(mark):
    """A thread a call left behind writes garbage after the reply: the next call runs in a
    fresh process instead of reading that garbage as its own reply."""
    with IsolatedWorker(timeout=10) as worker:
        worker.call(_write_into_the_channel, b"late garbage", 0.0, True)
        time.sleep(1.0)
        assert worker.call(abs, -3) == 3 and worker.discarded == 1
    assert left_behind(mark) == []


def test_the_gpu_runner_of_autotune_survives_a_garbled_channel_and_leaves_no_forked_child(mark):
    """GpuRunner (what @autotune measures with) under the CPU path: garbage or a partial
    frame on the result channel fails that candidate only; a forked child dies with the
    runner."""
    pytest.importorskip("torch")
    from tensortune.measure import BuildResult
    from tensortune.measure.cuda_timer import CudaTimer
    from tensortune.measure.gpu import GpuRunner, GpuTask, TensorArg

    task = GpuTask("fault_helpers:gpu_launch", (TensorArg((256,)), TensorArg((256,), output=True)),
                   reference="tensortune.measure.gpu.fakes:reference", device="cpu",
                   timer=CudaTimer(clock="host", budget_seconds=0.01, warmup_seconds=0.0))
    faults = ["none", "garbage", "fork", "partial_header", "none"]
    with GpuRunner(task, timeout=5, startup_timeout=120) as runner:
        results = list(runner.run([BuildResult(Config(fault=f, k=i)) for i, f in enumerate(faults)]))
    by_fault = {r.config["k"]: r for r in results}
    assert [by_fault[i].error for i in range(5)] == [None, ErrorKind.CRASHED, None, ErrorKind.TIMEOUT, None]
    assert "malformed reply" in by_fault[1].message and "no result within" in by_fault[3].message
    assert left_behind(mark) == []


# ---- processes ----------------------------------------------------------------------------------
KILLED_TUNER = """
import sys
from pathlib import Path
from fault_helpers import MODES, fault_problem
from tensortune.backends import CBuilder, CCompiler, CRunner
from tensortune.db import Database, Target, Workload
from tensortune.measure import Timer
from tensortune.space import Categorical, Space
from tensortune.tuner import Tuner

if __name__ == "__main__":
    folder = Path(sys.argv[1])
    problem = fault_problem()
    runner = CRunner(problem, Timer(warmup_seconds=0, min_repeats=3, budget_seconds=0.01), timeout=600)
    space = Space([Categorical("MODE", [MODES["good"], MODES["fork"], MODES["spin"]])])
    Tuner(space, runner, builder=CBuilder(problem, CCompiler(cache_dir=folder / "cache"), jobs=1),
          workload=Workload.make("faults.saxpy", "kernel.c"), target=Target.make("cpu", "fault-injection"),
          db=Database(folder / "killed.db"), strategy="exhaustive", budget=10, progress=False,
          callbacks=[lambda r: print("measured", r.config["MODE"], flush=True)]).run()
"""


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_tuner_takes_its_worker_and_what_candidates_started_with_it(tmp_path, mark, how):
    script = tmp_path / "tuner.py"
    script.write_text(KILLED_TUNER)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path)], stdout=subprocess.PIPE, text=True,
                            env=_child_env(mark))
    try:
        seen = [proc.stdout.readline().split() for _ in range(2)]  # good and fork measured; spin hangs next
        assert seen == [["measured", str(MODES["good"])], ["measured", str(MODES["fork"])]]
        time.sleep(1.0)
        assert len(left_behind(mark, within=0)) >= 3  # the tuner, its spinning worker, the fork's child
        proc.send_signal(how)
        assert proc.wait(timeout=30) == -how
        assert left_behind(mark) == [], "the worker or the fork's child outlived the tuner"
    finally:
        proc.kill()
        proc.wait()
    db = Database(tmp_path / "killed.db")
    assert sorted(r.config["MODE"] for r in db.records(W, T)) == [MODES["good"], MODES["fork"]]


HUNG_BUILD = """
import sys
from pathlib import Path
from fault_helpers import MODES, fault_problem
from tensortune.backends import CBuilder, CCompiler
from tensortune.space import Config

if __name__ == "__main__":
    folder = Path(sys.argv[1])
    builder = CBuilder(fault_problem(folder / "never-written.h"), CCompiler(cache_dir=folder / "cache", timeout=600),
                       jobs=2)
    print("building", flush=True)
    builder.build([Config(MODE=MODES["compile_hang"]), Config(MODE=MODES["good"])])
"""


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_a_killed_tuner_takes_its_build_processes_and_their_hung_compiler_with_it(tmp_path, mark):
    os.mkfifo(tmp_path / "never-written.h")
    script = tmp_path / "build.py"
    script.write_text(HUNG_BUILD)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path)], stdout=subprocess.PIPE, text=True,
                            env=_child_env(mark))
    try:
        assert proc.stdout.readline().strip() == "building"
        deadline = time.monotonic() + 60
        while not any(b"cc1" in _cmdline(p) for p in left_behind(mark, within=0)) and time.monotonic() < deadline:
            time.sleep(0.2)  # until the compiler is stuck on the FIFO
        assert time.monotonic() < deadline, "the compiler never started"
        proc.kill()
        proc.wait(timeout=30)
        assert left_behind(mark) == [], "a build process or its compiler outlived the tuner"
    finally:
        proc.kill()
        proc.wait()


def test_a_compiler_past_its_memory_limit_is_out_of_resources_and_the_build_goes_on(tmp_path, mark):
    ten = ",".join(["1"] * 10)
    source = f"#define A1 {ten}\n" + "".join(f"#define A{k} " + ",".join([f"A{k - 1}"] * 10) + "\n"
                                                for k in range(2, 8)) + "int big[] = {A7};\nint f(void) { return 1; }"
    compiler = CCompiler(cache_dir=tmp_path, memory_limit=256 << 20)
    with pytest.raises(CandidateError) as err:
        compiler.compile(source)
    assert err.value.kind is ErrorKind.OUT_OF_RESOURCES and not err.value.environment
    assert "ran out of memory (its limit is 256 MiB)" in str(err.value)
    assert compiler.compile("int f(void) { return 1; }").exists()
    assert left_behind(mark) == []


def test_the_compiler_never_reads_the_tuners_input(tmp_path, mark):
    """With one build job the compiler runs in the tuner's process: it must not inherit its
    stdin (here a pipe nobody writes, which `#include "/dev/stdin"` would wait on forever)."""
    code = ("import sys; from pathlib import Path; from tensortune.backends import CCompiler; "
            "print(CCompiler(cache_dir=Path(sys.argv[1]), timeout=20).compile("
            "'#include \"/dev/stdin\"\\nint f(void) { return 2; }').exists())")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_child_env(mark))
    try:
        out, err = proc.stdout.read(), proc.stderr.read()  # stdin stays open all along
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    assert out.strip() == "True", err
    assert left_behind(mark) == []


# ---- the environment's failures --------------------------------------------------------------
FULL_DISK = """
import os
import sys
from pathlib import Path
from fault_helpers import MODES, fault_problem
from tensortune.backends import CBuilder, CCompiler, CRunner
from tensortune.db import Database, Target, Workload
from tensortune.measure import Timer
from tensortune.space import Categorical, Space
from tensortune.tuner import Tuner

if __name__ == "__main__":
    cache, db = Path(sys.argv[1]), Path(sys.argv[2])
    problem = fault_problem()
    runner = CRunner(problem, Timer(warmup_seconds=0, min_repeats=3, budget_seconds=0.01), timeout=30)
    space = Space([Categorical("MODE", [MODES["good"], MODES["fast"], MODES["fork"]])])
    compiler = CCompiler(cc=os.environ.get("FAULT_CC", "cc"), cache_dir=cache)
    result = Tuner(space, runner, builder=CBuilder(problem, compiler, jobs=2),
                   workload=Workload.make("faults.saxpy", "kernel.c"), target=Target.make("cpu", "fault-injection"),
                   db=Database(db), strategy="exhaustive", budget=10, progress=False).run()
    runner.close()
    print("RESULT", result.trials, result.best is not None, repr(result.stopped), flush=True)
"""


def _run_with_a_full_disk(script: Path, cache: Path, db: Path, mark: str, namespaces: bool = True) -> tuple[str, str]:
    """Run the script with `cache` on a full file system: a 64 KiB tmpfs filled up, in a
    mount namespace of its own; where this system allows no such namespace, with a
    file-size limit of 4 KiB on the compiler's processes instead (writes fail with EFBIG)."""
    fill = f"mount -t tmpfs -o size=64k tmpfs {cache} && (cat /dev/zero > {cache}/filler 2>/dev/null; true)"
    inner = f'{fill} && exec "{sys.executable}" "{script}" "{cache}" "{db}"'
    for prefix in (["unshare", "--mount"], ["unshare", "--user", "--map-root-user", "--mount"])[:2 * namespaces]:
        probe = subprocess.run(prefix + ["sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {cache}"],
                               capture_output=True, check=False)
        if probe.returncode == 0:
            out = subprocess.run(prefix + ["sh", "-c", inner], capture_output=True, text=True, timeout=300,
                                 env=_child_env(mark))
            return "tmpfs", out.stdout + out.stderr
    limited = script.with_name("cc-limited")
    limited.write_text('#!/bin/sh\nexec prlimit --fsize=4096 -- cc "$@"\n')
    limited.chmod(0o755)
    out = subprocess.run([sys.executable, str(script), str(cache), str(db)], capture_output=True, text=True,
                         timeout=300, env={**_child_env(mark), "FAULT_CC": str(limited)})
    return "file-size limit", out.stdout + out.stderr


@pytest.mark.parametrize("namespaces", [True, False], ids=["tmpfs-if-allowed", "file-size-limit"])
def test_a_full_disk_is_the_environments_failure_retried_once_there_is_room(tmp_path, mark, namespaces):
    script, cache, db_path = tmp_path / "tune.py", tmp_path / "cache", tmp_path / "t.db"
    script.write_text(FULL_DISK)
    cache.mkdir()
    how, output = _run_with_a_full_disk(script, cache, db_path, mark, namespaces)
    assert "RESULT 0 False" in output and "the environment failed 8 candidates in a row" in output, (how, output)
    db = Database(db_path)
    failed = db.records(W, T)
    assert failed and all(r.error is ErrorKind.COMPILE_ERROR and r.extra.get("environment") for r in failed), how
    assert db.measured_configs(W, T) == {}  # none counts as measured: each is tried again
    assert not list(cache.glob("*.tmp")), "a partial library was left in the cache"
    # room again: the same tuning measures everything it could not before
    out = subprocess.run([sys.executable, str(script), str(cache), str(db_path)], capture_output=True, text=True,
                         timeout=300, env=_child_env(mark))
    assert "RESULT 3 True ''" in out.stdout, out.stdout + out.stderr
    assert {r.config["MODE"] for r in db.records(W, T) if r.ok} == {MODES["good"], MODES["fast"], MODES["fork"]}
    assert left_behind(mark) == []


def test_a_missing_compiler_is_the_environments_failure_and_stops_the_run(tmp_path, mark):
    problem = fault_problem()
    space = Space([Categorical("MODE", [MODES[m] for m in ("good", "fast", "fork", "wrong")])])
    db = Database(tmp_path / "t.db")

    def run(cc: str):
        runner = CRunner(problem, QUICK, timeout=10)
        try:
            return Tuner(space, runner, builder=CBuilder(problem, CCompiler(cc=cc, cache_dir=tmp_path), jobs=2),
                         workload=W, target=T, db=db, strategy="exhaustive", budget=10, progress=False).run()
        finally:
            runner.close()

    gone = run("/nonexistent/cc")
    assert gone.trials == 0 and gone.best is None and "C compiler '/nonexistent/cc' not found" in gone.stopped
    assert gone.environment_failures == 8 and all(r.environment == "the C compiler is missing" for r in gone.history)
    assert {r.config["MODE"] for r in gone.history} == {MODES[m] for m in ("good", "fast", "fork", "wrong")}
    back = run("cc")  # the compiler is back: every candidate is measured, none was remembered as failed
    assert back.trials == 4 and back.best is not None and back.reused == 0
    assert left_behind(mark) == []


def test_a_compiler_killed_by_the_system_is_retried_in_the_same_run(tmp_path, mark):
    """A transient out-of-memory: the system kills the compiler (SIGKILL) once."""
    killed_once = tmp_path / "killed-once"
    cc = tmp_path / "cc"
    cc.write_text(f'#!/bin/sh\ncase "$*" in *" -o "*) if [ ! -e "{killed_once}" ]; then touch "{killed_once}"; '
                  'kill -KILL $$; fi;; esac\nexec cc "$@"\n')
    cc.chmod(0o755)
    problem = fault_problem()
    space = Space([Categorical("MODE", [MODES["good"], MODES["fast"]])])
    runner = CRunner(problem, QUICK, timeout=10)
    try:
        result = Tuner(space, runner, builder=CBuilder(problem, CCompiler(cc=str(cc), cache_dir=tmp_path), jobs=1),
                       workload=W, target=T, db=Database(tmp_path / "t.db"), strategy="exhaustive", budget=10,
                       progress=False).run()
    finally:
        runner.close()
    killed = [r for r in result.history if r.environment]
    assert len(killed) == 1 and "killed by the system" in killed[0].environment
    assert result.trials == 2 and all(r.ok for r in result.history if not r.environment)
    assert len(result.history) == 3  # the failure is recorded, then the retry's success
    assert left_behind(mark) == []


def test_a_busy_gpu_is_the_environments_failure_retried_in_the_same_run(tmp_path):
    flag = str(tmp_path / "flag")
    result = tt.tune(busy_gpu_once, {"flag": [flag], "n": [10, 20]}, strategy="exhaustive", budget=5,
                     db=tmp_path / "t.db", progress=False)
    busy = [r for r in result.history if r.environment]
    assert len(busy) == 1 and busy[0].environment == "the GPU is busy or unavailable"
    assert result.trials == 2 and {r.config["n"] for r in result.history if r.ok} == {10, 20}


# ---- tt.tune --------------------------------------------------------------------------------------
def test_tune_isolated_survives_crashes_hangs_and_memory_bombs_of_a_callable(tmp_path, mark):
    space = {"mode": ["ok", "segfault", "hang", "raise", "memory"], "n": [1000]}
    result = tt.tune(sometimes_faulty, space, strategy="exhaustive", budget=10, db=tmp_path / "t.db",
                     progress=False, timeout=3, memory_limit=512 << 20, reference=sometimes_faulty_reference,
                     timer=QUICK)
    kinds = {r.config["mode"]: r.error for r in result.history}
    assert kinds == {"ok": None, "segfault": ErrorKind.CRASHED, "hang": ErrorKind.TIMEOUT,
                     "raise": ErrorKind.RUNTIME_ERROR, "memory": ErrorKind.OUT_OF_RESOURCES}
    assert result.best.config["mode"] == "ok"
    (workload, records, _), = Database(tmp_path / "t.db").workloads()
    assert records == 5
    assert left_behind(mark) == []


def test_tune_raises_when_nothing_ran_and_refuses_a_space_that_does_not_fit(tmp_path):
    with pytest.raises(TuningFailed, match=r"(?s)nothing ran correctly .*ValueError: a bug in this configuration"):
        tt.tune(sometimes_faulty, {"mode": ["raise"], "n": [1]}, budget=3, db=tmp_path / "t.db", progress=False)
    with pytest.raises(ValueError, match=r"takes no keyword argument\(s\) \['m'\]"):
        tt.tune(sometimes_faulty, {"m": [1], "n": [1]}, db=tmp_path / "t.db", progress=False)
    with pytest.raises(ValueError, match=r"needs argument\(s\) \['n'\]"):
        tt.tune(sometimes_faulty, {"mode": ["ok"]}, db=tmp_path / "t.db", progress=False)
    with pytest.raises(ValueError, match="must be defined at module level"):
        tt.tune(lambda n: n, {"n": [1]}, isolate=True, db=tmp_path / "t.db", progress=False)
    with pytest.raises(ValueError, match="timeout= needs isolate=True"):
        tt.tune(lambda n: n, {"n": [1]}, isolate=False, timeout=1, db=tmp_path / "t.db", progress=False)


def test_tune_retune_and_retry_failed_measure_again_what_is_recorded(tmp_path):
    space = {"mode": ["ok", "raise"], "n": [10]}
    first = tt.tune(sometimes_faulty, space, budget=5, db=tmp_path / "t.db", progress=False)
    assert first.trials == 2
    again = tt.tune(sometimes_faulty, space, budget=5, db=tmp_path / "t.db", progress=False)
    assert again.trials == 0 and again.reused == 2
    retried = tt.tune(sometimes_faulty, space, budget=5, db=tmp_path / "t.db", progress=False, retry_failed=True)
    assert [r.config["mode"] for r in retried.history[retried.reused:]] == ["raise"]
    retuned = tt.tune(sometimes_faulty, space, budget=5, db=tmp_path / "t.db", progress=False, retune=True)
    assert retuned.trials == 2 and retuned.reused == 0


# ---- records --------------------------------------------------------------------------------------
def _record_line(**changes) -> str:
    rec = {"workload": {"name": "demo.matmul_c", "source_hash": "0" * 16, "key": {}},
           "target": {"kind": "cpu", "device": "x", "arch": "", "versions": {}},
           "config": {"TILE_M": 32}, "times": [1e-3], "error": None, "message": "", "compile_seconds": 0.0,
           "run_seconds": 0.0, "strategy": "", "session": "", "created_at": 1.0, "extra": {}}
    rec.update(changes)
    return json.dumps(rec)


@pytest.mark.parametrize("line, words", [
    (_record_line(times=[float("nan")]), "not a finite positive number"),
    (_record_line(times=[-1.0]), "not a finite positive number"),
    (_record_line(times=[0.0]), "not a finite positive number"),
    (_record_line(times=[1e999]), "not a finite positive number"),
    (_record_line(times="fast"), "times must be a list of numbers"),
    (_record_line(config={"TILE_M": 10 ** 30}), "does not fit 64 bits"),
    (_record_line(config={"TILE_M": "x" * 100_000}), "a string of 100000 characters"),
    (_record_line(config={"TILE_M": json.loads("[" * 50 + "]" * 50)}), "nested more than 8 deep"),
    ("[" * 100_000 + "]" * 100_000, "nested too deep"),
    (_record_line(extra={"k": "v" * 5_000_000}), "longer than"),
    (_record_line(error="no_such_kind"), "no_such_kind"),
    (_record_line(workload={"name": 7, "source_hash": "0"}), "name must be a string"),
    (_record_line(created_at=float("inf")), "created_at inf is not a finite number"),
    ("[1, 2]", "a record is a JSON object"),
    ("{\"workload\": {}}", "missing field"),
])
def test_a_malformed_import_is_a_clear_error_naming_its_line_and_imports_nothing(tmp_path, line, words):
    path = tmp_path / "records.jsonl"
    path.write_text(_record_line() + "\n" + line + "\n")
    db = Database(tmp_path / "t.db")
    with pytest.raises(DatabaseError, match="records.jsonl:2: ") as err:
        import_jsonl(db, path)
    assert words in str(err.value)
    assert list(db.all_records()) == []


def test_an_imported_record_is_never_built_unless_its_configuration_is_in_the_space(tmp_path, mark):
    """`tensortune db import` of a crafted file, then the demo: the record claims to be the
    fastest and carries C code in a define; the demo never compiles it."""
    from tensortune.demo.matmul import matmul_problem, matmul_space, run_demo
    from tensortune.tuner import Budget

    touched = tmp_path / "pwned"
    payload = f'32; }} __attribute__((constructor)) static void p(void) {{ system("touch {touched}"); }} void q() {{'
    problem = matmul_problem(32, 32, 32)
    workload = Workload.make("demo.matmul_c", problem.source, {"M": 32, "N": 32, "K": 32, "dtype": "float32"})
    target = Target.cpu()
    crafted = {"workload": {"name": workload.name, "source_hash": workload.source_hash, "key": workload.key},
               "target": {"kind": target.kind, "device": target.device, "arch": target.arch,
                          "versions": target.versions},
               "config": {**dict(matmul_space(threads=1).sample(1, 0)[0]), "TILE_M": payload},
               "times": [1e-12], "created_at": 1.0, "extra": {"role": "best"}, "strategy": "compare"}
    path = tmp_path / "crafted.jsonl"
    path.write_text(json.dumps(crafted) + "\n")
    db = Database(tmp_path / "t.db")
    assert import_jsonl(db, path) == 1
    report = run_demo(db, 32, 32, 32, Budget(trials=2, seconds=60), strategy="random", seed=0, progress=False,
                      jobs=1, rounds=1)
    assert not touched.exists()
    assert report.best_config["TILE_M"] != payload and matmul_space().is_valid(report.best_config)
    with pytest.raises(CandidateError, match="not a number, boolean or identifier"):
        CCompiler(cache_dir=tmp_path).compile(problem.source, {"TILE_M": payload})
    assert left_behind(mark) == []


def test_the_cpu_auto_scheduler_never_builds_a_recorded_configuration_outside_its_space(tmp_path):
    """A crafted record, claimed confirmed and fastest, with a configuration that is not the
    sketches' own: the rebuild skips it (before, it raised on every call, retune or not)."""
    import warnings

    from tensortune.autoschedule import autoschedule
    from tensortune.te import workloads

    db_path = tmp_path / "r.db"
    timer = Timer(warmup_seconds=0, min_repeats=2, max_repeats=3, budget_seconds=0)
    first = autoschedule(workloads.matmul(16, 16, 16), budget=4, db=db_path, progress=False, timer=timer, confirm=1)
    db = Database(db_path)
    bogus = {**dict(first.config), "sketch": "C:no_such_sketch; system('x')"}
    db.add(first.workload, Target.cpu(), tt.MeasureResult(Config(bogus), (1e-12,), extra={"confirmed": True}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a configuration outside the space is not even tried
        again = autoschedule(workloads.matmul(16, 16, 16), budget=4, db=db_path, progress=False, timer=timer)
    assert again.from_db and again.config == first.config
    retuned = autoschedule(workloads.matmul(16, 16, 16), budget=2, db=db_path, progress=False, timer=timer,
                           retune=True, confirm=1)
    assert retuned.config != bogus and not retuned.from_db


def test_a_damaged_row_and_a_corrupt_file(tmp_path):
    """A damaged record is skipped (and named) while tuning resumes from the others; a file
    that is not a database stops the run with a clear error and is left untouched."""
    import sqlite3
    import warnings

    space = {"n": [10, 20, 30, 40]}
    path = tmp_path / "t.db"
    tt.tune(sometimes_faulty_n, space, strategy="exhaustive", budget=2, db=path, progress=False)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE records SET config_json='{' WHERE id=1")
    conn.commit()
    conn.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = tt.tune(sometimes_faulty_n, space, strategy="exhaustive", budget=4, db=path, progress=False)
    assert any("record 1 is damaged" in str(w.message) for w in caught)
    assert again.reused == 1 and again.trials == 3  # the damaged one is measured again, the other not
    db = Database(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert len(db.records(next(w for w, _, _ in db.workloads()))) == 4 and list(db.damaged) == [1]
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"this is not a database" * 100)
    before = corrupt.read_bytes()
    with pytest.raises(DatabaseError, match="corrupt.db"):
        tt.tune(sometimes_faulty_n, space, db=corrupt, progress=False)
    assert corrupt.read_bytes() == before


def sometimes_faulty_n(n):
    return sum(range(n))


CONCURRENT = """
import sys
import tensortune as tt
from fault_helpers import sometimes_faulty
if __name__ == "__main__":
    r = tt.tune(sometimes_faulty, {"mode": ["ok", "raise"], "n": list(range(100, 130))}, strategy="random",
                seed=int(sys.argv[2]), budget=20, db=sys.argv[1], progress=False)
    print("TRIALS", r.trials, flush=True)
"""


def test_concurrent_writers_lose_no_record(tmp_path, mark):
    script = tmp_path / "tune.py"
    script.write_text(CONCURRENT)
    procs = [subprocess.Popen([sys.executable, str(script), str(tmp_path / "t.db"), str(seed)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_child_env(mark))
             for seed in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    trials = [int(o.split()[1]) for o, _ in outs if o.startswith("TRIALS")]
    assert len(trials) == 3, outs
    db = Database(tmp_path / "t.db")
    (w, n, _), = db.workloads()
    # each process told its search the others' records it saw at its start, so some
    # configurations were measured twice; every measurement is there
    assert n == sum(trials) == len(db.records(w))
    assert left_behind(mark) == []


def test_a_database_in_a_read_only_folder_can_be_listed(tmp_path):
    from click.testing import CliRunner

    from tensortune.cli.main import cli

    folder = tmp_path / "shipped"
    folder.mkdir()
    db = Database(folder / "t.db")
    db.add(W, T, tt.MeasureResult(Config(a=1), (1e-3,)))
    db.close()
    folder.chmod(0o555)
    immutable = os.geteuid() == 0 and subprocess.run(["chattr", "+i", str(folder)], check=False,
                                                     capture_output=True).returncode == 0
    if os.geteuid() == 0 and not immutable:
        pytest.skip("running as root without chattr +i: a folder cannot be made read-only")
    try:
        out = CliRunner().invoke(cli, ["--db", str(folder / "t.db"), "db", "list"])
        assert out.exit_code == 0 and "(read-only)" in out.output and "faults.saxpy" in out.output, out.output
        ro = Database(folder / "t.db")
        assert ro.read_only and math.isclose(ro.best(W, T).time, 1e-3)
        with pytest.raises(DatabaseError, match="opened read-only"):
            ro.add(W, T, tt.MeasureResult(Config(a=2), (1e-3,)))
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(folder)], check=False)
        folder.chmod(0o755)
