"""Targets as Ray resources: a candidate is built and measured only on a node of its target.

Every node of a target advertises two custom resources (`node_resources`):
`tensortune-<kind>-<digest>` (its presence: a build for that target's CPU takes one unit)
and `tensortune-<kind>-<digest>-measure` (its measurement slots, one per CPU socket or
GPU: a measuring actor takes one). The digest is of the whole `Target` (device, arch,
compiler and library versions), so nodes that differ in any of these never share records.

Example:
    >>> from tensortune.db import Target
    >>> t = Target.make("cpu", "Some CPU", "x86_64x16")
    >>> sorted(node_resources(t, slots=2).items())[1]
    ('tensortune-cpu-9fd9727acf8c-measure', 2)
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from ..db import Target

PRESENCE = 1000  # units of the presence resource each node advertises (concurrent builds it may hold)


def target_resource(target: Target) -> str:
    """The resource every node of `target` advertises."""
    text = json.dumps([target.kind, target.device, target.arch, target.versions_json])
    kind = re.sub(r"[^a-z0-9]+", "", target.kind.lower()) or "target"
    return f"tensortune-{kind}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def measure_resource(target: Target) -> str:
    """The resource that counts `target`'s measurement slots (one per socket or GPU)."""
    return target_resource(target) + "-measure"


def node_resources(target: Target, slots: int = 1) -> dict[str, int]:
    """What `ray start --resources` takes for a node of `target` with `slots` measurers."""
    if slots < 1:
        raise ValueError(f"a node needs at least one measurement slot, got {slots}")
    return {target_resource(target): PRESENCE, measure_resource(target): slots}


def merged_resources(slots_by_target: dict[Target, int]) -> dict[str, int]:
    """`node_resources` of several targets one node serves (its CPU, its GPUs).

    Example:
        >>> from tensortune.db import Target
        >>> len(merged_resources({Target.make("cpu", "A", "x"): 1, Target.make("cuda", "H100", "sm_90"): 2}))
        4
    """
    out: dict[str, int] = {}
    for target, slots in slots_by_target.items():
        out.update(node_resources(target, slots))
    return out


GPU_KINDS = ("cuda", "rocm")


def measures_on_gpu(target: Target) -> bool:
    """Whether a measuring actor of `target` owns a GPU (Ray sets its CUDA_VISIBLE_DEVICES)."""
    return target.kind in GPU_KINDS


def gpu_slots() -> dict[Target, int]:
    """The targets of this machine's GPUs, each with how many GPUs it has (empty without
    torch or a GPU)."""
    try:
        import torch
    except ImportError:
        return {}
    if not torch.cuda.is_available():
        return {}
    from ..frontends.triton.target import gpu_target

    out: dict[Target, int] = {}
    for index in range(torch.cuda.device_count()):
        target = gpu_target(index)
        out[target] = out.get(target, 0) + 1
    return out


def local_targets() -> dict[Target, int]:
    """This machine's targets with their measurement slots, for a Ray started in-process:
    the CPU (one), each kind of GPU (one per GPU), Triton's interpreter under
    TRITON_INTERPRET=1 (one)."""
    import os

    out = {Target.cpu(): 1, **gpu_slots()}
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        from ..frontends.triton.target import interpreter_target
        out[interpreter_target()] = 1
    return out


def describe(target: Target) -> str:
    return f"{target.kind} {target.device} ({target.arch})"


def start_hint(target: Target) -> str:
    """How to start a node of `target` (what an error about a missing one says)."""
    return (f"start each node of {describe(target)} with "
            f"ray start ... --resources '{json.dumps(node_resources(target))}' "
            "(`tensortune cluster resources` prints it on that node)")


def nodes_of(target: Target, nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The alive nodes (as `ray.nodes()` lists them) that advertise `target`."""
    name = target_resource(target)
    return [n for n in nodes if n.get("Alive") and n.get("Resources", {}).get(name, 0) > 0]
