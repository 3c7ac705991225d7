"""A "production package" of autotuned Triton kernels for the fleet's triton jobs tests.

Workers import it by name (`fleet_triton_kernels:scale`), in the test's process or in a
`tensortune worker` process with this folder on PYTHONPATH, so its kernels are defined at
module level. They run on the CPU under TRITON_INTERPRET=1 (set by whoever imports it on a
machine without a GPU: tests/conftest.py, or the worker's environment).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import tensortune as tt

BLOCKS = (16, 32, 64, 128)


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, factor, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * factor, mask=mask)


class BlockTimer:
    """Times a candidate as faster the larger its block (the interpreter's own times are
    noise), after running it, so that the winner is known: BLOCK=128."""

    def time(self, fn):
        fn()
        return (1e-3 / fn.config["BLOCK"],)


def make_scale(**options):
    """The production kernel: answers new keys at once and queues them for the fleet."""
    kernel = tt.autotune(configs=[triton.Config({"BLOCK": b}) for b in BLOCKS], key=["n"], bucket="pow2",
                         on_new_key="enqueue", timer=BlockTimer(), progress=False, name="fleet_scale",
                         **options)(scale_kernel)
    kernel.inputs(scale_inputs)
    return kernel


def scale_inputs(n, dtype="float32"):
    """Fresh arguments for a shape: `dtype` is told from a launch's tensors."""
    x = torch.randn(n, dtype=getattr(torch, dtype))
    return grid(n), (x, torch.empty_like(x), n, 2.0)


def grid(n):
    return lambda meta: (triton.cdiv(n, meta["BLOCK"]),)


scale = make_scale()


def launch_scale(n):
    """A tuning target that launches the kernel (a worker tunes the keys it launches)."""
    x = torch.randn(n)
    y = torch.empty_like(x)
    scale[grid(n)](x, y, n, 2.0)
    torch.testing.assert_close(y, x * 2)
