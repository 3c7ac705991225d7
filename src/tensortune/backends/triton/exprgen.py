"""Tensor expressions as Triton code: one SSA line per distinct subexpression.

An `Emitter` turns an expression over kernel variables (already Triton tensors of
broadcastable shapes, such as `m0` of shape [BLOCK_M, 1]) into lines of Triton code and
returns the name holding its value. Floats are computed in float32 whatever their
storage type (float16 and bfloat16 loads are widened at once; explicit casts to a
narrow type round); integers are int32. A read `T[i, j]` becomes a masked `tl.load` at
`T + i * stride0 + j`, masked by the bounds of the variables it uses and by the
conditions of every `select` around it, so padding reads nothing out of bounds. Equal
subexpressions (with equal guards) are computed once.

Example:
    >>> from tensortune import te
    >>> from tensortune.te.expr import Var
    >>> X = te.placeholder((8, 4), "float16", "X")
    >>> r, c = Var("r0"), Var("c0")
    >>> em = Emitter({r: "r0", c: "c0"}, {"X": "p_X"})
    >>> name = em.value(te.exp(X[r, c].astype("float32")))
    >>> print("\\n".join(em.lines))
    t0 = tl.load(p_X + (c0 + r0 * 4)).to(tl.float32)
    t1 = tl.exp(t0)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ...te.affine import Affine, interval
from ...te.dtype import is_float
from ...te.expr import Binary, Call, Cast, Compare, Const, Expr, Logical, Not, Select, TensorRead, Var
from ...te.visit import walk

TL_TYPES = {"float16": "tl.float16", "bfloat16": "tl.bfloat16", "float32": "tl.float32", "float64": "tl.float64",
            "int32": "tl.int32", "bool": "tl.int1"}
_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
_COMPARE = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_MATH = {"exp": "tl.exp({})", "log": "tl.log({})", "sqrt": "tl.sqrt({})", "abs": "tl.abs({})",
         "erf": "tl.erf({})", "sigmoid": "tl.sigmoid({})", "cos": "tl.cos({})", "sin": "tl.sin({})", "tanh": "(2.0 * tl.sigmoid(2.0 * {}) - 1.0)"}
INT32_LIMIT = 2**31 - 1
SCALAR_DIMS = frozenset({"b", "ko"})  # per-program or per-iteration scalars (batch, window position)


def literal(value: Any) -> str:
    """A Python literal Triton accepts inside a kernel."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return str(value)
    if math.isinf(value):
        return 'float("inf")' if value > 0 else '-float("inf")'
    if math.isnan(value):
        return 'float("nan")'
    return repr(float(value))


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for s in reversed(shape):
        strides.append(step)
        step *= s
    return tuple(reversed(strides))


