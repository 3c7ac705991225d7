"""Tensor expressions on NVIDIA GPUs: graph patterns lowered to generated Triton kernels.

`analyze(output)` finds the kernel pattern of an expression graph (a contraction with
fused prologue and epilogue, row reductions, or elementwise work); `sketch(plan)` gives
its tuning space; `generate(plan, config)` the Triton module of one configuration.

Example:
    >>> from tensortune.te import workloads
    >>> plan = analyze(workloads.softmax(64, 128, "float16").output)
    >>> src = generate(plan, sketch(plan).seeds[0])
    >>> "def tt_rows" in src.text
    True
"""

from .generate import generate, load
from .patterns import ContractionPlan, ElementwisePlan, GpuPlan, PatternError, RowsPlan, analyze
from .sketches import Sketch, sketch
from .source import CodegenError, GenOptions, KernelSource

__all__ = ["CodegenError", "ContractionPlan", "ElementwisePlan", "GenOptions", "GpuPlan", "KernelSource",
           "PatternError", "RowsPlan", "Sketch", "analyze", "generate", "load", "sketch"]
