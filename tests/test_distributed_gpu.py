"""The GPU frontends on a real Ray cluster (`LocalCluster`: a head and two worker nodes on
loopback, shared with test_distributed.py), run under Triton's interpreter: every worker
node offers one GPU to Ray and serves the interpreter's target, so candidates are measured
by actors that own a GPU (Ray sets their CUDA_VISIBLE_DEVICES), each in its isolated
worker, on nodes of the target only; builds run as Ray tasks on nodes of the target."""

from __future__ import annotations

import importlib.util
import os

import pytest

torch = pytest.importorskip("torch")
if importlib.util.find_spec("triton") is None:
    pytest.skip("triton is not installed", allow_module_level=True)

from test_triton_kernels import matmul_args, matmul_grid, matmul_kernel  # noqa: E402

import tensortune as tt  # noqa: E402
import triton  # noqa: E402
from tensortune.db import Database, Workload  # noqa: E402
from tensortune.distributed import RayExecutor  # noqa: E402
from tensortune.frontends.triton.target import interpreter_target  # noqa: E402
from tensortune.measure import ErrorKind  # noqa: E402
from tensortune.measure.cuda_timer import CudaTimer  # noqa: E402

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET", "0") == "0",
                                reason="these tests run Triton's interpreter (no GPU here)")

HOST_TIMER = CudaTimer(clock="host", budget_seconds=0.0, warmup_seconds=0.0, min_repeats=1, estimate_repeats=1)


def matmul_reference(a, b, c, *rest):
    c.copy_(a @ b)


@pytest.fixture
def gpu_executor(ray_cluster):
    """Measuring actors that each hold one of the nodes' GPUs (as for a real GPU target)."""
    executor = RayExecutor(ray_cluster.address, measure_gpus=1)
    yield executor
    executor.close()


@pytest.mark.slow
def test_an_autotuned_triton_kernel_is_measured_by_actors_that_own_a_gpu(tmp_path, ray_cluster, gpu_executor):
    """@tensortune.autotune(executor=...): every candidate, good and bad, measured on an
    actor holding a GPU, in its isolated worker; the launch uses the verified winner."""
    configs = [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": 16}, num_warps=4) for m, n in ((16, 16), (32, 32))]
    configs += [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 24}),  # raises in the worker
                triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "BUG": 1})]  # wrong result
    db = Database(tmp_path / "t.db")
    k = tt.autotune(configs=configs, key=["M"], reference=matmul_reference, timer=HOST_TIMER, db=db,
                    settings=tt.Settings(db_path=tmp_path / "t.db", progress=False),
                    executor=gpu_executor)(matmul_kernel)
    args = matmul_args(20, 24, 40)
    k[matmul_grid(20, 24)](*args)
    torch.testing.assert_close(args[2], args[0] @ args[1], rtol=1e-4, atol=1e-4)
    (tuning,) = k.tunings.values()
    history = tuning.result.history
    assert len(history) == 4
    by_block = {(r.config["BLOCK_K"], r.config["BUG"] or 0): r for r in history}
    assert by_block[(24, 0)].error is ErrorKind.RUNTIME_ERROR
    assert by_block[(16, 1)].error is ErrorKind.WRONG_RESULT
    nodes = {n["NodeID"] for n in gpu_executor.connect().nodes() if n["Alive"]}
    for r in history:
        assert r.extra["ray_node"] in nodes and r.extra["ray_gpus"] == "0", r.extra  # Ray's CUDA_VISIBLE_DEVICES
    workload = Workload.make(k.name, k.source, k.decision.key.as_dict())
    records = db.records(workload, interpreter_target())
    assert {r.config for r in records if not r.extra.get("final")} == {r.config for r in history}
