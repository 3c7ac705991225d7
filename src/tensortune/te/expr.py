"""Expression nodes: immutable trees built with Python operators inside `te.compute`.

Structural equality (`==`) compares trees; comparisons that build expressions are
`<, <=, >, >=` and `te.equal / te.not_equal`. Python numbers take the type of the
other operand; mixing two different dtypes is an error that says which cast to add.

Example:
    >>> i = IterVar("i", 8)
    >>> str(i * 2 + 1)
    '((i * 2) + 1)'
    >>> (i < 4).dtype
    'bool'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .dtype import BOOL, INDEX, TEError, is_float, is_int, literal_dtype

ARITH_OPS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "mod": "%", "min": "min", "max": "max"}
COMPARE_OPS = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
MATH_FUNCTIONS = ("exp", "log", "sqrt", "tanh", "abs", "erf", "sigmoid", "cos", "sin")
COMBINERS = ("sum", "max", "min")


class Expr:
    """Base of every expression node; supplies the operators."""

    __slots__ = ()
    dtype: str

    def __add__(self, other: Any) -> Expr: return binary("add", self, other)
    def __radd__(self, other: Any) -> Expr: return binary("add", other, self)
    def __sub__(self, other: Any) -> Expr: return binary("sub", self, other)
    def __rsub__(self, other: Any) -> Expr: return binary("sub", other, self)
    def __mul__(self, other: Any) -> Expr: return binary("mul", self, other)
    def __rmul__(self, other: Any) -> Expr: return binary("mul", other, self)
    def __truediv__(self, other: Any) -> Expr: return binary("div", self, other)
    def __rtruediv__(self, other: Any) -> Expr: return binary("div", other, self)
    def __floordiv__(self, other: Any) -> Expr: return binary("floordiv", self, other)
    def __rfloordiv__(self, other: Any) -> Expr: return binary("floordiv", other, self)
    def __mod__(self, other: Any) -> Expr: return binary("mod", self, other)
    def __rmod__(self, other: Any) -> Expr: return binary("mod", other, self)
    def __neg__(self) -> Expr: return binary("sub", const(0, self.dtype), self)
    def __lt__(self, other: Any) -> Expr: return compare("lt", self, other)
    def __le__(self, other: Any) -> Expr: return compare("le", self, other)
    def __gt__(self, other: Any) -> Expr: return compare("gt", self, other)
    def __ge__(self, other: Any) -> Expr: return compare("ge", self, other)
    def __and__(self, other: Any) -> Expr: return logical("and", self, other)
    def __rand__(self, other: Any) -> Expr: return logical("and", other, self)
    def __or__(self, other: Any) -> Expr: return logical("or", self, other)
    def __ror__(self, other: Any) -> Expr: return logical("or", other, self)
    def __invert__(self) -> Expr: return Not(_as_bool(self))

    def __bool__(self) -> bool:
        raise TEError(f"the expression {self} has no Python truth value; use te.select(cond, a, b) "
                      "for a choice and te.all / te.any (or & and |) to combine conditions")

    def astype(self, dtype: str) -> Expr:
        from .ops import cast
        return cast(self, dtype)

    def __str__(self) -> str:
        from .printer import expr_str
        return expr_str(self)


@dataclass(frozen=True, repr=False)
class Const(Expr):
    value: int | float | bool
    dtype: str

    def __repr__(self) -> str: return f"Const({self.value!r}, {self.dtype!r})"


@dataclass(frozen=True, repr=False)
class Var(Expr):
    """A free integer variable (a loop variable of a lowered loop nest)."""

    name: str
    dtype: str = INDEX

    def __repr__(self) -> str: return f"Var({self.name!r})"


@dataclass(frozen=True, repr=False)
class IterVar(Expr):
    """An axis of a computation: `spatial` (one per output dimension) or `reduce`."""

    name: str
    extent: int
    kind: str = "spatial"

    @property
    def dtype(self) -> str:
        return INDEX

    def __repr__(self) -> str: return f"IterVar({self.name!r}, {self.extent}, {self.kind!r})"


@dataclass(frozen=True, repr=False)
class Binary(Expr):
    op: str
    a: Expr
    b: Expr

    @property
    def dtype(self) -> str:
        return self.a.dtype


@dataclass(frozen=True, repr=False)
class Compare(Expr):
    op: str
    a: Expr
    b: Expr
    dtype = BOOL


@dataclass(frozen=True, repr=False)
class Logical(Expr):
    op: str  # "and" | "or"
    a: Expr
    b: Expr
    dtype = BOOL


@dataclass(frozen=True, repr=False)
class Not(Expr):
    a: Expr
    dtype = BOOL


@dataclass(frozen=True, repr=False)
class Select(Expr):
    cond: Expr
    then: Expr
    other: Expr

    @property
    def dtype(self) -> str:
        return self.then.dtype


@dataclass(frozen=True, repr=False)
class Call(Expr):
    """A math function of float arguments (exp, log, sqrt, tanh, abs, erf, sigmoid, cos, sin)."""

    name: str
    args: tuple[Expr, ...]

    @property
    def dtype(self) -> str:
        return self.args[0].dtype


@dataclass(frozen=True, repr=False)
class Cast(Expr):
    value: Expr
    dtype: str


@dataclass(frozen=True, repr=False)
class TensorRead(Expr):
    """`tensor[indices]`; built by `Tensor.__getitem__`, which checks the indices."""

    tensor: Any  # tensortune.te.tensor.Tensor (identity-compared)
    indices: tuple[Expr, ...]

    @property
    def dtype(self) -> str:
        return self.tensor.dtype


@dataclass(frozen=True, repr=False)
class Reduce(Expr):
    """`combiner` of `source` over the reduce `axes`; only allowed as the body of a compute."""

    combiner: str
    source: Expr
    axes: tuple[IterVar, ...]

    @property
    def dtype(self) -> str:
        return self.source.dtype

    @property
    def init(self) -> Const:
        return reduce_identity(self.combiner, self.dtype)


@dataclass(frozen=True)
class Buffer:
    """Memory of a lowered program: a function argument, a root temporary or a local tile."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    scope: str = "global"  # "global" (argument or heap temporary) or "local" (a tile inside loops)

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