class Emitter:
    """Lines of Triton code for expressions over named kernel variables.

    `names`: kernel variable -> Triton name; `pointers`: tensor name -> pointer argument;
    `masks`: kernel variable -> the name of its bounds mask (absent: always in bounds);
    `ranges`: kernel variable -> (lo, hi), to prove indices non-negative; `known`:
    expressions already computed (the accumulator, reductions) -> names; `storage`:
    tensor name -> element type in memory (float16 tensors may be stored as bfloat16);
    `shapes`: kernel variable -> the tile dimension it spans ("m", "k", ...), so an
    address is summed per dimension first and broadcast once.
    """

    def __init__(self, names: Mapping[Var, str], pointers: Mapping[str, str], *,
                 masks: Mapping[Var, str] | None = None, ranges: Mapping[Var, tuple[int, int]] | None = None,
                 known: Mapping[Expr, str] | None = None, storage: Mapping[str, str] | None = None,
                 shapes: Mapping[Var, str] | None = None, prefix: str = "t") -> None:
        self.names = dict(names)
        self.pointers = dict(pointers)
        self.masks = dict(masks or {})
        self.ranges = dict(ranges or {})
        self.known = dict(known or {})
        self.storage = dict(storage or {})
        self.shapes = dict(shapes or {})
        self.prefix = prefix
        self.lines: list[str] = []
        self._cse: dict[Any, str] = {}
        self._count = 0

    # -- bookkeeping ---------------------------------------------------------------------
    def emit(self, code: str, key: Any = None) -> str:
        if key is not None and key in self._cse:
            return self._cse[key]
        name = f"{self.prefix}{self._count}"
        self._count += 1
        self.lines.append(f"{name} = {code}")
        if key is not None:
            self._cse[key] = name
        return name

    def storage_of(self, tensor: Any) -> str:
        return self.storage.get(tensor.name, tensor.dtype)

    # -- values --------------------------------------------------------------------------
    def value(self, e: Expr, guards: tuple[tuple[Expr, bool], ...] = ()) -> str:
        """The name (or literal) holding `e`; floats in float32."""
        if e in self.known:
            return self.known[e]
        if isinstance(e, Const):
            return literal(e.value)
        if isinstance(e, Var):
            if e not in self.names:
                raise KeyError(f"kernel variable {e.name!r} has no Triton name here")
            return self.names[e]
        if isinstance(e, Binary) and isinstance(e.b, Const) and not isinstance(e.b.value, bool):
            if (e.op in ("add", "sub") and e.b.value == 0) or (e.op in ("mul", "floordiv") and e.b.value == 1
                                                               and e.dtype == "int32"):
                return self.value(e.a, guards)
        if isinstance(e, Cast) and e.dtype == "float32" and is_float(e.value.dtype):
            return self.value(e.value, guards)
        key = (e, guards if any(isinstance(x, TensorRead) for x in walk(e)) else ())
        if key in self._cse:
            return self._cse[key]
        return self.emit(self._code(e, guards), key)

    def _code(self, e: Expr, guards: tuple[tuple[Expr, bool], ...]) -> str:
        v = lambda x: self.value(x, guards)  # noqa: E731
        if isinstance(e, TensorRead):
            return self.load_code(e, guards, widen=True)
        if isinstance(e, Binary):
            if e.op in ("min", "max"):
                return f"tl.{'minimum' if e.op == 'min' else 'maximum'}({v(e.a)}, {v(e.b)})"
            if e.op in ("floordiv", "mod"):
                return self._floordiv_mod(e, guards)
            return f"{v(e.a)} {_INFIX[e.op]} {v(e.b)}"
        if isinstance(e, Compare):
            return f"{v(e.a)} {_COMPARE[e.op]} {v(e.b)}"
        if isinstance(e, Logical):
            return f"({v(e.a)}) {'&' if e.op == 'and' else '|'} ({v(e.b)})"
        if isinstance(e, Not):
            return f"{v(e.a)} == 0"
        if isinstance(e, Select):
            cond = v(e.cond)
            then = self.value(e.then, guards + ((e.cond, True),))
            other = self.value(e.other, guards + ((e.cond, False),))
            return f"tl.where({cond}, {then}, {other})"
        if isinstance(e, Call):
            return _MATH[e.name].format(v(e.args[0]))
        if isinstance(e, Cast):
            return self._cast(e, guards)
        raise TypeError(f"cannot generate Triton code for {type(e).__name__} {e}")

    def _cast(self, e: Cast, guards: tuple[tuple[Expr, bool], ...]) -> str:
        src = e.value.dtype
        inner = self.value(e.value, guards)
        if e.dtype == "int32":
            return f"({inner}).to(tl.int32)" if src != "int32" else inner
        if is_float(e.dtype):
            if e.dtype in ("float16", "bfloat16"):  # round to the narrow type, compute on in float32
                return f"({inner}).to({TL_TYPES[e.dtype]}).to(tl.float32)"
            return f"({inner}).to(tl.float32)" if not is_float(src) else inner
        return f"({inner}) != 0"

    def _floordiv_mod(self, e: Binary, guards: tuple[tuple[Expr, bool], ...]) -> str:
        a, b = self.value(e.a, guards), self.value(e.b, guards)
        ra, rb = interval(e.a, self.ranges), interval(e.b, self.ranges)
        if ra is not None and rb is not None and ra[0] >= 0 and rb[0] > 0:
            return f"{a} {'//' if e.op == 'floordiv' else '%'} {b}"
        # floor semantics whatever the backend's integer division rounds to
        q = self.emit(f"{a} // {b}")
        r = self.emit(f"{a} - {q} * {b}")
        fix = self.emit(f"({r} != 0) & (({r} < 0) != ({b} < 0))")
        fq = self.emit(f"{q} - {fix}.to(tl.int32)")
        return fq if e.op == "floordiv" else f"{a} - {fq} * {b}"

    # -- memory --------------------------------------------------------------------------
    def offset(self, read: TensorRead, guards: tuple[tuple[Expr, bool], ...] = ()) -> str:
        """The element offset of a read (contiguous layout), int64 for large tensors.

        The address is regrouped as an affine sum and each group of terms over the same
        tile dimensions is added up first: `m-part + k-part` is one broadcast add.
        """
        t = read.tensor
        wide = math.prod(t.shape) > INT32_LIMIT
        linear: Expr = Const(0, "int32")
        for idx, stride in zip(read.indices, contiguous_strides(t.shape)):
            linear = Binary("add", linear, Binary("mul", idx, Const(stride, "int32")))
        aff = Affine.of(linear)
        buckets: dict[frozenset[str], list[str]] = {}
        for atom, coef in aff.terms:
            dims = frozenset(self.shapes.get(v, v.name) for v in walk(atom) if isinstance(v, Var))
            name = self.value(atom, guards)
            if wide:
                name = f"{name}.to(tl.int64)"
            buckets.setdefault(dims, []).append(name if coef == 1 else f"{name} * {coef}")
        parts = [str(aff.offset)] if aff.offset else []
        # scalars first, then one-dimensional sums, so each broadcast happens once
        for dims in sorted(buckets, key=lambda d: (sum(x not in SCALAR_DIMS for x in d), len(d), sorted(d))):
            terms = buckets[dims]
            parts.append(terms[0] if len(terms) == 1 else self.emit(" + ".join(terms), ("offset", tuple(terms))))
        return " + ".join(parts) if parts else "0"

    def mask_of(self, read: TensorRead, guards: tuple[tuple[Expr, bool], ...]) -> str | None:
        used: set[Var] = set()
        for x in list(read.indices) + [g for g, _ in guards]:
            used |= {v for v in walk(x) if isinstance(v, Var)}
        parts = sorted({self.masks[v] for v in used if v in self.masks})
        for cond, polarity in guards:
            c = self.value(cond, ())
            parts.append(c if polarity else f"({c} == 0)")
        if not parts:
            return None
        if len(parts) == 1:
            return parts[0]
        return self.emit(" & ".join(f"({p})" for p in parts), ("mask", tuple(parts)))

    def load_code(self, read: TensorRead, guards: tuple[tuple[Expr, bool], ...], widen: bool) -> str:
        t = read.tensor
        if t.name not in self.pointers:
            raise KeyError(f"tensor {t.name!r} is read but is not an argument of this kernel")
        off = self.offset(read, guards)
        mask = self.mask_of(read, guards)
        args = f"{self.pointers[t.name]} + ({off})"
        if mask is not None:
            args += f", mask={mask}, other=0"
        code = f"tl.load({args})"
        store = self.storage_of(t)
        if widen and store in ("float16", "bfloat16"):
            code += ".to(tl.float32)"
        return code

    def native(self, e: Expr, dot_type: str) -> str:
        """`e` in `dot_type` for `tl.dot`: a plain read of a tensor stored so is loaded
        as is (zero where a select guards it off); anything else is computed and cast."""
        guards: tuple[tuple[Expr, bool], ...] = ()
        x = e
        while isinstance(x, Cast) and is_float(x.dtype):
            x = x.value
        if isinstance(x, Select) and isinstance(x.other, Const) and float(x.other.value) == 0.0:
            guards = ((x.cond, True),)
            x = x.then
            while isinstance(x, Cast) and is_float(x.dtype):
                x = x.value
        if isinstance(x, TensorRead) and self.storage_of(x.tensor) == dot_type and x not in self.known:
            return self.emit(self.load_code(x, guards, widen=False), ("native", x, guards))
        return self.emit(f"({self.value(e)}).to({TL_TYPES[dot_type]})", ("native", e))
