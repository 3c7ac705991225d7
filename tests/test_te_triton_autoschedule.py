"""`autoschedule_cuda` on the CPU: the whole loop (seeds, search, isolated runner, float32
reference, records database) with the generated kernels in Triton's interpreter."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")
if importlib.util.find_spec("triton") is None:  # not imported here: Triton decides at import whether it
    pytest.skip("triton is not installed", allow_module_level=True)  # interprets (the kernels run in workers)

from tensortune.backends.triton import GenOptions, SeededStrategy, analyze, sketch  # noqa: E402
from tensortune.backends.triton.reference import TorchReference  # noqa: E402
from tensortune.backends.triton.runtime import GeneratedBuilder, GeneratedLaunch, Generator  # noqa: E402
from tensortune.measure import BuildResult, ErrorKind, MeasureResult  # noqa: E402
from tensortune.measure.cuda_timer import CudaTimer  # noqa: E402
from tensortune.measure.gpu import GpuRunner, GpuTask, TensorArg  # noqa: E402
from tensortune.search import create_strategy  # noqa: E402
from tensortune.space import Config  # noqa: E402
from tensortune.te import workloads  # noqa: E402

SCRIPT = textwrap.dedent("""
    import json, sys, importlib.util
    import torch
    from tensortune import te
    from tensortune.te import TEError, workloads
    from tensortune.db import Database
    from tensortune.backends.triton import autoschedule_cuda

    def main():
        db_path, cache, saved, via = sys.argv[1:5]
        w = workloads.matmul_bias_relu(24, 16, 40, "float16")
        if via == "te":  # the te entry point hands target="cuda" to the same function
            kernel = te.autoschedule(w, target="cuda", budget=4, db=db_path, cache_dir=cache, progress=False)
        else:
            kernel = autoschedule_cuda(w, budget=4, db=db_path, cache_dir=cache, progress=False, seed=3)
        a, b, bias = torch.randn(24, 40).half(), torch.randn(40, 16).half(), torch.randn(16).half()
        want = torch.relu(a.float() @ b.float() + bias.float())
        err = float((kernel(a, b, bias).float() - want).abs().max() / want.abs().max())
        kernel.save(saved)
        spec = importlib.util.spec_from_file_location("saved_kernel", saved)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        out = torch.empty(24, 16, dtype=torch.float16)
        module.launch(a, b, bias, out)
        saved_err = float((out.float() - want).abs().max() / want.abs().max())
        problems = []
        for bad in ((a, b), (a.float(), b, bias), (a[:, :8], b, bias)):
            try:
                kernel(*bad)
            except TEError as exc:
                problems.append(str(exc))
        db = Database(db_path)
        records = sum(len(db.records(wl)) for wl, _, _ in db.workloads())
        print(json.dumps({"source": kernel.tuning.source, "trials": kernel.tuning.trials, "err": err,
                          "saved_err": saved_err, "records": records, "problems": problems,
                          "config": dict(kernel.config), "has_dot": "tl.dot" in kernel.source}))

    if __name__ == "__main__":
        main()
