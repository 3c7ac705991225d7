"""The whiteboard notation of Tensor Comprehensions, parsed into the same expressions.

    C(m, n) +=! A(m, k) * B(k, n)        # sum over k (on the right only)
    Y(i, j) = X(i, j) > 0 ? X(i, j) : 0  # elementwise, with a choice
    O(n, c, h, w) max=! I(n, c, 2*h + kh, 2*w + kw) where kh in 0:3, kw in 0:3

Operators: `=` (elementwise), `+=!`, `max=!`, `min=!` (reductions, initialized).
Index extents come from the tensors they index directly; `where x in 0:N` gives the
rest. Statements are separated by newlines or `;` and may use earlier results; the
result is the tensor of the last statement. Inputs are passed as tensors or shapes.

Example:
    >>> C = parse("C(m, n) +=! A(m, k) * B(k, n)", A=(4, 3), B=(3, 5))
    >>> C.shape, [t.name for t in C.op.inputs], str(C.op.body)
    ((4, 5), ['A', 'B'], 'sum((A[m, k] * B[k, n]), axis=[k])')
"""

from __future__ import annotations

import re
from typing import Any

from . import ops
from .dtype import TEError, check_dtype
from .expr import Expr, IterVar, binary, compare, logical
from .tensor import Tensor, compute, placeholder

_TOKEN = re.compile(r"\s*(?:(?P<num>\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|\d+)|"
                    r"(?P<op>\+=!|max=!|min=!|\+=|==|!=|<=|>=|&&|\|\||//|[-+*/%()<>?:,=])|(?P<name>[A-Za-z_]\w*))")
_REDUCERS = {"+=!": "sum", "max=!": "max", "min=!": "min"}
_FUNCS = {"exp": ops.exp, "log": ops.log, "sqrt": ops.sqrt, "tanh": ops.tanh, "abs": ops.abs, "erf": ops.erf,
          "sigmoid": ops.sigmoid, "cos": ops.cos, "sin": ops.sin, "max": ops.maximum, "min": ops.minimum}
_CASTS = ("float16", "bfloat16", "float32", "float64", "int32")


def parse(text: str, dtype: str = "float32", **tensors: Tensor | tuple[int, ...]) -> Tensor:
    """Tensors defined by whiteboard statements; keyword arguments are the inputs (tensors,
    or shapes that become `dtype` placeholders)."""
    env: dict[str, Tensor] = {}
    for name, value in tensors.items():
        if isinstance(value, Tensor):
            env[name] = value
        else:
            env[name] = placeholder(tuple(value), check_dtype(dtype), name)
    result = None
    for line in re.split(r"[;\n]", text):
        line = line.split("#")[0].strip()
        if line:
            result = _Statement(line, env).build()
            env[result.name] = result
    if result is None:
        raise TEError("parse: no statement found")
    return result


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise TEError(f"parse: unexpected character {text[pos:].strip()[:1]!r} in {text!r}")
        kind = m.lastgroup or "op"
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


