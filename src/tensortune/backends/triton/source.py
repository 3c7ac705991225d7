"""What every generated module shares: its arguments, header, index decomposition, launcher.

A generated module is plain Python that imports triton: one or two `@triton.jit` kernels
with the configuration baked in (block sizes are constants, so the generator drops the
masks a divisible shape does not need), a `launch(*tensors)` that starts them, and a
`precompile(*dtypes)` that compiles them without a GPU launch (for the parallel compile
pool). `print(source.text)` shows it; `source.save(path)` writes it.

Example:
    >>> from tensortune.te import workloads
    >>> from tensortune.backends.triton.patterns import analyze
    >>> plan = analyze(workloads.softmax(4, 8).output)
    >>> [a.pointer for a in kernel_args(plan, GenOptions())]
    ['p0_X', 'p1_softmax']
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...te.dtype import TEError
from ...te.tensor import Tensor
from .exprgen import TL_TYPES
from .patterns import Axis, GpuPlan

CODEGEN_VERSION = "2"
TORCH_TYPES = {"float16": "torch.float16", "bfloat16": "torch.bfloat16", "float32": "torch.float32",
               "int32": "torch.int32"}


class CodegenError(TEError):
    """A configuration the generator cannot emit (the candidate's compile error)."""


@dataclass(frozen=True)
class GenOptions:
    """How to generate: `half` is the storage type of the graph's float16 tensors
    ("float16" or "bfloat16"; a graph's bfloat16 tensors are bfloat16 either way, so
    a graph may mix the two); `interpret` works around the Triton interpreter (it
    multiplies bfloat16 `tl.dot` operands wrongly, so they are widened to float32
    there); `allow_tf32` lets float32 contractions use TF32 tensor cores."""

    half: str = "float16"
    interpret: bool = False
    allow_tf32: bool = False

    def __post_init__(self) -> None:
        if self.half not in ("float16", "bfloat16"):
            raise TEError(f"half must be 'float16' or 'bfloat16', got {self.half!r}")

    def storage(self, t: Tensor) -> str:
        return self.stored(t.dtype)

    def stored(self, dtype: str) -> str:
        """The type values of `dtype` are stored (and fed to tl.dot) in."""
        return self.half if dtype == "float16" else dtype


@dataclass(frozen=True)
class KernelArg:
    tensor: Tensor
    pointer: str
    dtype: str  # storage type

    @property
    def name(self) -> str:
        return self.tensor.name


def kernel_args(plan: GpuPlan, options: GenOptions) -> list[KernelArg]:
    """The tensors `launch` takes: inputs in graph order, then the output."""
    tensors = list(plan.inputs) + [plan.output]
    return [KernelArg(t, f"p{i}_{re.sub(r'[^0-9A-Za-z_]', '_', t.name)}", options.storage(t))
            for i, t in enumerate(tensors)]


@dataclass(frozen=True)
class KernelSource:
    """A generated module for one configuration."""

    text: str
    args: tuple[str, ...]  # tensor names launch() takes, in order
    dtypes: tuple[str, ...]  # their storage types
    kernels: tuple[str, ...]
    config: Mapping[str, Any] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()[:16]

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.text)
        return path

    def __str__(self) -> str:
        return self.text


def decompose(flat: str, axes: Sequence[Axis], expand: str = "", suffix: str = "") -> list[str]:
    """Lines binding each axis variable from a flat index (row-major over `axes`)."""
    lines = []
    inner = math.prod(a.extent for a in axes)
    for d, a in enumerate(axes):
        inner //= a.extent
        expr = flat
        if inner > 1:
            expr = f"({expr} // {inner})"
        if d > 0 and a.extent > 1:
            expr = f"({expr} % {a.extent})"
        if a.extent == 1:
            expr = f"({flat} * 0)"
        lines.append(f"{a.var.name}{suffix} = {expr}{expand}")
    return lines


def names_of(axes: Iterable[Axis], suffix: str = "") -> dict[Any, str]:
    return {a.var: a.var.name + suffix for a in axes}


def shapes_of(axes: Iterable[Axis], dim: str) -> dict[Any, str]:
    return {a.var: dim for a in axes}


def ranges_of(axes: Iterable[Axis]) -> dict[Any, tuple[int, int]]:
    return {a.var: (0, a.extent - 1) for a in axes}


def indent(lines: Iterable[str], level: int) -> list[str]:
    pad = "    " * level
    return [pad + line if line else line for line in lines]


def module_text(plan: GpuPlan, config: Mapping[str, Any], kernels: Sequence[str], launch: Sequence[str],
                precompile: Sequence[str], args: Sequence[KernelArg], helpers: Sequence[str] = ()) -> str:
    """The whole module: header, kernels, launcher and precompile function."""
    described = "\n".join("    " + line for line in plan.describe().splitlines())
    names = ", ".join(a.name for a in args)
    arg_list = ", ".join(a.pointer for a in args)
    head = [
        f'"""Triton kernel generated by tensortune (codegen {CODEGEN_VERSION}) for the {plan.kind} pattern.',
        "",
        "Graph:",
        described,
        "",
        f"Configuration: {json.dumps(dict(config), sort_keys=True)}",
        f"Call launch({names}) with contiguous CUDA tensors of these storage types:",
        "    " + ", ".join(f"{a.name}: {a.dtype}{list(a.tensor.shape)}" for a in args),
        '"""',
        "",
        "import torch",
        "import triton",
        "import triton.language as tl",
        "",
        f"ARGS = {tuple(a.name for a in args)!r}",
        f"DTYPES = {tuple(a.dtype for a in args)!r}",
        f"CONFIG = {dict(sorted(dict(config).items()))!r}",
        "",
    ]
    body = list(head)
    for k in kernels:
        body += ["", k.rstrip(), ""]
    body += list(helpers)
    body += ["", f"def launch({arg_list}):", *indent(launch, 1), ""]
    body += ["", f"def precompile({arg_list}):",
             '    """Compile every kernel without launching; the arguments are torch dtypes."""',
             *indent(precompile, 1), ""]
    return "\n".join(body)


NUM_SMS_HELPER = [
    "",
    "_SMS = {}",
    "",
    "",
    "def _num_sms(t):",
    "    if not t.is_cuda:",
    "        return 4",
    "    index = t.device.index if t.device.index is not None else torch.cuda.current_device()",
    "    if index not in _SMS:",
    "        _SMS[index] = torch.cuda.get_device_properties(index).multi_processor_count",
    "    return _SMS[index]",
    "",
]


ALLOCATOR_HELPER = [
    "",
    "",
    "def _scratch_allocator(like):",
    '    """Global scratch for device-side tensor descriptors, on the output\'s device."""',
    "    def alloc(size, alignment, stream):",
    "        return torch.empty(size, dtype=torch.int8, device=like.device)",
    "    return alloc",
    "",
]


def tl_type(dtype: str) -> str:
    return TL_TYPES[dtype]


def cdiv(a: int, b: int) -> int:
    return -(-a // b)
