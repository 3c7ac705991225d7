"""Measurements per minute on a Ray cluster of 1, 2 and 4 nodes against the local executor.

A cluster of separate node processes on this machine (`LocalCluster`: a head, and worker
nodes each with `--cpus-per-node` of the cores) grows from 1 to the largest `--nodes`; at
each size the same tuning runs (random search, every candidate compiled afresh: a
compile-bound workload) run with the Ray executor and with the local executor given as
many compile processes as the nodes have cores, interleaved over `--rounds` rounds (the
same seed for both in a round). Two workloads (`--workloads`): `demo64`, the C matmul
template of the demo at 64^3, whose compiles (~0.3 s) are too short for the nodes to be
the bottleneck, and `conv`, te.autoschedule(target="cpu") candidates of a 3x3 conv2d,
whose compiles take ~0.5 to 6 s like real auto-scheduled kernels. Measurements per minute
are the candidates a run measured over its wall time (the tuner's, after a warm-up run
that starts the actors). Scaling efficiency at N nodes is its throughput over N times
the one-node throughput; the overhead of Ray is its one-node throughput against the
local executor's with the same cores. "steady" is the results a minute from a run's first
result to its last (its start-up left out: actors starting the run's measuring workers,
the first builds), "first s" the seconds to the first result, and "driver ms" the
driver process's own CPU time per candidate (the strategy, the records, the hand-offs,
Ray's threads in the driver), so 60,000 / driver ms is the most a minute that one driver
could hand out.

With CUDA (or `--triton` on a machine without, under Triton's interpreter), a Triton
matmul tuned with `tensortune.tune(isolate=True)` runs the same way on a one-node cluster
that owns the GPU (its actor holds it): Ray against local, each candidate JIT-compiled in
the measuring worker.

Usage (from the repository root; the cluster is started and stopped by the script):
    .venv/bin/python benchmarks/ray_scaling.py --nodes 1,2,4 --cpus-per-node 4 --trials 96 --conv-trials 64 \
        --rounds 2 --no-triton --json docs/benchmarks/ray_scaling.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


WORKLOADS = {
    "demo64": "C matmul template of the demo at 64^3 (compiles of ~0.3 s: driver-bound)",
    "conv": "te.autoschedule(target='cpu') candidates of a 3x3 conv2d, 32 channels at 28x28 (compiles of ~0.5-6 s)",
}


def c_run(executor, jobs: int, trials: int, seed: int, workload: str, size: int = 64) -> dict:
    """One tuning run of `workload` (a key of WORKLOADS) from an empty store and compile cache."""
    from tensortune.backends import CCompiler
    from tensortune.db import Database, Target
    from tensortune.measure import Timer
    from tensortune.tuner import Tuner

    scratch = tempfile.mkdtemp(prefix="tt-raybench-")
    try:
        compiler = CCompiler(cache_dir=os.path.join(scratch, "cc"))
        timer = Timer(warmup_seconds=0.0, min_repeats=3, budget_seconds=0.005)
        space, runner, builder, work = (_demo if workload == "demo64" else _conv)(compiler, timer, jobs, size)
        db = Database(os.path.join(scratch, "t.db"))
        arrivals: list[float] = []
        tuner = Tuner(space, runner, builder=builder, db=db, strategy="random", budget=trials, seed=seed,
                      progress=False, executor=executor, transfer=False, workload=work, target=Target.cpu(),
                      callbacks=[lambda r: arrivals.append(time.perf_counter())])
        cpu, start = time.process_time(), time.perf_counter()  # the driver's own work: its threads, not children
        try:
            result = tuner.run()
        finally:
            cpu = time.process_time() - cpu
            runner.close()
            getattr(builder, "close", lambda: None)()
        records = len(db.records(tuner.workload, tuner.target))
        seen = len(result.history) - result.reused
        compiles = [r.compile_seconds for r in result.history if r.compile_seconds]
        steady = arrivals[-1] - arrivals[0] if len(arrivals) > 1 else 0.0
        return {"trials": result.trials, "seconds": result.seconds, "per_minute": 60 * result.trials / result.seconds,
                "first_result_seconds": arrivals[0] - start if arrivals else None,
                "after_last_result_seconds": start + result.seconds - arrivals[-1] if arrivals else None,
                "steady_per_minute": 60 * (len(arrivals) - 1) / steady if steady > 0 else 0.0,
                "driver_cpu_seconds": cpu, "driver_ms_per_candidate": 1e3 * cpu / max(1, seen),
                "compile_seconds_mean": sum(compiles) / max(1, len(compiles)),
                "failures": result.failures, "environment_failures": result.environment_failures,
                "records": records, "lost": seen - records}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _demo(compiler, timer, jobs: int, size: int):
    from tensortune.backends import CBuilder, CRunner
    from tensortune.db import Workload
    from tensortune.demo.matmul import matmul_problem, matmul_space

    problem = matmul_problem(size, size, size)
    return (matmul_space(threads=1), CRunner(problem, timer), CBuilder(problem, compiler, jobs=jobs),
            Workload.make("bench.matmul_c", problem.source, {"size": size}))


def _conv(compiler, timer, jobs: int, size: int):
    from tensortune.autoschedule.api import Problem
    from tensortune.autoschedule.measure import CheckSpec, SketchBuilder, SketchRunner
    from tensortune.te import workloads

    problem = Problem.of(workloads.conv2d_nchw(1, 32, 28, 28, 32, 3, 3, padding=1))
    sp = problem.sketch_space
    spec = CheckSpec.of(problem.outputs, problem.args, problem.workload.source_hash)
    return (sp.space, SketchRunner(spec, timer=timer), SketchBuilder(sp, problem.args, compiler=compiler, jobs=jobs),
            problem.workload)


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
    parser.add_argument("--workloads", default="demo64,conv",
                        help=f"compile-bound C workloads, comma-separated: {', '.join(WORKLOADS)}")
    parser.add_argument("--trials", type=int, default=96, help="candidates measured per run of demo64")
    parser.add_argument("--conv-trials", type=int, default=None,
                        help="candidates measured per run of conv (default: --trials)")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved repetitions of each pair of runs")
    parser.add_argument("--local-nodes", default=None,
                        help="cluster sizes at which the local executor runs too (default: every size)")
    parser.add_argument("--size", type=int, default=64, help="M = N = K of demo64 (small: compile-bound)")
    parser.add_argument("--triton", action="store_true", help="run the Triton part without CUDA (interpreter)")
    parser.add_argument("--no-triton", action="store_true", help="skip the Triton part even with CUDA")
    parser.add_argument("--no-c", action="store_true", help="skip the C part (run the Triton part alone)")
    parser.add_argument("--triton-trials", type=int, default=32)
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args()

    sizes = [int(n) for n in args.nodes.split(",")]
    unknown = sorted(set(args.workloads.split(",")) - set(WORKLOADS))
    if unknown:
        parser.error(f"unknown workload(s) {unknown}; known: {', '.join(WORKLOADS)}")
    cores = os.cpu_count() or 1
    per_node = args.cpus_per_node or max(1, cores // max(sizes))
    out: dict = {"machine": {"cpus": cores, "platform": platform.platform(), "python": sys.version.split()[0]},
                 "args": vars(args), "cpus_per_node": per_node,
                 "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                 "workloads": {w: WORKLOADS[w] for w in args.workloads.split(",")}, "c": {}, "triton": {}}
    if not args.no_c:
        _c_part(args, sizes, per_node, out)
        _write(args.json, out, sizes)  # each part's figures are kept even if the next part is cut short
    _triton_part(args, per_node, out)
    table = _write(args.json, out, sizes)
    print()
    print("steady: results a minute from the first result to the last (a run's start-up left out), Ray;")
    print("first s: seconds to the first result, Ray / local; driver ms: the driver's own CPU time per candidate")
    print(f"{'workload':8s} {'nodes':>5s} {'cores':>5s} {'ray /min':>9s} {'local /min':>10s} {'ray/local':>9s} "
          f"{'scaling':>8s} {'steady':>7s} {'st.scal':>7s} {'first s':>11s} {'driver ms':>11s} {'compile s':>9s} "
          f"{'lost':>4s}")
    for row in table:
        local = f"{row['local']:10.0f}" if row["local"] else f"{'-':>10s}"
        ratio = f"{row['ray'] / row['local']:9.2f}" if row["local"] else f"{'-':>9s}"
        print(f"{row['workload']:8s} {row['nodes']:5d} {row['cores']:5d} {row['ray']:9.0f} {local} "
              f"{ratio} {row['scaling']:>8s} {row['steady']:7.0f} {row['steady_scaling']:>7s} "
              f"{row['first_s']:>11s} {row['driver_ms']:>11s} {row['compile_s']:>9s} {row['lost']:4d}")


def _c_part(args: argparse.Namespace, sizes: list[int], per_node: int, out: dict) -> None:
    from tensortune.distributed import RayExecutor
    from tensortune.distributed.local_cluster import LocalCluster
    from tensortune.measure import LocalExecutor

    names = args.workloads.split(",")
    trials = {"demo64": args.trials, "conv": args.conv_trials or args.trials}
    print(f"C workloads {names}, trials {trials}, {per_node} cores a node, {args.rounds} rounds", flush=True)
    cluster = LocalCluster(workers=0, cpus_per_worker=per_node, python_path=(HERE,)).start()
    try:
        executor = RayExecutor(cluster.address)
        for n in sizes:
            while len(cluster.nodes) < n:
                cluster.add_worker()
            for w in names:
                c_run(executor, per_node * n, max(8, per_node * n), 999, w, args.size)  # warm-up: actors start
                rows: dict[str, list[dict]] = {"ray": [], "local": []}
                sides = ("ray", "local") if local_too(args, n) else ("ray",)
                for r in range(args.rounds):
                    for name in (sides if r % 2 == 0 else sides[::-1]):
                        ex = executor if name == "ray" else LocalExecutor()
                        row = c_run(ex, per_node * n, trials[w], r, w, args.size)
                        rows[name].append(row)
                        print(f"  {w} {n} node(s) {name:5s} round {r}: {row['per_minute']:.0f}/min "
                              f"({row['trials']} in {row['seconds']:.1f} s, "
                              f"first after {row['first_result_seconds']:.1f} s, "
                              f"steady {row['steady_per_minute']:.0f}/min, driver {row['driver_ms_per_candidate']:.1f} "
                              f"ms/candidate, compile {row['compile_seconds_mean']:.2f} s, lost {row['lost']})",
                              flush=True)
                out["c"].setdefault(w, {})[str(n)] = rows
                _write(args.json, out, sizes)  # kept if a later size is cut short
        executor.close()
    finally:
        cluster.stop()


def local_too(args: argparse.Namespace, nodes: int) -> bool:
    """Whether the local executor runs beside Ray at this cluster size."""
    return args.local_nodes is None or str(nodes) in args.local_nodes.split(",")


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
    for w, by_size in out["c"].items():
        first = by_size.get(str(sizes[0]))
        one = mean(first["ray"]) / sizes[0] if first else 0.0
        one_steady = mean(first["ray"], "steady_per_minute") / sizes[0] if first else 0.0
        for n in sizes:
            if str(n) not in by_size:
                continue
            rows = by_size[str(n)]
            ray, steady = mean(rows["ray"]), mean(rows["ray"], "steady_per_minute")
            table.append({"workload": w, "nodes": n, "cores": n * out["cpus_per_node"], "ray": ray,
                          "local": mean(rows["local"]) if rows["local"] else None, "scaling": f"{ray / (one * n):.2f}" if one else "-",
                          "steady": steady,
                          "steady_scaling": f"{steady / (one_steady * n):.2f}" if one_steady else "-",
                          "first_s": f"{mean(rows['ray'], 'first_result_seconds'):.1f} / "
                                     f"{_mean_or_dash(rows['local'], 'first_result_seconds')}",
                          "driver_ms": f"{mean(rows['ray'], 'driver_ms_per_candidate'):.1f} / "
                                       f"{_mean_or_dash(rows['local'], 'driver_ms_per_candidate')}",
                          "compile_s": f"{mean(rows['ray'] + rows['local'], 'compile_seconds_mean'):.2f}",
                          "lost": sum(r["lost"] for r in rows["ray"] + rows["local"])})
    if out["triton"]:
        rows = out["triton"]["1"]
        table.append({"workload": "Triton", "nodes": 1, "cores": out["cpus_per_node"], "ray": mean(rows["ray"]),
                      "local": mean(rows["local"]), "scaling": "-", "steady": 0.0, "steady_scaling": "-",
                      "first_s": "-", "driver_ms": "-", "compile_s": "-", "lost": 0})
    return table


def _mean_or_dash(rows: list[dict], key: str) -> str:
    return f"{mean(rows, key):.1f}" if rows else "-"


def _cuda() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # under `timeout`: stop the cluster, keep the JSON
    main()