@dataclass(frozen=True, repr=False)
class BufferLoad(Expr):
    """A read of a buffer in lowered code (tensor reads become these)."""

    buffer: Buffer
    indices: tuple[Expr, ...]

    @property
    def dtype(self) -> str:
        return self.buffer.dtype


Expr.__repr__ = lambda self: f"{type(self).__name__}({self})"  # type: ignore[method-assign]


def reduce_identity(combiner: str, dtype: str) -> Const:
    if combiner == "sum":
        return const(0, dtype)
    big = float("inf") if is_float(dtype) else 2**31 - 1
    return const(-big if combiner == "max" else big, dtype)


def const(value: int | float | bool, dtype: str | None = None) -> Const:
    """A constant of `dtype` (default: the literal's own type, int32 or float32)."""
    dtype = dtype or literal_dtype(value)
    if dtype == BOOL:
        return Const(bool(value), BOOL)
    if is_int(dtype):
        if isinstance(value, float) and not value.is_integer() and abs(value) != float("inf"):
            raise TEError(f"the float literal {value!r} cannot be an {dtype} operand; cast with te.cast")
        if abs(value) == float("inf"):
            raise TEError(f"infinity is not an {dtype} value")
        return Const(int(value), dtype)
    return Const(float(value), dtype)


def as_expr(value: Any, like: str | None = None) -> Expr:
    """`value` as an expression; Python numbers take the dtype `like` when given."""
    if isinstance(value, Expr):
        return value
    if hasattr(value, "shape") and hasattr(value, "op") and hasattr(value, "dtype"):
        raise TEError(f"tensor {value.name!r} used as a value; index it, e.g. {value.name}[i, j]")
    kind = literal_dtype(value)
    if like is None or like == BOOL:
        return const(value, kind)
    if kind == "float32" and is_int(like):
        raise TEError(f"float literal {value!r} mixed with an {like} expression; cast one side with te.cast")
    return const(value, like)


def _operands(a: Any, b: Any) -> tuple[Expr, Expr]:
    if isinstance(a, Expr):
        b = as_expr(b, a.dtype)
    elif isinstance(b, Expr):
        a = as_expr(a, b.dtype)
    else:
        a, b = as_expr(a), as_expr(b)
    assert isinstance(a, Expr) and isinstance(b, Expr)
    if a.dtype != b.dtype:
        raise TEError(f"dtype mismatch: {a} is {a.dtype} but {b} is {b.dtype}; cast one side with te.cast")
    return a, b


def binary(op: str, a: Any, b: Any) -> Expr:
    a, b = _operands(a, b)
    if a.dtype == BOOL:
        raise TEError(f"arithmetic '{ARITH_OPS[op]}' on the condition {a}; use te.select to turn it into a number")
    if op == "div" and is_int(a.dtype):
        raise TEError(f"'/' on integers ({a} / {b}); use // for floor division")
    if op in ("floordiv", "mod") and not is_int(a.dtype):
        raise TEError(f"'{ARITH_OPS[op]}' needs integer operands, got {a.dtype}")
    if is_int(a.dtype):
        if isinstance(a, Const) and isinstance(b, Const):
            return const(_fold(op, int(a.value), int(b.value)), a.dtype)
        one_b, zero_b = isinstance(b, Const) and b.value == 1, isinstance(b, Const) and b.value == 0
        if (op in ("mul", "floordiv") and one_b) or (op in ("add", "sub") and zero_b):
            return a  # index arithmetic like `y * stride + r` with stride 1
        if (op == "mul" and isinstance(a, Const) and a.value == 1) or (op == "add" and isinstance(a, Const)
                                                                        and a.value == 0):
            return b
    return Binary(op, a, b)


def _fold(op: str, x: int, y: int) -> int:
    if op in ("floordiv", "mod") and y == 0:
        raise TEError(f"integer division by zero in a constant expression ({x} {ARITH_OPS[op]} {y})")
    return {"add": x + y, "sub": x - y, "mul": x * y, "min": min(x, y), "max": max(x, y),
            "floordiv": x // y if y else 0, "mod": x % y if y else 0}[op]


def compare(op: str, a: Any, b: Any) -> Expr:
    a, b = _operands(a, b)
    return Compare(op, a, b)


def _as_bool(x: Any) -> Expr:
    x = as_expr(x)
    if x.dtype != BOOL:
        raise TEError(f"{x} is {x.dtype}, not a condition; compare it (e.g. {x} > 0)")
    return x


def logical(op: str, a: Any, b: Any) -> Expr:
    return Logical(op, _as_bool(a), _as_bool(b))
