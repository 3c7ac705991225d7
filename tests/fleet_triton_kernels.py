"""A "production package" of autotuned Triton kernels for the fleet's triton jobs tests.

Workers import it by name (`fleet_triton_kernels:scale`), in the test's process or in a
`tensortune worker` process with this folder on PYTHONPATH, so its kernels are defined at
module level. They run on the CPU under Triton's interpreter, also on a machine with a GPU:
Triton decides when a function is decorated whether it will be interpreted, so the
kernels are made with TRITON_INTERPRET=1, and whoever launches them sets it too (the
tests' fixture, the worker's environment).
"""

from __future__ import annotations

import os

_WAS = os.environ.get("TRITON_INTERPRET")
os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import tensortune as tt  # noqa: E402

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


if _WAS is None:  # leave the environment as it was for the other test modules
    del os.environ["TRITON_INTERPRET"]
else:
    os.environ["TRITON_INTERPRET"] = _WAS
