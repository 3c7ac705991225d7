"""`CudaKernel`: a generated Triton kernel of an expression graph, called on torch tensors.

It checks the inputs (count, shape, storage type, device), makes them contiguous,
allocates the output, and launches the generated module of its configuration.
`kernel.source` is the module's text, `kernel.save(path)` writes it (the file runs on
its own: `launch(*inputs, out)`), `kernel.config` is the configuration, `kernel.tuning`
how it was found.

Example (under TRITON_INTERPRET=1 on the CPU, or on a GPU with CUDA tensors):
    >>> import torch, tempfile
    >>> from tensortune.te import workloads
    >>> k = CudaKernel.build(workloads.transpose(8, 4).output, {"BLOCK": 32},
    ...                      cache_dir=tempfile.mkdtemp())              # doctest: +SKIP
    >>> a = torch.randn(4, 8)                                           # doctest: +SKIP
    >>> bool((k(a) == a.T).all())                                       # doctest: +SKIP
    True
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...space import Config
from ...te.dtype import TEError
from ...te.tensor import Tensor
from .generate import load
from .patterns import GpuPlan, analyze
from .runtime import Generator
from .source import CODEGEN_VERSION, GenOptions, KernelSource


def default_cache_dir() -> Path:
    return Path.home() / ".cache" / "tensortune" / "te_cuda"


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def workload_digest(plan: GpuPlan, options: GenOptions) -> str:
    text = f"{CODEGEN_VERSION}\n{options}\n{plan.describe()}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Tuning:
    """How the kernel's configuration was chosen."""

    source: str  # "search", "database" or "given"
    trials: int = 0
    seconds: float = 0.0
    best_time: float = float("nan")
    failures: int = 0
    extra: Mapping[str, Any] = field(default_factory=dict)


class CudaKernel:
    """A compiled expression graph for NVIDIA GPUs (or Triton's interpreter on the CPU)."""

    def __init__(self, plan: GpuPlan, config: Config, generator: Generator, tuning: Tuning | None = None) -> None:
        self.plan = plan
        self.config = config
        self.generator = generator
        self.tuning = tuning or Tuning("given")
        self._source: KernelSource = generator.write(config)
        self._module = load(generator.path(config))
        self._torch_types: tuple[Any, ...] = ()

    @staticmethod
    def build(output: Tensor, config: Mapping[str, Any], *, half: str = "float16", allow_tf32: bool = False,
              cache_dir: str | os.PathLike[str] | None = None) -> "CudaKernel":
        """A kernel for one given configuration (no search)."""
        plan = analyze(output)
        options = GenOptions(half, interpreting(), allow_tf32)
        gen = Generator(plan, options, str(cache_dir or default_cache_dir()), workload_digest(plan, options))
        return CudaKernel(plan, Config(dict(config)), gen)

    @property
    def source(self) -> str:
        return self._source.text

    @property
    def path(self) -> Path:
        return self.generator.path(self.config)

    def save(self, path: str | os.PathLike[str]) -> Path:
        return self._source.save(path)

    @property
    def input_names(self) -> tuple[str, ...]:
        return self._source.args[:-1]

    def __call__(self, *inputs: Any, out: Any = None) -> Any:
        import torch

        if not self._torch_types:
            self._torch_types = tuple(getattr(torch, d) for d in self._source.dtypes)
        names = self.input_names
        if len(inputs) != len(names):
            raise TEError(f"{self.plan.output.name} takes {len(names)} inputs ({', '.join(names)}), "
                          f"got {len(inputs)}")
        args = []
        device = None
        for name, t, x, dtype in zip(names, self.plan.inputs, inputs, self._torch_types):
            if not isinstance(x, torch.Tensor):
                raise TEError(f"input {name!r} must be a torch tensor, got {type(x).__name__}")
            if tuple(x.shape) != t.shape:
                raise TEError(f"input {name!r} has shape {tuple(x.shape)}, expected {t.shape}")
            if x.dtype != dtype:
                raise TEError(f"input {name!r} is {x.dtype}; this kernel was built for {dtype}")
            if device is None:
                device = x.device
            elif x.device != device:
                raise TEError(f"input {name!r} is on {x.device}, the others on {device}")
            args.append(x if x.is_contiguous() else x.contiguous())
        shape, dtype = self.plan.output.shape, self._torch_types[-1]
        if out is None:
            out = torch.empty(shape, dtype=dtype, device=device)
        elif tuple(out.shape) != shape or out.dtype != dtype or not out.is_contiguous():
            raise TEError(f"out must be a contiguous {dtype} tensor of shape {shape}")
        self._module.launch(*args, out)
        return out

    def __repr__(self) -> str:
        return (f"CudaKernel({self.plan.output.name}: {self.plan.kind}, {dict(self.config)}, "
                f"from {self.tuning.source})")
