"""Measurements per minute on a Ray cluster of 1, 2 and 4 nodes against the local executor.

A cluster of separate node processes on this machine (`LocalCluster`: a head, and worker
nodes each with `--cpus-per-node` of the cores) grows from 1 to the largest `--nodes`; at
each size the same tuning run (random search over the C matmul template of the demo,
every candidate compiled afresh: a compile-bound workload) runs with the Ray executor and
with the local executor given as many compile processes as the nodes have cores,
interleaved over `--rounds` rounds (the same seed for both in a round). Measurements per
minute are the candidates a run measured over its wall time (the tuner's, after a warm-up
run that starts the actors). Scaling efficiency at N nodes is its throughput over N times
the one-node throughput; the overhead of Ray is its one-node throughput against the
local executor's with the same cores.

With CUDA (or `--triton` on a machine without, under Triton's interpreter), a Triton
matmul tuned with `tensortune.tune(isolate=True)` runs the same way on a one-node cluster
that owns the GPU (its actor holds it): Ray against local, each candidate JIT-compiled in
the measuring worker.

Usage (from the repository root; the cluster is started and stopped by the script):
    .venv/bin/python benchmarks/ray_scaling.py --nodes 1,2,4 --cpus-per-node 4 --trials 96 --rounds 2 \
        --json docs/benchmarks/ray_scaling.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def c_run(executor, jobs: int, trials: int, seed: int, size: int) -> dict:
    """One tuning run of the C matmul template from an empty store and compile cache."""
    from tensortune.backends import CBuilder, CCompiler, CRunner
    from tensortune.db import Database, Target, Workload
    from tensortune.demo.matmul import matmul_problem, matmul_space
    from tensortune.measure import Timer
    from tensortune.tuner import Tuner

    problem = matmul_problem(size, size, size)
    scratch = tempfile.mkdtemp(prefix="tt-raybench-")
    try:
        runner = CRunner(problem, Timer(warmup_seconds=0.0, min_repeats=3, budget_seconds=0.005))
        builder = CBuilder(problem, CCompiler(cache_dir=os.path.join(scratch, "cc")), jobs=jobs)
        db = Database(os.path.join(scratch, "t.db"))
        tuner = Tuner(matmul_space(threads=1), runner, builder=builder, db=db, strategy="random", budget=trials,
                      seed=seed, progress=False, executor=executor, transfer=False,
                      workload=Workload.make("bench.matmul_c", problem.source, {"size": size}), target=Target.cpu())
        try:
            result = tuner.run()
        finally:
            runner.close()
            builder.close()
        records = len(db.records(tuner.workload, tuner.target))
        seen = len(result.history) - result.reused
        return {"trials": result.trials, "seconds": result.seconds, "per_minute": 60 * result.trials / result.seconds,
                "failures": result.failures, "environment_failures": result.environment_failures,
                "records": records, "lost": seen - records}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def triton_run(executor, trials: int, seed: int, small: bool) -> dict:
    import ray_triton_kernel as k
    from tensortune import tune
    from tensortune.measure import Timer

    scratch = tempfile.mkdtemp(prefix="tt-raybench-")
    try:
        result = tune(k.matmul, k.space(small), budget=trials, strategy="random", seed=seed, reference=k.reference,
                      db=os.path.join(scratch, "t.db"), isolate=True, timeout=300, progress=False,
                      timer=Timer(warmup_seconds=0.0, min_repeats=3, budget_seconds=0.01), executor=executor,
                      name="bench.triton_matmul")
        return {"trials": result.trials, "seconds": result.seconds, "per_minute": 60 * result.trials / result.seconds,
                "failures": result.failures, "environment_failures": result.environment_failures}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def mean(rows: list[dict], key: str = "per_minute") -> float:
    return sum(r[key] for r in rows) / len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="1,2,4", help="cluster sizes, in increasing order")
    parser.add_argument("--cpus-per-node", type=int, default=None,
                        help="cores of each node (default: this machine's cores over the largest size)")
    parser.add_argument("--trials", type=int, default=96, help="candidates measured per run")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved repetitions of each pair of runs")
    parser.add_argument("--size", type=int, default=64, help="M = N = K of the C matmul (small: compile-bound)")
    parser.add_argument("--triton", action="store_true", help="run the Triton part without CUDA (interpreter)")
    parser.add_argument("--no-triton", action="store_true", help="skip the Triton part even with CUDA")
    parser.add_argument("--no-c", action="store_true", help="skip the C part (run the Triton part alone)")
    parser.add_argument("--triton-trials", type=int, default=32)
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args()

    sizes = [int(n) for n in args.nodes.split(",")]
    cores = os.cpu_count() or 1
    per_node = args.cpus_per_node or max(1, cores // max(sizes))
    out: dict = {"machine": {"cpus": cores, "platform": platform.platform(), "python": sys.version.split()[0]},
                 "args": vars(args), "cpus_per_node": per_node, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                 "c": {}, "triton": {}}
    if not args.no_c:
        _c_part(args, sizes, per_node, out)
        _write(args.json, out, sizes)  # each part's figures are kept even if the next part is cut short
    _triton_part(args, per_node, out)
    table = _write(args.json, out, sizes)
    print()
    print(f"{'workload':10s} {'nodes':>5s} {'cores':>5s} {'ray /min':>9s} {'local /min':>10s} {'ray/local':>9s} "
          f"{'scaling':>8s} {'lost':>4s}")
    for row in table:
        print(f"{row['workload']:10s} {row['nodes']:5d} {row['cores']:5d} {row['ray']:9.0f} {row['local']:10.0f} "
              f"{row['ray'] / row['local']:9.2f} {row['scaling']:>8s} {row['lost']:4d}")


def _c_part(args: argparse.Namespace, sizes: list[int], per_node: int, out: dict) -> None:
    from tensortune.distributed import RayExecutor
    from tensortune.distributed.local_cluster import LocalCluster
    from tensortune.measure import LocalExecutor

    print(f"C matmul {args.size}^3, {args.trials} candidates a run, {per_node} cores a node, {args.rounds} rounds",
          flush=True)
    cluster = LocalCluster(workers=0, cpus_per_worker=per_node, python_path=(HERE,)).start()
    try:
        executor = RayExecutor(cluster.address)
        for n in sizes:
            while len(cluster.nodes) < n:
                cluster.add_worker()
            c_run(executor, per_node * n, max(8, per_node * n), 999, args.size)  # warm-up: actors start
            rows: dict[str, list[dict]] = {"ray": [], "local": []}
            for r in range(args.rounds):
                for name in (("ray", "local") if r % 2 == 0 else ("local", "ray")):
                    ex = executor if name == "ray" else LocalExecutor()
                    row = c_run(ex, per_node * n, args.trials, r, args.size)
                    rows[name].append(row)
                    print(f"  {n} node(s) {name:5s} round {r}: {row['per_minute']:.0f}/min "
                          f"({row['trials']} in {row['seconds']:.1f} s, lost {row['lost']})", flush=True)
            out["c"][str(n)] = rows
        executor.close()
    finally:
        cluster.stop()


def _triton_part(args: argparse.Namespace, per_node: int, out: dict) -> None:
    from tensortune.distributed import RayExecutor
    from tensortune.distributed.local_cluster import LocalCluster

    cuda = _cuda()
    if (cuda or args.triton) and not args.no_triton:
        cluster = LocalCluster(workers=0, cpus_per_worker=per_node, gpus_per_worker=1 if cuda else 0,
                               python_path=(HERE,)).start()
        try:
            cluster.add_worker()
            executor = RayExecutor(cluster.address, measure_gpus=1 if cuda else 0)
            triton_run(executor, 4, 999, not cuda)
            rows = {"ray": [], "local": []}
            for r in range(args.rounds):
                for name in (("ray", "local") if r % 2 == 0 else ("local", "ray")):
                    row = triton_run(executor if name == "ray" else "local", args.triton_trials, r, not cuda)
                    rows[name].append(row)
                    print(f"  triton {name:5s} round {r}: {row['per_minute']:.0f}/min "
                          f"({row['trials']} in {row['seconds']:.1f} s)", flush=True)
            out["triton"] = {"device": "cuda" if cuda else "cpu (interpreter)", "1": rows}
            executor.close()
        finally:
            cluster.stop()


def _write(path: str | None, out: dict, sizes: list[int]) -> list[dict]:
    table = _table(out, sizes)
    out["summary"] = table
    if path:
        with open(path, "w") as f:
            json.dump(out, f, indent=1)
    return table


def _table(out: dict, sizes: list[int]) -> list[dict]:
    table = []
    one = mean(out["c"][str(sizes[0])]["ray"]) / sizes[0] if out["c"] else 0.0
    for n in sizes if out["c"] else []:
        rows = out["c"][str(n)]
        ray = mean(rows["ray"])
        table.append({"workload": "C compile", "nodes": n, "cores": n * out["cpus_per_node"], "ray": ray,
                      "local": mean(rows["local"]), "scaling": f"{ray / (one * n):.2f}" if one else "-",
                      "lost": sum(r["lost"] for r in rows["ray"] + rows["local"])})
    if out["triton"]:
        rows = out["triton"]["1"]
        table.append({"workload": "Triton", "nodes": 1, "cores": out["cpus_per_node"], "ray": mean(rows["ray"]),
                      "local": mean(rows["local"]), "scaling": "-", "lost": 0})
    return table


def _cuda() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


if __name__ == "__main__":
    main()
