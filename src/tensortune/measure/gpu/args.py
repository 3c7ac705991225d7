"""Arguments described, not pickled: shapes, dtypes, seeds; made inside the worker.

A `TensorArg` says how to make one tensor argument and what the kernel does with it:
`output=True` (written only: poisoned with NaN or a sentinel before the checking run, so
an element left unwritten shows, and compared with the reference), `restore=True`
(read and written in place, like Triton's `restore_value`: copied back to its initial
value before every run, and compared), or `zero=True` (accumulated into, like
`reset_to_zero`: zeroed before every run, and compared). Anything else in an argument
list (ints, floats, None) is passed as is.

Example:
    >>> a = TensorArg((64, 32), "float16")
    >>> a.nbytes, a.checked
    (4096, False)
    >>> tolerance_for("bfloat16")
    0.02
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..tolerance import tolerance_for

_ITEMSIZE = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1,
}
_INITS = ("randn", "rand", "randint", "zeros", "ones", "empty", "arange")
@dataclass(frozen=True)
class TensorArg:
    """How to make one tensor argument in the worker, and its role in the kernel."""

    shape: tuple[int, ...]
    dtype: str = "float32"
    init: str = "randn"  # randn | rand | randint | zeros | ones | empty | arange
    scale: float = 1.0  # randn and rand values are multiplied by this
    low: int = 0  # randint range [low, high)
    high: int = 100
    output: bool = False
    restore: bool = False
    zero: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        object.__setattr__(self, "dtype", str(self.dtype).replace("torch.", ""))
        if any(s < 0 for s in self.shape):
            raise ValueError(f"TensorArg shape must not be negative, got {self.shape}")
        if self.dtype not in _ITEMSIZE:
            raise ValueError(f"TensorArg dtype {self.dtype!r} is not one of {sorted(_ITEMSIZE)}")
        if self.init not in _INITS:
            raise ValueError(f"TensorArg init {self.init!r} is not one of {_INITS}")
        if sum((self.output, self.restore, self.zero)) > 1:
            raise ValueError("a TensorArg is at most one of output, restore, zero")
        if self.init == "randint" and self.high <= self.low:
            raise ValueError(f"randint needs low < high, got [{self.low}, {self.high})")

    @property
    def checked(self) -> bool:
        """Whether the kernel writes it, so it is compared with the reference."""
        return self.output or self.restore or self.zero

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * _ITEMSIZE[self.dtype]


def make_tensor(spec: TensorArg, seed: int, device: str) -> Any:
    """Make the tensor `spec` describes on `device`, drawn from its own seeded generator."""
    import torch

    dtype = getattr(torch, spec.dtype)
    gen_device = "cuda" if str(device).startswith("cuda") else "cpu"
    gen = torch.Generator(device=gen_device).manual_seed(seed)
    shape = spec.shape
    if spec.init == "zeros":
        return torch.zeros(shape, dtype=dtype, device=device)
    if spec.init == "ones":
        return torch.ones(shape, dtype=dtype, device=device)
    if spec.init == "empty":
        return poison(torch.empty(shape, dtype=dtype, device=device))
    if spec.init == "arange":
        return torch.arange(math.prod(shape), device=device).reshape(shape).to(dtype)
    if spec.init == "randint" or dtype in (torch.int64, torch.int32, torch.int16, torch.int8,
                                           torch.uint8, torch.bool):
        high = 2 if dtype == torch.bool else spec.high
        low = 0 if dtype == torch.bool else spec.low
        return torch.randint(low, high, shape, generator=gen, device=device).to(dtype)
    draw = torch.randn if spec.init == "randn" else torch.rand
    values = draw(shape, generator=gen, device=device, dtype=torch.float32)
    if spec.scale != 1.0:
        values = values * spec.scale
    return values.to(dtype)


def make_args(specs: Sequence[Any], seed: int, device: str) -> list[Any]:
    """Every TensorArg made (argument i from seed `seed * 1009 + i`); other values kept."""
    return [make_tensor(s, seed * 1009 + i, device) if isinstance(s, TensorArg) else s
            for i, s in enumerate(specs)]


def poison(t: Any) -> Any:
    """Fill with NaN (floats) or the largest value (integers), so unwritten elements show."""
    import torch

    if t.dtype.is_floating_point:
        return t.fill_(float("nan"))
    if t.dtype == torch.bool:
        return t.fill_(True)
    return t.fill_(torch.iinfo(t.dtype).max)


def mismatch(actual: Any, expected: Any, rtol: float | None = None, atol: float | None = None) -> str | None:
    """Why `actual` does not match `expected` (torch tensors), or None when it does.

    An element passes when |actual - expected| <= atol * max|expected| + rtol * |expected|;
    both tolerances default to `tolerance_for(dtype)`. Non-finite values where the
    reference is finite always fail.
    """
    import torch

    if tuple(actual.shape) != tuple(expected.shape):
        return f"shape {tuple(actual.shape)} != expected {tuple(expected.shape)}"
    tol = tolerance_for(str(expected.dtype))
    rtol = tol if rtol is None else rtol
    atol = tol if atol is None else atol
    if not expected.dtype.is_floating_point and rtol == 0 and atol == 0:
        if torch.equal(actual, expected):
            return None
        wrong = int((actual != expected).sum())
        return f"{wrong} of {expected.numel()} elements differ (exact match expected)"
    wide = torch.float64 if expected.dtype in (torch.float64, torch.float32) else torch.float32
    a, e = actual.to(wide), expected.to(wide)
    finite = torch.isfinite(e)
    nonfinite = int((~torch.isfinite(a) & finite).sum())
    if nonfinite:
        return f"{nonfinite} of {e.numel()} elements are NaN or infinite where the reference is finite"
    if e.numel() == 0:
        return None
    scale = float(e[finite].abs().max()) if bool(finite.any()) else 0.0
    err = (a - e).abs()
    bad = (err > atol * (scale if scale > 0 else 1.0) + rtol * e.abs()) & finite
    count = int(bad.sum())
    if count:
        worst = float(err[finite].max())
        return (f"{count} of {e.numel()} elements off; max abs error {worst:.4g} "
                f"(rtol={rtol:g}, atol={atol:g} x max|ref| {scale:.4g})")
    return None
