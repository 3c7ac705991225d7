"""Constraint expressions: parsed into a tree of allowed nodes and evaluated by closures.

A constraint string is never handed to `eval`: it is parsed with `ast`, every node is
checked against a short list (arithmetic, comparisons, `and`/`or`/`not`, `x if c else y`,
literals, indexing, parameter names and a few functions: min, max, abs, len, int, float,
round, all, any, sum, divmod, log2, ceil, floor, sqrt), and the tree is turned into
nested Python closures. Attribute access, comprehensions, lambdas, keywords and every
other name are errors that say what is allowed, so no expression can reach anything but
the parameters' values. Powers, shifts and repetitions that would build huge values
are refused when evaluated.

Example:
    >>> fn, names = compile_expression("BLOCK_M * BLOCK_K <= 8192 and max(BLOCK_M, 16) % 16 == 0")
    >>> sorted(names), fn({"BLOCK_M": 64, "BLOCK_K": 64})
    (['BLOCK_K', 'BLOCK_M'], True)
    >>> compile_expression("().__class__")
    Traceback (most recent call last):
    ...
    tensortune.space.params.SpaceError: constraint '().__class__' uses attribute access (.__class__), which constraints do not allow; they may use arithmetic, comparisons, and/or/not, x if c else y, literals, indexing, parameter names and the functions abs, all, any, ceil, divmod, float, floor, int, len, log2, max, min, round, sqrt, sum
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping
from typing import Any

from .params import SpaceError

FUNCTIONS: dict[str, Callable[..., Any]] = {
    "min": min, "max": max, "abs": abs, "len": len, "int": int, "float": float,
    "round": round, "all": all, "any": any, "sum": sum, "divmod": divmod,
    "log2": math.log2, "ceil": math.ceil, "floor": math.floor, "sqrt": math.sqrt,
}
CONSTANTS = {"True": True, "False": False, "None": None}
MAX_BITS = 4096  # an integer result longer than this is refused (a power or shift gone wild)
MAX_LENGTH = 100_000  # a string or sequence built by repetition longer than this is refused

Values = Mapping[str, Any]
Node = Callable[[Values], Any]


class ExpressionError(ArithmeticError):
    """An allowed expression whose value would be unreasonably large."""


def _power(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int) and not isinstance(b, bool) and b > 0 \
            and abs(a) > 1 and b * max(1, abs(a).bit_length()) > MAX_BITS:
        raise ExpressionError(f"{a} ** {b} would have more than {MAX_BITS} bits")
    return operator.pow(a, b)


def _shift(a: Any, b: Any) -> Any:
    if isinstance(b, int) and b > MAX_BITS:
        raise ExpressionError(f"shift by {b} would have more than {MAX_BITS} bits")
    return operator.lshift(a, b)


def _times(a: Any, b: Any) -> Any:
    for seq, n in ((a, b), (b, a)):
        if isinstance(seq, (str, tuple, list)) and isinstance(n, int) and len(seq) * n > MAX_LENGTH:
            raise ExpressionError(f"repetition would be longer than {MAX_LENGTH}")
    return operator.mul(a, b)


_BINARY = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: _times, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: _power, ast.LShift: _shift,
    ast.RShift: operator.rshift, ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor,
}
_UNARY = {ast.Not: operator.not_, ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}
_COMPARE = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
    ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}
ALLOWED = ("arithmetic, comparisons, and/or/not, x if c else y, literals, indexing, parameter names and the "
           f"functions {', '.join(sorted(FUNCTIONS))}")
_DESCRIBED = {
    ast.Attribute: "attribute access", ast.Lambda: "lambda", ast.ListComp: "a comprehension",
    ast.SetComp: "a comprehension", ast.DictComp: "a comprehension", ast.GeneratorExp: "a generator",
    ast.Starred: "starred arguments", ast.NamedExpr: "assignment (:=)", ast.JoinedStr: "f-strings",
    ast.Dict: "dict literals", ast.Set: "set literals", ast.Await: "await", ast.Yield: "yield",
}


def compile_expression(text: str) -> tuple[Node, frozenset[str]]:
    """(a function of the parameter values, the parameter names it reads) for `text`;
    SpaceError naming the part of `text` that is not allowed."""
    if not isinstance(text, str):
        raise SpaceError(f"a constraint expression must be a string, got {type(text).__name__}")
    if len(text) > 10_000:
        raise SpaceError(f"constraint of {len(text)} characters is too long to be a constraint")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise SpaceError(f"constraint {text!r} is not a valid Python expression: {exc.msg}") from exc
    except (RecursionError, MemoryError, ValueError) as exc:
        raise SpaceError(f"constraint {text[:80]!r}... is nested too deep ({type(exc).__name__})") from None
    names: set[str] = set()
    try:
        return _Compiler(text, names).node(tree.body), frozenset(names)
    except RecursionError:
        raise SpaceError(f"constraint {text[:80]!r}... is nested too deep") from None


class _Compiler:
    def __init__(self, text: str, names: set[str]) -> None:
        self.text = text
        self.names = names

    def refuse(self, node: ast.AST, what: str | None = None) -> SpaceError:
        if what is None:
            what = _DESCRIBED.get(type(node), type(node).__name__)
            if isinstance(node, ast.Attribute):
                what = f"attribute access (.{node.attr})"
        return SpaceError(f"constraint {self.text!r} uses {what}, which constraints do not allow; "
                          f"they may use {ALLOWED}")

    def node(self, node: ast.AST) -> Node:
        method = getattr(self, f"visit_{type(node).__name__}", None)
        if method is None:
            raise self.refuse(node)
        return method(node)

    def visit_Constant(self, node: ast.Constant) -> Node:
        value = node.value
        if not isinstance(value, (int, float, str, bool, type(None))) or isinstance(value, complex):
            raise self.refuse(node, f"the literal {value!r}")
        return lambda values: value

    def visit_Name(self, node: ast.Name) -> Node:
        name = node.id
        if name in CONSTANTS:
            constant = CONSTANTS[name]
            return lambda values: constant
        if name in FUNCTIONS:
            raise self.refuse(node, f"the function {name} without calling it")
        self.names.add(name)
        return lambda values: values[name]

    def visit_BinOp(self, node: ast.BinOp) -> Node:
        op = _BINARY.get(type(node.op))
        if op is None:
            raise self.refuse(node, f"the operator {type(node.op).__name__}")
        left, right = self.node(node.left), self.node(node.right)
        return lambda values: op(left(values), right(values))

    def visit_UnaryOp(self, node: ast.UnaryOp) -> Node:
        op = _UNARY[type(node.op)]
        operand = self.node(node.operand)
        return lambda values: op(operand(values))

    def visit_BoolOp(self, node: ast.BoolOp) -> Node:
        parts = [self.node(v) for v in node.values]
        if isinstance(node.op, ast.And):
            def all_of(values: Values) -> Any:
                result: Any = True
                for part in parts:
                    result = part(values)
                    if not result:
                        return result
                return result
            return all_of

        def any_of(values: Values) -> Any:
            result: Any = False
            for part in parts:
                result = part(values)
                if result:
                    return result
            return result
        return any_of

    def visit_Compare(self, node: ast.Compare) -> Node:
        first = self.node(node.left)
        steps = [(_COMPARE[type(op)], self.node(right)) for op, right in zip(node.ops, node.comparators)]
        if len(steps) == 1:
            (op, right), = steps
            return lambda values: op(first(values), right(values))

        def chain(values: Values) -> bool:
            left = first(values)
            for op, right in steps:
                value = right(values)
                if not op(left, value):
                    return False
                left = value
            return True
        return chain

    def visit_IfExp(self, node: ast.IfExp) -> Node:
        test, body, orelse = self.node(node.test), self.node(node.body), self.node(node.orelse)
        return lambda values: body(values) if test(values) else orelse(values)

    def visit_Call(self, node: ast.Call) -> Node:
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            called = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
            raise self.refuse(node, f"a call of {called}")
        if node.keywords:
            raise self.refuse(node, "keyword arguments")
        fn = FUNCTIONS[node.func.id]
        args = [self.node(a) for a in node.args]
        return lambda values: fn(*[a(values) for a in args])

    def visit_Tuple(self, node: ast.Tuple) -> Node:
        items = [self.node(e) for e in node.elts]
        return lambda values: tuple(i(values) for i in items)

    def visit_List(self, node: ast.List) -> Node:
        items = [self.node(e) for e in node.elts]
        return lambda values: [i(values) for i in items]

    def visit_Subscript(self, node: ast.Subscript) -> Node:
        container, index = self.node(node.value), self.node(node.slice)
        return lambda values: container(values)[index(values)]

    def visit_Slice(self, node: ast.Slice) -> Node:
        parts = [self.node(p) if p is not None else (lambda values: None) for p in (node.lower, node.upper, node.step)]
        return lambda values: slice(*(p(values) for p in parts))
