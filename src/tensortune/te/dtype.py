"""Element types of tensor expressions: names, NumPy and C equivalents, Python literals.

`bfloat16` arrays are NumPy arrays of `ml_dtypes.bfloat16` (imported on first use);
torch dtypes (`torch.bfloat16`) and NumPy dtypes are accepted wherever a name is.

Example:
    >>> check_dtype("float32"), c_type("float64"), is_float("int32")
    ('float32', 'double', False)
    >>> check_dtype("bfloat16"), itemsize("bfloat16"), stored_dtype("bfloat16", argument=False)
    ('bfloat16', 2, 'float32')
"""

from __future__ import annotations

import numpy as np

FLOAT_TYPES = ("float16", "bfloat16", "float32", "float64")
HALF_TYPES = ("float16", "bfloat16")  # 16-bit floats: explicit casts to them round
INT_TYPES = ("int32",)
BOOL = "bool"
INDEX = "int32"  # every loop variable and index expression

_C_TYPES = {"float16": "_Float16", "bfloat16": "uint16_t", "float32": "float", "float64": "double", "int32": "int",
            "bool": "int"}
_ALIASES = {"bf16": "bfloat16", "bfloat": "bfloat16", "half": "float16", "fp16": "float16", "float": "float32",
            "fp32": "float32", "single": "float32", "double": "float64", "fp64": "float64", "int": "int32"}
_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int32": 4, "bool": 1}


class TEError(ValueError):
    """A tensor expression or schedule that is ill-formed or illegal; the message names the problem."""


def check_dtype(dtype: object) -> str:
    """The canonical name of a supported element type (accepts NumPy and torch dtypes)."""
    if isinstance(dtype, str):
        name = dtype
    elif type(dtype).__module__ == "torch":  # torch.bfloat16 -> "bfloat16", without importing torch
        name = str(dtype).removeprefix("torch.")
    else:
        try:
            name = np.dtype(dtype).name  # type: ignore[call-overload]
        except TypeError:
            name = repr(dtype)
    if name not in FLOAT_TYPES + INT_TYPES + (BOOL,):
        known = FLOAT_TYPES + INT_TYPES + (BOOL,)
        alias = _ALIASES.get(str(name).lower())
        hint = f" (did you mean {alias!r}?)" if alias else ""
        raise TEError(f"unsupported dtype {dtype!r}{hint}; use one of {', '.join(known)}")
    return name


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_TYPES


def is_int(dtype: str) -> bool:
    return dtype in INT_TYPES


def c_type(dtype: str) -> str:
    """The C type a buffer of `dtype` is stored as (bfloat16: its 16 bits in a uint16_t)."""
    return _C_TYPES[dtype]


def stored_dtype(dtype: str, argument: bool) -> str:
    """The element type a compiled CPU program keeps a buffer of `dtype` in. bfloat16
    arguments are 16-bit; bfloat16 temporaries and local tiles are float32, because
    arithmetic on bfloat16 runs in float32 and values round only where they leave the
    kernel (and at explicit casts): a reduction accumulated in a temporary or a tile
    keeps float32 precision."""
    return "float32" if dtype == "bfloat16" and not argument else dtype


def bfloat16() -> np.dtype:
    """NumPy's bfloat16 dtype (from ml_dtypes)."""
    try:
        import ml_dtypes
    except ImportError:  # pragma: no cover - a dependency of tensortune
        raise TEError("bfloat16 arrays need the ml_dtypes package: pip install ml_dtypes") from None
    return np.dtype(ml_dtypes.bfloat16)


def numpy_dtype(dtype: str) -> np.dtype:
    """The NumPy dtype of arrays of `dtype` (any NumPy name works too)."""
    if dtype == BOOL:
        return np.dtype(np.bool_)
    if dtype == "bfloat16":
        return bfloat16()
    return np.dtype(dtype)


def is_float_array(dt: np.dtype) -> bool:
    """Whether arrays of NumPy dtype `dt` hold floats (NumPy's own or bfloat16)."""
    return dt.kind == "f" or dt.name == "bfloat16"


def itemsize(dtype: str) -> int:
    return _ITEMSIZE[dtype] if dtype in _ITEMSIZE else np.dtype(dtype).itemsize


def literal_dtype(value: object) -> str:
    """The dtype a bare Python number takes when nothing else decides it."""
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, (int, np.integer)):
        return "int32"
    if isinstance(value, (float, np.floating)):
        return "float32"
    raise TEError(f"{value!r} ({type(value).__name__}) is not a number or a tensor expression")
