"""Element types of tensor expressions: names, NumPy and C equivalents, Python literals.

Example:
    >>> check_dtype("float32"), c_type("float64"), is_float("int32")
    ('float32', 'double', False)
"""

from __future__ import annotations

import numpy as np

FLOAT_TYPES = ("float16", "float32", "float64")
INT_TYPES = ("int32",)
BOOL = "bool"
INDEX = "int32"  # every loop variable and index expression

_C_TYPES = {"float16": "_Float16", "float32": "float", "float64": "double", "int32": "int", "bool": "int"}


class TEError(ValueError):
    """A tensor expression or schedule that is ill-formed or illegal; the message names the problem."""


def check_dtype(dtype: object) -> str:
    """The canonical name of a supported element type (accepts NumPy dtypes)."""
    name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    if name not in FLOAT_TYPES + INT_TYPES + (BOOL,):
        raise TEError(f"unsupported dtype {dtype!r}; use one of {', '.join(FLOAT_TYPES + INT_TYPES)}")
    return name


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_TYPES


def is_int(dtype: str) -> bool:
    return dtype in INT_TYPES


def c_type(dtype: str) -> str:
    return _C_TYPES[dtype]


def numpy_dtype(dtype: str) -> np.dtype:
    return np.dtype(np.bool_) if dtype == BOOL else np.dtype(dtype)


def itemsize(dtype: str) -> int:
    return numpy_dtype(dtype).itemsize


def literal_dtype(value: object) -> str:
    """The dtype a bare Python number takes when nothing else decides it."""
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, (int, np.integer)):
        return "int32"
    if isinstance(value, (float, np.floating)):
        return "float32"
    raise TEError(f"{value!r} ({type(value).__name__}) is not a number or a tensor expression")
