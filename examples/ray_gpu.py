"""Tune a Triton kernel and a small model on Ray actors that own this machine's GPUs.

A Ray cluster on this machine (`LocalCluster`: a head and one worker node with the GPUs
and `--cpus` cores, advertising the GPUs' target) measures the candidates: each GPU is an
actor with its isolated worker, the Triton compiles run as build tasks on the node, and
this process keeps the search and records each result as it arrives. Both results are
checked against torch on fresh inputs; the records say which node and GPU measured them.

    python examples/ray_gpu.py --cpus 8 --json ray_gpu.json

Without a GPU, under TRITON_INTERPRET=1, the same path runs in Triton's interpreter (Ray
is told the node has one GPU; the times mean nothing).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time

import torch
import triton
import triton.language as tl

HERE = os.path.dirname(os.path.abspath(__file__))


@triton.jit
def scale_add_kernel(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, alpha * x + y, mask=mask)


def scale_add_reference(x, y, out, n, alpha):
    out.copy_(alpha * x + y)


def tune_kernel(executor, db: str, device: str, n: int) -> dict:
    import tensortune as tt
    from tensortune.db import Database

    space = tt.Space({"BLOCK": [128, 256, 512, 1024, 2048], "num_warps": [2, 4, 8]})
    kernel = tt.autotune(space=space, key=["n"], reference=scale_add_reference, db=db, executor=executor,
                         progress=False)(scale_add_kernel)
    x, y = torch.randn(n, device=device), torch.randn(n, device=device)
    out = torch.empty_like(x)
    start = time.perf_counter()
    kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n, 2.0)
    seconds = time.perf_counter() - start
    torch.testing.assert_close(out, 2.0 * x + y)
    (tuning,) = kernel.tunings.values()
    history = tuning.result.history
    records = Database(db).records(_workload(kernel), kernel.context().target)
    return {"candidates": len(history), "ok": sum(r.ok for r in history), "recorded": len(records),
            "best": kernel.decision.config.to_json(), "best_us": round(tuning.final.time * 1e6, 2),
            "gpus": sorted({r.extra.get("ray_gpus", "") for r in history}),
            "nodes": len({r.extra.get("ray_node") for r in history}), "seconds": round(seconds, 1)}


def _workload(kernel):
    from tensortune.db import Workload

    return Workload.make(kernel.name, kernel.source, kernel.decision.key.as_dict())


def tune_model(executor, db: str, device: str, budget: int) -> dict:
    import tensortune
    from tensortune.db import Database

    torch.manual_seed(0)
    dtype = torch.float32 if device == "cpu" else torch.float16
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256)).eval()
    model = model.to(device=device, dtype=dtype)
    start = time.perf_counter()
    fast = tensortune.compile(model, (torch.randn(64, 256, device=device, dtype=dtype),), target="cuda",
                              budget=budget, db=db, progress=False, executor=executor)
    seconds = time.perf_counter() - start
    x = torch.randn(64, 256, device=device, dtype=dtype)
    with torch.no_grad():
        want, got = model(x).float(), fast(x).float()
    error = float((got - want).norm() / want.norm())
    assert error < 2e-2, f"the compiled model is off by {error:.3g}"
    from tensortune.backends.triton.tune import cuda_target

    store = Database(db)
    target = cuda_target(device == "cpu")
    measured = [r for w in fast.workloads for r in store.records(w, target) if r.extra.get("ray_node")]
    return {"kernels": len(fast.report.tasks), "sources": [t.source for t in fast.report.tasks],
            "measured_on_ray": len(measured), "gpus": sorted({r.extra.get("ray_gpus", "") for r in measured}),
            "relative_error": error, "seconds": round(seconds, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpus", type=int, default=min(8, os.cpu_count() or 1), help="cores of the worker node")
    parser.add_argument("--n", type=int, default=1 << 22, help="elements of the kernel's vectors")
    parser.add_argument("--budget", type=int, default=16, help="trials for the model's kernels")
    parser.add_argument("--json", default=None, help="write the results there")
    args = parser.parse_args(argv)

    from tensortune.distributed import RayExecutor
    from tensortune.distributed.local_cluster import LocalCluster
    from tensortune.frontends.triton.target import current_target

    interpret = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
    if importlib.util.find_spec("xgboost") is None:
        raise SystemExit("the model's kernels are searched with the XGBoost cost model: pip install xgboost-cpu")
    if not interpret and not torch.cuda.is_available():
        raise SystemExit("no GPU here: run with TRITON_INTERPRET=1 to try the path in Triton's interpreter")
    device = "cpu" if interpret else "cuda"
    gpus = 1 if interpret else torch.cuda.device_count()
    n = min(args.n, 4096) if interpret else args.n
    db = os.path.join(tempfile.mkdtemp(prefix="ray-gpu-"), "records.db")
    with LocalCluster(workers=1, cpus_per_worker=args.cpus, gpus_per_worker=gpus, slots=gpus,
                      extra_targets=(current_target(interpret),), python_path=(HERE,)) as cluster:
        with RayExecutor(cluster.address, measure_gpus=1) as executor:
            out = {"device": torch.cuda.get_device_name() if not interpret else "Triton interpreter",
                   "gpus": gpus, "node_cpus": args.cpus,
                   "kernel": tune_kernel(executor, db, device, n),
                   "model": tune_model(executor, db, device, args.budget)}
    print(json.dumps(out, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, HERE)  # the kernel's module is `ray_gpu`, which the nodes import (not __main__)
    import ray_gpu

    sys.exit(ray_gpu.main())
