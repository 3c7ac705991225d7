"""The arrays te's CPU side takes and gives: NumPy arrays (bfloat16 ones of
`ml_dtypes.bfloat16`) and torch CPU tensors, which are viewed as NumPy arrays without
copying (torch is never imported here unless a tensor is given).

Example:
    >>> import torch
    >>> t = torch.tensor([1.5, -2.0], dtype=torch.bfloat16)
    >>> a = as_numpy(t, "x")
    >>> a.dtype.name, a.tolist()
    ('bfloat16', [1.5, -2.0])
    >>> to_torch(a).dtype
    torch.bfloat16
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .dtype import TEError, bfloat16


def is_torch_tensor(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr")


def as_numpy(x: Any, what: str) -> np.ndarray:
    """`x` as a NumPy array: itself, or a torch CPU tensor's memory viewed as one."""
    if isinstance(x, np.ndarray):
        return x
    if is_torch_tensor(x):
        if x.device.type != "cpu":
            raise TEError(f"{what} is a torch tensor on {x.device}; CPU kernels take CPU tensors (use .cpu(), "
                          "or a kernel from te.autoschedule(..., target='cuda'))")
        x = x.detach()
        if str(x.dtype) == "torch.bfloat16":
            import torch
            return x.view(torch.int16).numpy().view(bfloat16())
        try:
            return x.numpy()
        except TypeError as exc:
            raise TEError(f"{what} is a torch tensor of {x.dtype}, which has no NumPy equivalent: {exc}") from None
    raise TEError(f"{what} must be a numpy array or a torch tensor, got {type(x).__name__}")


def to_torch(a: np.ndarray) -> Any:
    """A torch tensor sharing `a`'s memory (bfloat16 included)."""
    import torch
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)
