"""How far a result may be from its reference, by dtype.

Example:
    >>> tolerance_for("bfloat16"), tolerance_for("torch.float32"), tolerance_for("int32")
    (0.02, 0.001, 0.0)
"""

from __future__ import annotations

from typing import Any

# relative tolerance, as a fraction of the largest expected magnitude, by dtype name
TOLERANCES: dict[str, float] = {
    "float16": 1e-2, "bfloat16": 2e-2, "float32": 1e-3, "float64": 1e-7,
    "float8_e4m3fn": 1.25e-1, "float8_e5m2": 2.5e-1, "float8_e4m3fnuz": 1.25e-1, "float8_e5m2fnuz": 2.5e-1,
}


def tolerance_for(dtype: Any) -> float:
    """Relative tolerance that fits a dtype, given as a name or a torch dtype (0 for
    integers: they must match exactly).

    float32 allows 1e-3 so that TF32 matrix products (Triton's default for a float32
    `tl.dot`) pass; float16 1e-2; bfloat16 2e-2; float8 1e-1 and more.
    """
    return TOLERANCES.get(str(dtype).removeprefix("torch."), 0.0)
