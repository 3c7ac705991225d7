"""Small Triton kernels for the autotune tests (run under TRITON_INTERPRET=1 on the CPU).

This module is imported by the other tests and by the second process of the
persistence test, so the kernels' source (and so their records) is the same in both.
Its own tests check the kernels themselves, launched directly with one configuration.
"""

from __future__ import annotations

import os

import pytest

# Triton decides when a function is decorated whether it will be interpreted, and reads
# the variable again while interpreting: the kernels of this module are made with it set,
# the tests that use them set it (`interpret`), and other test modules see it as it was.
_WAS = os.environ.get("TRITON_INTERPRET")
os.environ["TRITON_INTERPRET"] = "1"

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                  stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr, BUG: tl.constexpr = 0):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
    for k in range(0, (K + BLOCK_K - 1) // BLOCK_K):
        kk = k * BLOCK_K + offs_k
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + kk[None, :] * stride_ak,
                    mask=(offs_m[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                    mask=(kk[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
    if BUG:  # a deliberately wrong configuration for the failure tests
        acc = acc * 1.5
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc,
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


# The kernels use only Triton builtins and jit helpers of this module: the helpers of
# triton.language (tl.cdiv, tl.zeros, tl.max, tl.sum) are not interpreted when another test module
# imported Triton before TRITON_INTERPRET was set.
@triton.jit
def _maximum(a, b):
    return tl.where(a > b, a, b)


@triton.jit
def _add(a, b):
    return a + b


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + offs, mask=offs < n_cols, other=-float("inf"))
    x = x - tl.reduce(x, 0, _maximum)
    e = tl.exp(x)
    tl.store(y_ptr + row * stride + offs, e / tl.reduce(e, 0, _add), mask=offs < n_cols)


@triton.jit
def scale_inplace_kernel(x_ptr, n, factor, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) * factor, mask=mask)


@triton.jit
def sum_atomic_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(out_ptr, tl.reduce(tl.load(x_ptr + offs, mask=offs < n, other=0.0), 0, _add))


@triton.jit
def causal_scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr, BUG: tl.constexpr = 0):
    """y[i, j] = 2 x[i, j] for j <= i of an n x n matrix. Tiles above the diagonal are skipped;
    tiles across it write 0 above it: which elements are written depends on BLOCK, by design."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    if pid_n <= pid_m:
        offs_m = pid_m * BLOCK + tl.arange(0, BLOCK)
        offs_n = pid_n * BLOCK + tl.arange(0, BLOCK)
        inside = (offs_m[:, None] < n) & (offs_n[None, :] < n)
        x = tl.load(x_ptr + offs_m[:, None] * n + offs_n[None, :], mask=inside, other=0.0)
        y = tl.where(offs_n[None, :] <= offs_m[:, None], x * 2, 0.0)
        if BUG:
            y = y * 1.5
        tl.store(y_ptr + offs_m[:, None] * n + offs_n[None, :], y, mask=inside)


@triton.jit
def chunked_causal_kernel(x_ptr, y_ptr, n, BM: tl.constexpr, BN: tl.constexpr, BUG: tl.constexpr = 0):
    """y = 2 x on the tiles not wholly above the diagonal, as mamba's chunked causal matmul
    skips them: which elements above the diagonal are written depends on the tile shape."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    if pid_n * BN < (pid_m + 1) * BM:
        offs_m = pid_m * BM + tl.arange(0, BM)
        offs_n = pid_n * BN + tl.arange(0, BN)
        inside = (offs_m[:, None] < n) & (offs_n[None, :] < n)
        y = tl.load(x_ptr + offs_m[:, None] * n + offs_n[None, :], mask=inside, other=0.0) * 2
        if BUG:
            y = y + 1
        tl.store(y_ptr + offs_m[:, None] * n + offs_n[None, :], y, mask=inside)


@triton.jit
def desc_scale_kernel(x_desc, y_desc, factor, BLOCK_M: tl.constexpr, WIDTH: tl.constexpr):
    """y = factor * x through tensor descriptors whose block shape [BLOCK_M, WIDTH] a
    configuration's pre_hook sets (as Triton's tutorials do)."""
    row = tl.program_id(0) * BLOCK_M
    y_desc.store([row, 0], x_desc.load([row, 0]) * factor)


def set_block_shape(nargs):
    """A triton.Config pre_hook: the descriptors' block shape follows the configuration."""
    nargs["x_desc"].block_shape = [nargs["BLOCK_M"], nargs["WIDTH"]]
    nargs["y_desc"].block_shape = [nargs["BLOCK_M"], nargs["WIDTH"]]


@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def scale_heuristic_kernel(x_ptr, n, factor, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    """scale_inplace_kernel with a meta-parameter its @triton.heuristics computes at each launch."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(x_ptr + offs, tl.load(x_ptr + offs) * factor)
    else:
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * factor, mask=offs < n)


@triton.jit
def widen_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """y = 2 x, reading x as whatever it was reinterpreted as (e.g. float8 bits in uint8)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n).to(tl.float32) * 2, mask=offs < n)




@pytest.fixture(autouse=True)
def interpret(monkeypatch):
    """TRITON_INTERPRET=1 while a test of these kernels runs (import it to use it)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    yield


def matmul_args(M: int, N: int, K: int, dtype=None, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(M, K, generator=g, dtype=dtype or torch.float32)
    b = torch.randn(K, N, generator=g, dtype=dtype or torch.float32)
    c = torch.empty(M, N, dtype=dtype or torch.float32)
    return (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))


def matmul_grid(M: int, N: int):
    return lambda meta: (triton.cdiv(M, meta["BLOCK_M"]), triton.cdiv(N, meta["BLOCK_N"]))


def test_matmul_kernel_matches_torch():
    args = matmul_args(20, 24, 40)
    matmul_kernel[matmul_grid(20, 24)](*args, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
    torch.testing.assert_close(args[2], args[0] @ args[1], rtol=1e-4, atol=1e-4)


def test_softmax_kernel_matches_torch():
    x = torch.randn(5, 30)
    y = torch.empty_like(x)
    softmax_kernel[(5,)](x, y, 30, x.stride(0), BLOCK=32)
    torch.testing.assert_close(y, torch.softmax(x, dim=1))


def test_inplace_kernel_scales():
    x = torch.randn(100)
    want = x * 3
    scale_inplace_kernel[(4,)](x, 100, 3.0, BLOCK=32)
    torch.testing.assert_close(x, want)


# An autotuned kernel at module level, as a package would ship it, for the CLI tests.
import tensortune as tt  # noqa: E402

scale_tuned = tt.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 32, 64)], key=["n"],
                          bucket="pow2", progress=False)(scale_inplace_kernel)


@scale_tuned.inputs
def scale_inputs(n):
    return (lambda m: (triton.cdiv(n, m["BLOCK"]),)), (torch.randn(n), n, 2.0)


def scale_twice(n):
    """A tuning target that launches the kernel (the CLI tunes what it launches)."""
    x = torch.randn(n)
    want = x * 4
    for _ in range(2):
        scale_tuned[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, n, 2.0)
    torch.testing.assert_close(x, want)


if _WAS is None:  # leave the environment as it was for the other test modules
    del os.environ["TRITON_INTERPRET"]
else:
    os.environ["TRITON_INTERPRET"] = _WAS