class _Statement:
    def __init__(self, text: str, env: dict[str, Tensor]) -> None:
        self.text, self.env = text, env
        self.toks = _tokens(text)
        self.pos = 0

    # -- token helpers --

    def peek(self) -> str | None:
        return self.toks[self.pos][1] if self.pos < len(self.toks) else None

    def take(self, expected: str | None = None) -> tuple[str, str]:
        if self.pos >= len(self.toks):
            raise TEError(f"parse: {self.text!r} ends early" + (f"; expected {expected!r}" if expected else ""))
        tok = self.toks[self.pos]
        if expected is not None and tok[1] != expected:
            raise TEError(f"parse: expected {expected!r} but found {tok[1]!r} in {self.text!r}")
        self.pos += 1
        return tok

    def name(self) -> str:
        kind, value = self.take()
        if kind != "name":
            raise TEError(f"parse: expected a name but found {value!r} in {self.text!r}")
        return value

    # -- the statement --

    def build(self) -> Tensor:
        out = self.name()
        if out in self.env:
            raise TEError(f"parse: {out!r} is already defined")
        self.take("(")
        lhs = [self.name()]
        while self.peek() == ",":
            self.take(",")
            lhs.append(self.name())
        self.take(")")
        _, op = self.take()
        if op == "+=":
            raise TEError("parse: '+=' accumulates into an existing tensor, which is not supported; use '+=!'")
        if op != "=" and op not in _REDUCERS:
            raise TEError(f"parse: expected '=', '+=!', 'max=!' or 'min=!' after {out}(...), found {op!r}")
        rhs = self.expr()
        ranges = self.where()
        if self.pos != len(self.toks):
            raise TEError(f"parse: unexpected {self.peek()!r} in {self.text!r}")
        if len(set(lhs)) != len(lhs):
            raise TEError(f"parse: repeated index on the left of {self.text!r}")
        self._infer_ranges(rhs, ranges)
        used = self._indices(rhs)
        for x in lhs:
            if x not in ranges:
                raise TEError(f"parse: cannot tell the extent of index {x!r} in {self.text!r}; add 'where {x} in 0:N'")
        reduce_names = [x for x in used if x not in lhs]
        if op == "=" and reduce_names:
            raise TEError(f"parse: index {reduce_names[0]!r} appears only on the right of {self.text!r}; use '+=!' "
                          "(or max=!/min=!) to reduce over it")
        if op != "=" and not reduce_names:
            raise TEError(f"parse: {op!r} needs an index that appears only on the right")
        raxes = [ops.reduce_axis(ranges[x], x) for x in reduce_names]

        def body(*axes: IterVar) -> Expr:
            scope = dict(zip(lhs, axes))
            scope.update({r.name: r for r in raxes})
            value = self.lower(rhs, scope)
            return ops._reduce(_REDUCERS[op], value, raxes) if op != "=" else value

        return compute(tuple(ranges[x] for x in lhs), body, name=out, axis_names=lhs)

    def where(self) -> dict[str, int]:
        ranges: dict[str, int] = {}
        if self.peek() != "where":
            return ranges
        self.take("where")
        while True:
            x = self.name()
            if self.take()[1] != "in":
                raise TEError(f"parse: expected 'where {x} in 0:N' in {self.text!r}")
            lo = int(self.take()[1])
            self.take(":")
            kind, hi = self.take()
            if lo != 0 or kind != "num":
                raise TEError(f"parse: where-ranges must be 0:N with a number N, in {self.text!r}")
            ranges[x] = int(hi)
            if self.peek() != ",":
                return ranges
            self.take(",")

    # -- expressions (an AST of tuples first; extents are known only after a full pass) --

    def expr(self) -> Any:
        cond = self.binary(0)
        if self.peek() == "?":
            self.take("?")
            a = self.expr()
            self.take(":")
            return ("select", cond, a, self.expr())
        return cond

    _LEVELS = [("||",), ("&&",), ("<", "<=", ">", ">=", "==", "!="), ("+", "-"), ("*", "/", "//", "%")]

    def binary(self, level: int) -> Any:
        if level == len(self._LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while self.peek() in self._LEVELS[level]:
            op = self.take()[1]
            left = ("bin", op, left, self.binary(level + 1))
        return left

    def unary(self) -> Any:
        if self.peek() == "-":
            self.take("-")
            return ("neg", self.unary())
        kind, value = self.take()
        if kind == "num":
            return ("num", float(value) if any(c in value for c in ".eE") else int(value))
        if value == "(":
            inner = self.expr()
            self.take(")")
            return inner
        if kind != "name":
            raise TEError(f"parse: unexpected {value!r} in {self.text!r}")
        if self.peek() == "(":
            self.take("(")
            args = [self.expr()]
            while self.peek() == ",":
                self.take(",")
                args.append(self.expr())
            self.take(")")
            if value in self.env:
                return ("read", value, args)
            if value in _FUNCS or value in _CASTS:
                return ("call", value, args)
            raise TEError(f"parse: unknown tensor or function {value!r} in {self.text!r}; inputs are "
                          f"{', '.join(self.env) or 'none'}")
        return ("index", value)

    def _walk(self, node: Any):
        yield node
        for child in node[2] if node[0] in ("read", "call") else node[1:]:
            if isinstance(child, tuple):
                yield from self._walk(child)

    def _indices(self, node: Any) -> list[str]:
        out: list[str] = []
        for n in self._walk(node):
            if n[0] == "index" and n[1] not in out:
                out.append(n[1])
        return out

    def _infer_ranges(self, rhs: Any, ranges: dict[str, int]) -> None:
        found: dict[str, tuple[int, str]] = {}
        for n in self._walk(rhs):
            if n[0] != "read":
                continue
            t = self.env[n[1]]
            if len(n[2]) != t.ndim:
                raise TEError(f"parse: {t.name} has {t.ndim} dimensions but is indexed with {len(n[2])}")
            for d, ix in enumerate(n[2]):
                if ix[0] == "index" and ix[1] not in ranges:
                    prev = found.get(ix[1])
                    where = f"dimension {d} of {t.name}"
                    if prev and prev[0] != t.shape[d]:
                        raise TEError(f"parse: index {ix[1]!r} ranges over {prev[0]} ({prev[1]}) but over "
                                      f"{t.shape[d]} ({where})")
                    found[ix[1]] = (t.shape[d], where)
        for x, (extent, _) in found.items():
            ranges.setdefault(x, extent)
        for x in self._indices(rhs):
            if x not in ranges:
                raise TEError(f"parse: cannot tell the extent of index {x!r} in {self.text!r}; add 'where {x} in 0:N'")

    def lower(self, node: Any, scope: dict[str, IterVar]) -> Any:
        kind = node[0]
        if kind == "num":
            return node[1]  # a Python number takes the dtype of what it meets
        if kind == "index":
            if node[1] not in scope:
                raise TEError(f"parse: unknown index {node[1]!r} in {self.text!r}")
            return scope[node[1]]
        if kind == "neg":
            return -self.lower(node[1], scope)
        if kind == "read":
            return self.env[node[1]][tuple(self.lower(a, scope) for a in node[2])]
        if kind == "call":
            args = [self.lower(a, scope) for a in node[2]]
            if node[1] in _CASTS:
                return ops.cast(args[0], node[1])
            return _FUNCS[node[1]](*args)
        if kind == "select":
            return ops.select(self.lower(node[1], scope), self.lower(node[2], scope), self.lower(node[3], scope))
        op, a, b = node[1], self.lower(node[2], scope), self.lower(node[3], scope)
        if op in ("&&", "||"):
            return logical("and" if op == "&&" else "or", a, b)
        if op in ("<", "<=", ">", ">=", "==", "!="):
            return compare({"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}[op], a, b)
        return binary({"+": "add", "-": "sub", "*": "mul", "/": "div", "//": "floordiv", "%": "mod"}[op], a, b)

