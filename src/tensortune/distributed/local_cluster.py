"""A Ray cluster of separate node processes on this machine (loopback), for trying the Ray
executor, for the tests and for the scaling benchmark.

Each node is a `ray start --block` process leading its own process group, with a share of
the cores and this machine's target resources; `kill_worker` ends one node's whole group
at once, as a machine that loses power would.

Example:
    >>> with LocalCluster(workers=2, cpus_per_worker=2) as cluster:  # doctest: +SKIP
    ...     tensortune.tune(fn, space, executor=RayExecutor(cluster.address))
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ..db import Target
from .resources import merged_resources

OBJECT_STORE_BYTES = 100 * 1024 * 1024  # per node: candidates and results are small
FAST_FAILURE_DETECTION = {  # a lost node is noticed in about 3 s instead of about 30 s
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _descendants(root: int) -> list[int]:
    """Every process below `root`, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _ray_command() -> list[str]:
    ray = Path(sys.executable).with_name("ray")
    return [str(ray)] if ray.exists() else [sys.executable, "-m", "ray.scripts.scripts"]


class LocalCluster:
    """A head node (no CPUs: it only coordinates) and `workers` worker nodes, each with
    `cpus_per_worker` CPUs and `slots` measurement slots of this machine's target.
    `python_path`: folders the nodes import from besides this tensortune (the module of a
    reference function, say). `gpus_per_worker`: GPUs each worker node offers (every node
    sees all of this machine's GPUs; Ray hands them out). `extra_targets`: other targets
    every worker node serves, with `slots` measurement slots each (a GPU's target, or
    Triton's interpreter, next to the CPU's)."""

    def __init__(self, workers: int = 2, cpus_per_worker: int = 1, slots: int = 1, target: Target | None = None,
                 start_timeout: float = 120.0, python_path: tuple[str, ...] = (), gpus_per_worker: int = 0,
                 extra_targets: tuple[Target, ...] = ()) -> None:
        self.workers_wanted = workers
        self.cpus_per_worker = cpus_per_worker
        self.gpus_per_worker = gpus_per_worker
        self.slots = slots
        self.target = target or Target.cpu()
        self.extra_targets = tuple(extra_targets)
        self.start_timeout = start_timeout
        self.python_path = tuple(python_path)
        self.temp_dir = tempfile.mkdtemp(prefix="ttray-", dir="/tmp")  # short: Ray's socket paths have a limit
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.head: subprocess.Popen[bytes] | None = None
        self.nodes: list[subprocess.Popen[bytes]] = []
        self.node_ids: list[str] = []  # the Ray node id of each worker process, in order
        self.env = self._environment()

    def _environment(self) -> dict[str, str]:
        # loopback only: no token authentication (Ray turns it on once ~/.ray/auth_token exists)
        env = dict(os.environ, **FAST_FAILURE_DETECTION, RAY_DISABLE_USAGE_STATS="1", RAY_AUTH_MODE="disabled")
        package_root = str(Path(__file__).resolve().parents[2])  # nodes import this tensortune
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, *self.python_path, env.get("PYTHONPATH", ""))
                                            if p)
        return env

    def _spawn(self, args: list[str], log: str) -> subprocess.Popen[bytes]:
        out = open(Path(self.temp_dir) / log, "wb")
        return subprocess.Popen(_ray_command() + args, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)

    def start(self) -> LocalCluster:
        """Start the head, then the workers one at a time (several raylets joining at
        once can time out on a busy machine); on any failure, everything is stopped."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> LocalCluster:
        common = ["--node-ip-address", "127.0.0.1", "--object-store-memory", str(OBJECT_STORE_BYTES),
                  "--disable-usage-stats", "--block"]
        self.head = self._spawn(["start", "--head", "--port", str(self.port), "--num-cpus", "0", "--num-gpus", "0",
                                 "--temp-dir", self.temp_dir, "--include-dashboard", "false",
                                 *common], "head.log")
        self._wait_for_port()
        for _ in range(self.workers_wanted):
            self.add_worker()
        return self

    def add_worker(self) -> int:
        """Start one more worker node and wait until it has joined; returns its index
        (for `kill_worker`; its Ray node id is `node_ids[index]`)."""
        known = set(self.node_ids)
        resources = merged_resources({t: self.slots for t in (self.target, *self.extra_targets)})
        node = self._spawn(["start", "--address", self.address, "--node-ip-address", "127.0.0.1",
                            "--num-cpus", str(self.cpus_per_worker), "--num-gpus", str(self.gpus_per_worker),
                            "--resources", json.dumps(resources), "--object-store-memory", str(OBJECT_STORE_BYTES),
                            "--disable-usage-stats", "--block"], f"worker{len(self.nodes)}.log")
        self.nodes.append(node)
        self.node_ids.append("")
        index = len(self.nodes) - 1
        ray = self.connect()
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            joined = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU", 0) > 0
                      and n["NodeID"] not in known]
            if joined:
                self.node_ids[index] = joined[0]
                return index
            if node.poll() is not None:
                raise RuntimeError(f"Ray worker node {index} exited: {self.log(f'worker{index}.log')[-2000:]}")
            time.sleep(0.3)
        raise TimeoutError(f"Ray worker node {index} did not join in {self.start_timeout:.0f} s")

    def _wait_for_port(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.head is not None and self.head.poll() is not None:
                raise RuntimeError(f"the Ray head node exited: {self.log('head.log')[-2000:]}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.2)
        raise TimeoutError(f"the Ray head node did not listen on {self.address} in {self.start_timeout:.0f} s")

    def connect(self) -> Any:
        """This process joins the cluster (once; without token authentication, like the
        nodes); returns the `ray` module."""
        import ray
        if not ray.is_initialized():
            os.environ["RAY_AUTH_MODE"] = "disabled"
            ray.init(address=self.address, logging_level="WARNING", log_to_driver=False)
        return ray

    def kill_node(self, node_id: str) -> None:
        """End the worker node whose Ray node id is `node_id` (see `kill_worker`)."""
        self.kill_worker(self.node_ids.index(node_id))

    def kill_worker(self, index: int) -> None:
        """End worker node `index` at once: its raylet, its workers and its actors (Ray's
        workers lead process groups of their own, so they are found as descendants)."""
        self._kill_tree(self.nodes[index])

    @staticmethod
    def _kill_tree(proc: subprocess.Popen[bytes]) -> None:
        victims = _descendants(proc.pid)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass

    def log(self, name: str) -> str:
        try:
            return (Path(self.temp_dir) / name).read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        try:
            import ray
            if ray.is_initialized():
                ray.shutdown()
        except ImportError:
            pass
        for proc in self.nodes + ([self.head] if self.head else []):
            self._kill_tree(proc)
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
