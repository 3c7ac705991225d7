"""The functions of the expression language: math, select, casts, reductions, reduce axes.

Example:
    >>> from tensortune import te
    >>> A = te.placeholder((4, 8), name="A")
    >>> k = te.reduce_axis(8, "k")
    >>> rowmax = te.compute((4,), lambda i: te.max(A[i, k], axis=k), name="rowmax")
    >>> str(rowmax.op.body)
    'max(A[i, k], axis=[k])'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .dtype import BOOL, HALF_TYPES, TEError, check_dtype, is_float, numpy_dtype
from .expr import (COMBINERS, Binary, Call, Cast, Compare, Const, Expr, IterVar, Reduce, Select, _as_bool,
                   _operands, as_expr, binary, const, logical)


def reduce_axis(extent: int | tuple[int, int], name: str = "k") -> IterVar:
    """A reduction axis over `range(extent)` (or `(0, extent)`)."""
    if isinstance(extent, tuple):
        if len(extent) != 2 or extent[0] != 0:
            raise TEError(f"reduce_axis({extent!r}): only ranges that start at 0 are supported, e.g. (0, n)")
        extent = extent[1]
    if not isinstance(extent, int) or isinstance(extent, bool) or extent <= 0:
        raise TEError(f"reduce axis {name!r} needs a positive integer extent, got {extent!r}")
    if not name.isidentifier():
        raise TEError(f"axis name {name!r} is not an identifier")
    return IterVar(name, extent, "reduce")


def _reduce(combiner: str, source: Any, axis: IterVar | Sequence[IterVar]) -> Reduce:
    axes = (axis,) if isinstance(axis, IterVar) else tuple(axis)
    if not axes:
        raise TEError(f"te.{combiner} needs at least one reduce axis")
    for ax in axes:
        if not isinstance(ax, IterVar) or ax.kind != "reduce":
            raise TEError(f"te.{combiner}(..., axis={ax}): axes must come from te.reduce_axis")
    if len({ax.name for ax in axes}) != len(axes):
        raise TEError(f"te.{combiner}: repeated reduce axis in {[a.name for a in axes]}")
    source = as_expr(source)
    if source.dtype == BOOL:
        raise TEError(f"te.{combiner} of a condition; select a number first")
    assert combiner in COMBINERS
    return Reduce(combiner, source, axes)


def sum(expr: Any, axis: IterVar | Sequence[IterVar]) -> Reduce:  # noqa: A001 - the language's name
    """Sum of `expr` over the reduce axes (one or several)."""
    return _reduce("sum", expr, axis)


def max(a: Any, b: Any = None, axis: IterVar | Sequence[IterVar] | None = None) -> Expr:  # noqa: A001
    """`max(a, b)` elementwise, or `max(expr, axis=k)` as a reduction."""
    if axis is not None:
        if b is not None:
            raise TEError("te.max takes either two values or one value and axis=")
        return _reduce("max", a, axis)
    if b is None:
        raise TEError("te.max(x) needs a second value or axis=")
    return binary("max", a, b)


def min(a: Any, b: Any = None, axis: IterVar | Sequence[IterVar] | None = None) -> Expr:  # noqa: A001
    """`min(a, b)` elementwise, or `min(expr, axis=k)` as a reduction."""
    if axis is not None:
        if b is not None:
            raise TEError("te.min takes either two values or one value and axis=")
        return _reduce("min", a, axis)
    if b is None:
        raise TEError("te.min(x) needs a second value or axis=")
    return binary("min", a, b)


def maximum(a: Any, b: Any) -> Expr:
    return binary("max", a, b)


def minimum(a: Any, b: Any) -> Expr:
    return binary("min", a, b)


def select(cond: Any, then: Any, other: Any) -> Expr:
    """`then` where `cond` holds, else `other` (only the chosen side is evaluated)."""
    cond = as_expr(cond)
    if cond.dtype != BOOL:
        raise TEError(f"select condition {cond} is {cond.dtype}; compare it to get a condition")
    then, other = _operands(then, other)
    return Select(cond, then, other)


if_then_else = select


def cast(value: Any, dtype: str) -> Expr:
    dtype = check_dtype(dtype)
    value = as_expr(value)
    if value.dtype == dtype:
        return value
    if isinstance(value, Const) and value.dtype != BOOL:
        if dtype in HALF_TYPES:  # a cast rounds, folded or not
            return const(float(np.asarray(float(value.value)).astype(numpy_dtype(dtype))), dtype)
        return const(int(value.value) if dtype == "int32" else value.value, dtype)
    return Cast(value, dtype)


def _math(name: str, x: Any) -> Expr:
    x = as_expr(x, "float32")
    if not is_float(x.dtype):
        raise TEError(f"te.{name} needs a float argument, got {x} of {x.dtype}; cast it first")
    return Call(name, (x,))


def exp(x: Any) -> Expr: return _math("exp", x)
def log(x: Any) -> Expr: return _math("log", x)
def sqrt(x: Any) -> Expr: return _math("sqrt", x)
def tanh(x: Any) -> Expr: return _math("tanh", x)
def erf(x: Any) -> Expr: return _math("erf", x)
def sigmoid(x: Any) -> Expr: return _math("sigmoid", x)
def cos(x: Any) -> Expr: return _math("cos", x)
def sin(x: Any) -> Expr: return _math("sin", x)


def abs(x: Any) -> Expr:  # noqa: A001
    x = as_expr(x)
    if not is_float(x.dtype):
        return select(x < 0, -x, x)
    return Call("abs", (x,))


def equal(a: Any, b: Any) -> Expr:
    a, b = _operands(a, b)
    return Compare("eq", a, b)


def not_equal(a: Any, b: Any) -> Expr:
    a, b = _operands(a, b)
    return Compare("ne", a, b)


def all(*conds: Any) -> Expr:  # noqa: A001
    """The conjunction of conditions (true when none are given)."""
    if not conds:
        return const(True)
    out = _as_bool(conds[0])
    for c in conds[1:]:
        out = logical("and", out, c)
    return out


def any(*conds: Any) -> Expr:  # noqa: A001
    if not conds:
        return const(False)
    out = _as_bool(conds[0])
    for c in conds[1:]:
        out = logical("or", out, c)
    return out


__all__ = ["Binary", "abs", "all", "any", "cast", "cos", "equal", "erf", "exp", "if_then_else", "log", "max",
           "maximum", "min", "minimum", "not_equal", "reduce_axis", "select", "sigmoid", "sin", "sqrt", "sum", "tanh"]
