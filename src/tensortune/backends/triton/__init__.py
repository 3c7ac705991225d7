"""Tensor expressions on NVIDIA GPUs: graph patterns lowered to generated Triton kernels.

`analyze(output)` finds the kernel pattern of an expression graph (a contraction with
fused prologue and epilogue, a depthwise or grouped convolution, attention, row
reductions, or elementwise work); `sketch(plan)` gives
its tuning space; `generate(plan, config)` the Triton module of one configuration; `autoschedule_cuda(output)`
searches the space on the GPU and returns a `CudaKernel` callable on torch tensors.

Example:
    >>> from tensortune.te import workloads
    >>> plan = analyze(workloads.softmax(64, 128, "float16").output)
    >>> src = generate(plan, sketch(plan).seeds[0])
    >>> "def tt_rows" in src.text
    True
"""

from .generate import generate, load
from .kernel import CudaKernel, Tuning
from .patterns import ContractionPlan, ElementwisePlan, GpuPlan, PatternError, RowsPlan, analyze
from .patterns_attention import AttentionPlan
from .patterns_conv import GroupedConvPlan
from .sketches import Sketch, sketch
from .source import CodegenError, GenOptions, KernelSource
from .tune import SeededStrategy, autoschedule_cuda

__all__ = ["AttentionPlan", "CodegenError", "ContractionPlan", "CudaKernel", "ElementwisePlan", "GenOptions", "GpuPlan",
           "GroupedConvPlan",
           "KernelSource", "PatternError", "RowsPlan", "SeededStrategy", "Sketch", "Tuning", "analyze",
           "autoschedule_cuda", "generate", "load", "sketch"]
