"""A NumPy interpreter of expression trees: the reference every compiled kernel is checked
against. Floats are evaluated in float64 by default (`precise=True`) and rounded to the
declared dtype at the end (explicit casts to float16 or bfloat16 round where they stand,
as compiled kernels do); the index space is swept in chunks to bound memory, and plain
contractions go through `np.einsum`. Inputs are NumPy arrays (bfloat16 ones of
`ml_dtypes.bfloat16`) or torch CPU tensors.

Example:
    >>> import numpy as np
    >>> from tensortune import te
    >>> A = te.placeholder((2, 3), name="A")
    >>> B = te.compute((3, 2), lambda i, j: A[j, i] + 1.0, name="B")
    >>> evaluate(B, {A: np.zeros((2, 3), "float32")}).tolist()
    [[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]]
"""

from __future__ import annotations

import math
import string
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .arrays import as_numpy, is_torch_tensor
from .dtype import HALF_TYPES, TEError, is_float, is_float_array, numpy_dtype
from .expr import Binary, Call, Cast, Compare, Const, Expr, IterVar, Logical, Not, Reduce, Select, TensorRead
from .tensor import Tensor, graph

CHUNK_ELEMENTS = 1 << 22

_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
           "min": np.minimum, "max": np.maximum}
_COMPARE = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
            "ne": np.not_equal}
_REDUCE = {"sum": np.sum, "max": np.max, "min": np.min}


def evaluate(outputs: Tensor | Sequence[Tensor], inputs: Mapping[Any, np.ndarray],
             precise: bool = True) -> Any:
    """Values of `outputs` given the placeholders' arrays (keyed by tensor or name)."""
    outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    values = evaluate_all(outs, inputs, precise)
    result = [values[t.name].astype(numpy_dtype(t.dtype)) for t in outs]
    return result[0] if isinstance(outputs, Tensor) else result


def evaluate_all(outputs: Sequence[Tensor], inputs: Mapping[Any, np.ndarray], precise: bool = True
                 ) -> dict[str, np.ndarray]:
    """Every tensor's value (in the working precision), by name."""
    by_name = {(k.name if isinstance(k, Tensor) else k): v for k, v in inputs.items()}
    values: dict[str, np.ndarray] = {}
    for t in graph(outputs):
        if t.is_placeholder:
            if t.name not in by_name:
                raise TEError(f"no value given for input {t.name!r}")
            given = by_name[t.name]
            arr = as_numpy(given, f"input {t.name!r}") if is_torch_tensor(given) else np.asarray(given)
            if arr.shape != t.shape:
                raise TEError(f"input {t.name!r} has shape {arr.shape}, expected {t.shape}")
            values[t.name] = arr.astype(_work(t.dtype, precise))
        else:
            values[t.name] = _compute(t, values, precise)
    return values


def _work(dtype: str, precise: bool) -> np.dtype:
    if is_float(dtype):  # (NumPy has no bfloat16 arithmetic: float32 stands in for it)
        return np.dtype(np.float64) if precise else numpy_dtype("float32" if dtype == "bfloat16" else dtype)
    return np.dtype(np.int64) if dtype == "int32" else numpy_dtype(dtype)