""")


def run_script(tmp_path, name, via="backend"):
    script = tmp_path / "run_autoschedule.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, TRITON_INTERPRET="1", TENSORTUNE_PROGRESS="0")
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "records.db"), str(tmp_path / "cache"),
                           str(tmp_path / name), via], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_autoschedule_searches_records_and_rebuilds_from_the_database(tmp_path):
    first = run_script(tmp_path, "first.py")
    assert first["source"] == "search" and first["trials"] == 4 and first["records"] == 4
    assert first["err"] < 1e-2 and first["saved_err"] < 1e-2 and first["has_dot"]
    assert len(first["problems"]) == 3
    assert any("takes 3 inputs" in p for p in first["problems"])
    assert any("built for torch.float16" in p for p in first["problems"])
    assert any("shape" in p for p in first["problems"])
    second = run_script(tmp_path, "second.py", via="te")
    assert second["source"] == "database" and second["records"] == 4  # nothing measured again
    assert second["config"] == first["config"] and second["err"] < 1e-2


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_wrong_and_ungeneratable_candidates_are_recorded_as_such(tmp_path, dtype):
    """The GPU runner draws inputs of the dtype from the specs, checks against the float32
    reference at the dtype's tolerance, and catches a kernel that skips a K block."""
    out = workloads.matmul(32, 16, 48, dtype).output
    plan = analyze(out)
    gen = Generator(plan, GenOptions(interpret=True), str(tmp_path), "w")
    good = Config(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
    wrong = Config(BLOCK_M=32, BLOCK_N=16, BLOCK_K=16)
    bad = Config(BLOCK_M=8, BLOCK_N=16, BLOCK_K=16)
    builds = list(GeneratedBuilder(gen, compile=False).build([good, wrong, bad]))
    by_config = {b.config: b for b in builds}
    assert by_config[good].ok and by_config[wrong].ok and not by_config[bad].ok
    assert by_config[bad].error is ErrorKind.COMPILE_ERROR and "power of two" in by_config[bad].message
    path = gen.path(wrong)  # the second candidate skips the last block of K
    assert "for it in range(0, 3):" in path.read_text()
    path.write_text(path.read_text().replace("range(0, 3)", "range(0, 2)"))
    specs = (TensorArg((32, 48), dtype), TensorArg((48, 16), dtype),
             TensorArg((32, 16), dtype, output=True))
    task = GpuTask(GeneratedLaunch(gen.directory, gen.prefix), specs, reference=TorchReference(out, ("A", "B")),
                   device="cpu", timer=CudaTimer(clock="host", budget_seconds=0.0, warmup_seconds=0.0,
                                                 min_repeats=1, max_repeats=1, estimate_repeats=1, flush_l2=False))
    with GpuRunner(task, timeout=120, env={"TRITON_INTERPRET": "1"}) as runner:
        results = {r.config: r for r in runner.run(builds)}
    assert results[good].ok
    assert results[wrong].error is ErrorKind.WRONG_RESULT
    assert results[bad].error is ErrorKind.COMPILE_ERROR


def test_seeds_come_first_then_the_search_without_repeats():
    sk = sketch(analyze(workloads.matmul(128, 128, 128, "float16").output))
    inner = create_strategy("random", sk.space, seed=0)
    s = SeededStrategy(inner, sk.seeds)
    first = s.ask(3)
    assert first == list(sk.seeds[:3])
    s.tell([MeasureResult(c, (1.0,)) for c in first])
    rest = s.ask(len(sk.seeds) + 5)
    assert rest[: len(sk.seeds) - 3] == list(sk.seeds[3:])
    assert len(set(first + rest)) == len(first + rest)
    assert all(c in sk.space for c in rest)


def test_build_results_keep_their_order_and_messages(tmp_path):
    gen = Generator(analyze(workloads.softmax(4, 8).output), GenOptions(interpret=True), str(tmp_path), "s")
    builds = list(GeneratedBuilder(gen, compile=False).build([Config(BLOCK_R=3, BLOCK_C=8)]))
    assert isinstance(builds[0], BuildResult) and not builds[0].ok and "BLOCK_R=3" in builds[0].message


STRATEGY_SCRIPT = textwrap.dedent("""
    import json, sys
    from tensortune import te
    from tensortune.db import Database
    from tensortune.te import workloads

    if __name__ == "__main__":
        db_path, cache = sys.argv[1:3]
        te.autoschedule(workloads.matmul(16, 16, 32, "float16"), target="cuda", budget=2, db=db_path,
                        cache_dir=cache, strategy="random", jobs=1, confirm=1, progress=False)
        db = Database(db_path)
        print(json.dumps(sorted({r.strategy for wl, _, _ in db.workloads() for r in db.records(wl)})))
""")


def test_te_autoschedule_hands_its_strategy_to_the_gpu_search(tmp_path):
    """target="cuda" used to drop strategy=, jobs=, timer= and confirm= silently."""
    script = tmp_path / "run_strategy.py"
    script.write_text(STRATEGY_SCRIPT)
    env = dict(os.environ, TRITON_INTERPRET="1", TENSORTUNE_PROGRESS="0")
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "records.db"), str(tmp_path / "cache")],
                          capture_output=True, text=True, env=env, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == ["random"]


BF16_SCRIPT = textwrap.dedent("""
    import json, sys
    import torch
    from tensortune import te
    from tensortune.te import workloads

    if __name__ == "__main__":
        db_path, cache = sys.argv[1:3]
        w = workloads.matmul_bias_relu(24, 16, 40, "bfloat16")
        kernel = te.autoschedule(w, target="cuda", budget=2, db=db_path, cache_dir=cache, jobs=1, confirm=1,
                                 progress=False)
        a, b, bias = (torch.randn(*t.shape, dtype=torch.bfloat16) for t in w.inputs)
        out = kernel(a, b, bias)
        want = torch.relu(a.float() @ b.float() + bias.float())
        print(json.dumps({"dtype": str(out.dtype), "trials": kernel.tuning.trials,
                          "err": float((out.float() - want).abs().max() / want.abs().max())}))
""")


def test_te_autoschedule_tunes_a_bfloat16_graph_for_cuda(tmp_path):
    script = tmp_path / "run_bf16.py"
    script.write_text(BF16_SCRIPT)
    env = dict(os.environ, TRITON_INTERPRET="1", TENSORTUNE_PROGRESS="0")
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "records.db"), str(tmp_path / "cache")],
                          capture_output=True, text=True, env=env, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["dtype"] == "torch.bfloat16" and result["trials"] == 2 and result["err"] < 2e-2
