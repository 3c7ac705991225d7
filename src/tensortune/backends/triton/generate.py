"""From a plan and a configuration to a generated module, and loading it to launch.

`generate(plan, config, options)` returns the `KernelSource` of any plan; `load(path)`
imports a saved module under a name of its own (Triton reads a kernel's source from its
file, so generated kernels always live in files), once per process.

Example:
    >>> from tensortune.te import workloads
    >>> from tensortune.backends.triton.patterns import analyze
    >>> src = generate(analyze(workloads.transpose(8, 4).output), {"BLOCK": 32}, GenOptions())
    >>> src.kernels
    ('tt_elementwise',)
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from .gen_attention import generate_attention
from .gen_contraction import generate_contraction
from .gen_conv import generate_grouped_conv
from .gen_rows import generate_elementwise, generate_rows
from .patterns import ContractionPlan, ElementwisePlan, GpuPlan, RowsPlan
from .patterns_attention import AttentionPlan
from .patterns_conv import GroupedConvPlan
from .source import GenOptions, KernelSource

_LOADED: dict[str, ModuleType] = {}


def generate(plan: GpuPlan, config: Mapping[str, Any], options: GenOptions | None = None) -> KernelSource:
    options = options or GenOptions()
    config = dict(config)
    if isinstance(plan, ContractionPlan):
        return generate_contraction(plan, config, options)
    if isinstance(plan, AttentionPlan):
        return generate_attention(plan, config, options)
    if isinstance(plan, GroupedConvPlan):
        return generate_grouped_conv(plan, config, options)
    if isinstance(plan, RowsPlan):
        return generate_rows(plan, config, options)
    if isinstance(plan, ElementwisePlan):
        return generate_elementwise(plan, config, options)
    raise TypeError(f"no generator for {type(plan).__name__}")


def load(path: str | Path) -> ModuleType:
    """Import a generated module from its file (cached by path)."""
    key = str(Path(path).resolve())
    module = _LOADED.get(key)
    if module is None:
        name = "tensortune_generated_" + Path(key).stem.replace("-", "_")
        spec = importlib.util.spec_from_file_location(name, key)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import generated kernel {key}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        _LOADED[key] = module
    return module