def _compute(t: Tensor, values: dict[str, np.ndarray], precise: bool) -> np.ndarray:
    op = t.op
    assert op is not None
    body = op.body
    red = body if isinstance(body, Reduce) else None
    fast = _einsum(t, red, values) if red is not None else None
    if fast is not None:
        return fast
    axes = op.axes + op.reduce_axes
    inner = math.prod(a.extent for a in axes[1:])
    rows = max(1, CHUNK_ELEMENTS // max(inner, 1))
    out = np.empty(t.shape, dtype=_work(t.dtype, precise))
    src = red.source if red is not None else body
    for c0 in range(0, t.shape[0], rows):
        c1 = min(t.shape[0], c0 + rows)
        env: dict[IterVar, np.ndarray] = {}
        for d, ax in enumerate(axes):
            ar = np.arange(c0, c1) if d == 0 else np.arange(ax.extent)
            env[ax] = ar.reshape([-1 if k == d else 1 for k in range(len(axes))])
        grid = (c1 - c0,) + tuple(a.extent for a in axes[1:])
        v = np.broadcast_to(_Eval(values, env, precise).go(src), grid)
        if red is not None:
            v = _REDUCE[red.combiner](v, axis=tuple(range(len(op.axes), len(axes))))
        out[c0:c1] = v
    return out


def _einsum(t: Tensor, red: Reduce, values: dict[str, np.ndarray]) -> np.ndarray | None:
    """`sum(X[...] * Y[...])` with plain axes as indices, through np.einsum."""
    src = red.source
    if red.combiner != "sum" or not (isinstance(src, Binary) and src.op == "mul"):
        return None
    reads = (src.a, src.b)
    if not all(isinstance(r, TensorRead) and all(isinstance(i, IterVar) for i in r.indices)
               and len(set(r.indices)) == len(r.indices) for r in reads):
        return None
    axes = list(t.op.axes + t.op.reduce_axes)
    letters = dict(zip(axes, string.ascii_letters))
    spec = ",".join("".join(letters[i] for i in r.indices) for r in reads)  # type: ignore[union-attr]
    spec += "->" + "".join(letters[a] for a in t.op.axes)
    return np.einsum(spec, *(values[r.tensor.name] for r in reads), optimize=True)  # type: ignore[union-attr]


class _Eval:
    def __init__(self, values: dict[str, np.ndarray], env: dict[IterVar, np.ndarray], precise: bool) -> None:
        self.values, self.env, self.precise = values, env, precise

    def go(self, x: Expr) -> Any:
        if isinstance(x, Const):
            return np.asarray(x.value, dtype=_work(x.dtype, self.precise))
        if isinstance(x, IterVar):
            return self.env[x]
        if isinstance(x, TensorRead):
            arr = self.values[x.tensor.name]
            idx = tuple(np.clip(self.go(i), 0, n - 1) for i, n in zip(x.indices, arr.shape))
            return arr[idx]
        if isinstance(x, Binary):
            a, b = self.go(x.a), self.go(x.b)
            with np.errstate(all="ignore"):
                if x.op in ("floordiv", "mod"):
                    safe = np.where(b == 0, 1, b)
                    r = np.floor_divide(a, safe) if x.op == "floordiv" else np.mod(a, safe)
                    return np.where(b == 0, 0, r)
                return _BINARY[x.op](a, b)
        if isinstance(x, Compare):
            return _COMPARE[x.op](self.go(x.a), self.go(x.b))
        if isinstance(x, Logical):
            return (np.logical_and if x.op == "and" else np.logical_or)(self.go(x.a), self.go(x.b))
        if isinstance(x, Not):
            return np.logical_not(self.go(x.a))
        if isinstance(x, Select):
            return np.where(self.go(x.cond), self.go(x.then), self.go(x.other))
        if isinstance(x, Call):
            return _call(x.name, self.go(x.args[0]))
        if isinstance(x, Cast):
            v = self.go(x.value)
            if x.dtype == "int32":
                with np.errstate(all="ignore"):
                    return (np.trunc(v).astype(np.int64) if is_float_array(np.asarray(v).dtype)
                            else v.astype(np.int64))
            if x.dtype in HALF_TYPES:  # rounds to the narrow type, computes on in the working precision
                with np.errstate(all="ignore"):
                    v = np.asarray(v).astype(numpy_dtype(x.dtype))
            return np.asarray(v).astype(_work(x.dtype, self.precise))
        raise TEError(f"cannot evaluate {x!r}")


def _call(name: str, v: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        if name == "sigmoid":
            return 1.0 / (1.0 + np.exp(-v))
        if name == "erf":
            try:
                from scipy.special import erf
            except ImportError:  # pragma: no cover - scipy comes with xgboost
                return np.vectorize(math.erf, otypes=[v.dtype])(v)
            return erf(v)
        return {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh, "abs": np.abs, "cos": np.cos,
                "sin": np.sin}[name](v)
