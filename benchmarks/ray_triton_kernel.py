"""The Triton workload of benchmarks/ray_scaling.py: a tiled matmul whose block sizes and
warps are tuned with `tensortune.tune`, imported by name on the Ray nodes.

Each process compiles into a Triton cache of its own (a fresh temporary folder), so that
every candidate is compiled as it would be the first time. On a machine without CUDA the
kernel runs under Triton's interpreter (TRITON_INTERPRET=1), on the CPU.
"""

from __future__ import annotations

import os
import tempfile

SIZES = {"cuda": 1024, "cpu": 32}  # Triton's interpreter on the CPU is thousands of times slower
_STATE: dict = {}


def _setup() -> dict:
    if not _STATE:
        os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="tt-triton-cache-")
        import torch
        if not torch.cuda.is_available():
            os.environ.setdefault("TRITON_INTERPRET", "1")
        import triton
        import triton.language as tl

        @triton.jit
        def matmul_kernel(a, b, c, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
            pid_m, pid_n = tl.program_id(0), tl.program_id(1)
            rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
            rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for k0 in range(0, K, BLOCK_K):
                rk = k0 + tl.arange(0, BLOCK_K)
                x = tl.load(a + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
                y = tl.load(b + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
                acc += tl.dot(x, y, input_precision="ieee")  # the check wants float32, not TF32
            tl.store(c + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))

        device = "cuda" if torch.cuda.is_available() else "cpu"
        size = SIZES[device]
        gen = torch.Generator(device="cpu").manual_seed(0)
        a = torch.randn(size, size, generator=gen).to(device)
        b = torch.randn(size, size, generator=gen).to(device)
        _STATE.update(torch=torch, triton=triton, kernel=matmul_kernel, a=a, b=b, c=torch.empty_like(a),
                      cuda=device == "cuda", size=size)
    return _STATE


def matmul(BLOCK_M: int, BLOCK_N: int, BLOCK_K: int, num_warps: int):
    """C = A @ B with one configuration; returns C on the CPU (for the check)."""
    s = _setup()
    n = s["size"]
    grid = (s["triton"].cdiv(n, BLOCK_M), s["triton"].cdiv(n, BLOCK_N))
    s["kernel"][grid](s["a"], s["b"], s["c"], n, n, n, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                      num_warps=num_warps)
    if s["cuda"]:
        s["torch"].cuda.synchronize()
    return s["c"].cpu().numpy()


def reference():
    s = _setup()
    return (s["a"].double() @ s["b"].double()).float().cpu().numpy()


def space(small: bool = False):
    from tensortune.space import Space
    if small:
        return Space({"BLOCK_M": [16, 32], "BLOCK_N": [16, 32], "BLOCK_K": [16, 32], "num_warps": [1, 2]})
    return Space({"BLOCK_M": [16, 32, 64, 128], "BLOCK_N": [16, 32, 64, 128], "BLOCK_K": [16, 32, 64],
                  "num_warps": [1, 2, 4, 8]})
