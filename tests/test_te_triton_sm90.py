"""The grouped-convolution kernels and the tail-split and stream-K matmuls compile for Hopper (sm_90) without a GPU.

The interpreter runs the kernels' arithmetic but not Triton's compiler: a branch whose
two sides yield different types, a scalar where a block is needed or a shared-memory
budget overrun only shows when the kernel is compiled for the real target. This
compiles one configuration of each new kind of kernel at the H100 sizes it is tuned
for, through the same builder the GPU search uses.
"""

from __future__ import annotations

import importlib.util

import pytest

pytest.importorskip("torch")
if importlib.util.find_spec("triton") is None:
    pytest.skip("triton is not installed", allow_module_level=True)

from tensortune.backends.triton import GenOptions, analyze  # noqa: E402
from tensortune.backends.triton.runtime import GeneratedBuilder, Generator  # noqa: E402
from tensortune.space import Config  # noqa: E402
from tensortune.te import workloads  # noqa: E402

from test_te_triton_conv import depthwise_nhwc, grouped_conv_nchw  # noqa: E402

CASES = [
    ("depthwise-nchw", lambda: workloads.depthwise_conv2d_nchw(32, 256, 56, 56, 3, 3, 1, 1, "float16").output,
     {"BLOCK_P": 1024, "BLOCK_C": 2, "num_warps": 8}),
    ("grouped-fma-nchw", lambda: grouped_conv_nchw(32, 256, 56, 56, 256, 64, bias_relu=True),
     {"BLOCK_P": 256, "BLOCK_C": 4, "num_warps": 4, "num_stages": 2}),
    ("depthwise-nhwc", lambda: depthwise_nhwc(32, 56, 56, 256), {"BLOCK_P": 32, "BLOCK_C": 64, "num_warps": 4}),
    ("grouped-dot", lambda: grouped_conv_nchw(32, 256, 28, 28, 256, 8),
     {"BLOCK_M": 32, "BLOCK_N": 128, "BLOCK_K": 32, "RELAYOUT": True, "num_warps": 4, "num_stages": 3}),
    ("tail-split-tma", lambda: workloads.matmul(3072, 3072, 3072, "float16").output,
     {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "TMA": True, "TAIL_SPLIT": 4, "num_warps": 8,
      "num_stages": 3}),
    ("tail-split-persistent-tma", lambda: workloads.matmul(3072, 3072, 3072, "float16").output,
     {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "TMA": True, "PERSISTENT": True, "TAIL_SPLIT": 4,
      "num_warps": 8, "num_stages": 3}),
    ("tail-split-epilogue", lambda: workloads.matmul_bias_relu(2304, 2304, 2304, "float16").output,
     {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "TAIL_SPLIT": 3, "EPILOGUE_SPLIT": 2,
      "num_warps": 8, "num_stages": 3}),
    ("stream-k-epilogue", lambda: workloads.matmul_bias_relu(2304, 2304, 2304, "float16").output,
     {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "PERSISTENT": True, "STREAM_K": 1,
      "SK_PER_SM": 2, "EPILOGUE_SPLIT": 2, "num_warps": 4, "num_stages": 3}),
]


@pytest.mark.slow
def test_new_kernels_compile_for_sm90(tmp_path, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    failures = []
    for name, make, config in CASES:
        plan = analyze(make())
        generator = Generator(plan, GenOptions(), str(tmp_path / "kernels"), name)
        builder = GeneratedBuilder(generator, target=("cuda", 90, 32), jobs=1, max_shared=232448,
                                   env={"TRITON_CACHE_DIR": str(tmp_path / "cache")})
        try:
            (result,) = list(builder.build([Config(config)]))
        finally:
            builder.close()
        if not result.ok:
            failures.append(f"{name}: {result.message}")
    assert not failures, "\n".join(failures)
