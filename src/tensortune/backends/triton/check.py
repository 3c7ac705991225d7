"""Checking one generated configuration against the NumPy interpreter of its expressions.

`relative_error(output, config)` generates the configuration's module, runs it on random
inputs (CPU tensors under TRITON_INTERPRET=1, or CUDA tensors on a GPU), and returns
max |kernel - te.evaluate| / max |te.evaluate|. Triton decides at import whether it
interprets, so tests call this in a worker process started with TRITON_INTERPRET=1.

Example:
    >>> from tensortune.te import workloads
    >>> from tensortune.measure import IsolatedWorker
    >>> with IsolatedWorker(timeout=120, env={"TRITON_INTERPRET": "1"}) as w:   # doctest: +SKIP
    ...     w.call(relative_error, workloads.softmax(4, 8).output, {"BLOCK_R": 2, "BLOCK_C": 8}) < 1e-2
    True
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...te.interpret import evaluate
from ...te.tensor import Tensor
from .generate import generate, load
from .patterns import analyze
from .source import GenOptions, KernelSource


def relative_error(output: Tensor, config: Mapping[str, Any], *, half: str = "float16", seed: int = 0,
                   directory: str | None = None, inputs: Mapping[str, np.ndarray] | None = None) -> float:
    """Max relative error of the configuration's kernel on fresh random inputs (inf if any
    output element is unwritten or not finite); `inputs` gives some inputs' values instead
    (bool inputs are otherwise drawn True with probability 0.7)."""
    interpret = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
    src = generate(analyze(output), config, GenOptions(half=half, interpret=interpret))
    return source_error(output, src, seed=seed, directory=directory, inputs=inputs)


def source_error(output: Tensor, src: KernelSource, *, seed: int = 0, directory: str | None = None,
                 inputs: Mapping[str, np.ndarray] | None = None) -> float:
    """`relative_error` of a given module (also a hand-edited one: a check must be able to fail)."""
    import torch

    interpret = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
    device = "cpu" if interpret else "cuda"
    plan = analyze(output)
    module = load(src.save(os.path.join(directory or tempfile.mkdtemp(prefix="tt-check-"), f"k_{src.digest}.py")))
    rng = np.random.default_rng(seed)
    arrays, tensors = {}, []
    for t, dtype in zip(plan.inputs, src.dtypes):
        if inputs is not None and t.name in inputs:
            x = torch.from_numpy(np.asarray(inputs[t.name])).to(getattr(torch, dtype))
        elif dtype == "bool":
            x = torch.from_numpy(rng.random(t.shape) < 0.7)
        else:
            x = torch.from_numpy(rng.standard_normal(t.shape).astype("float32")).to(getattr(torch, dtype))
        tensors.append(x.to(device))
        arrays[t.name] = x.numpy() if dtype == "bool" else x.float().numpy()
    out = torch.full(output.shape, float("nan"), dtype=getattr(torch, src.dtypes[-1]), device=device)
    module.launch(*tensors, out)
    got = out.float().cpu().numpy()
    want = evaluate(output, arrays).astype("float64")
    if not np.isfinite(got).all():
        return float("inf")
    return float(np.abs(got - want).max()) / max(1e-6, float(np.abs(want).max()))
