"""Readable text for expressions and loop-nest pseudo-code.

Loop variables print as their loop names (`i.0`); when two stages both have a loop of
that name, as `stage/loop`.

Example:
    >>> from tensortune import te
    >>> A = te.placeholder((4, 4), name="A")
    >>> B = te.compute((4, 4), lambda i, j: te.exp(A[j, i]), name="B")
    >>> s = te.create_schedule(B)
    >>> s[B].vectorize("j")
    >>> print(s)
    kernel(A: float32[4, 4], B: float32[4, 4]):
      for i in 0..4:
        vectorize for j in 0..4:
          B[i, j] = exp(A[j, i])
"""

from __future__ import annotations

from collections.abc import Mapping

from .expr import (ARITH_OPS, COMPARE_OPS, Binary, BufferLoad, Call, Cast, Compare, Const, Expr, IterVar, Logical,
                   Not, Reduce, Select, TensorRead, Var)
from .ir import Allocate, For, IfThenElse, LoweredFunc, Seq, Stmt, Store, walk_stmts


def expr_str(e: Expr, names: Mapping[Var, str] | None = None) -> str:
    def go(x: Expr) -> str:
        if isinstance(x, Const):
            if isinstance(x.value, bool):
                return str(x.value)
            return repr(x.value) if isinstance(x.value, float) else str(x.value)
        if isinstance(x, Var):
            return names.get(x, x.name.split("/")[-1]) if names else x.name.split("/")[-1]
        if isinstance(x, IterVar):
            return x.name
        if isinstance(x, Binary):
            if x.op in ("min", "max"):
                return f"{x.op}({go(x.a)}, {go(x.b)})"
            return f"({go(x.a)} {ARITH_OPS[x.op]} {go(x.b)})"
        if isinstance(x, Compare):
            return f"({go(x.a)} {COMPARE_OPS[x.op]} {go(x.b)})"
        if isinstance(x, Logical):
            return f"({go(x.a)} {x.op} {go(x.b)})"
        if isinstance(x, Not):
            return f"(not {go(x.a)})"
        if isinstance(x, Select):
            return f"select({go(x.cond)}, {go(x.then)}, {go(x.other)})"
        if isinstance(x, Call):
            return f"{x.name}({', '.join(go(a) for a in x.args)})"
        if isinstance(x, Cast):
            return f"{x.dtype}({go(x.value)})"
        if isinstance(x, TensorRead):
            return f"{x.tensor.name}[{', '.join(go(i) for i in x.indices)}]"
        if isinstance(x, BufferLoad):
            return f"{x.buffer.name}[{', '.join(go(i) for i in x.indices)}]"
        if isinstance(x, Reduce):
            return f"{x.combiner}({go(x.source)}, axis=[{', '.join(a.name for a in x.axes)}])"
        return repr(x)

    return go(e)


def _strip(text: str) -> str:
    """Drop one pair of enclosing parentheses."""
    if not (text.startswith("(") and text.endswith(")")):
        return text
    depth = 0
    for k, ch in enumerate(text):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and k < len(text) - 1:
            return text
    return text[1:-1]


def _var_names(s: Stmt) -> dict[Var, str]:
    loops = [x for x in walk_stmts(s) if isinstance(x, For)]
    short: dict[str, set[str]] = {}
    for f in loops:
        short.setdefault(f.loop, set()).add(f.var.name)
    return {f.var: f.loop if len(short[f.loop]) == 1 else f.var.name for f in loops}


def stmt_str(s: Stmt, indent: int = 0, names: Mapping[Var, str] | None = None) -> str:
    names = names if names is not None else _var_names(s)
    lines: list[str] = []

    def emit(x: Stmt, depth: int) -> None:
        pad = "  " * depth
        if isinstance(x, Seq):
            for c in x.stmts:
                emit(c, depth)
        elif isinstance(x, For):
            prefix = "" if x.kind == "serial" else f"{x.kind} "
            lines.append(f"{pad}{prefix}for {names.get(x.var, x.loop)} in 0..{x.extent}:")
            emit(x.body, depth + 1)
        elif isinstance(x, IfThenElse):
            lines.append(f"{pad}if {_strip(expr_str(x.cond, names))}:")
            emit(x.then, depth + 1)
        elif isinstance(x, Allocate):
            b = x.buffer
            lines.append(f"{pad}allocate {b.name}: {b.dtype}[{', '.join(map(str, b.shape))}] ({b.scope})")
            emit(x.body, depth)
        elif isinstance(x, Store):
            target = f"{x.buffer.name}[{', '.join(expr_str(i, names) for i in x.indices)}]"
            v = x.value
            if (x.role == "update" and isinstance(v, Binary) and v.op == "add" and isinstance(v.a, BufferLoad)
                    and v.a.buffer == x.buffer):
                lines.append(f"{pad}{target} += {_strip(expr_str(v.b, names))}")
            else:
                lines.append(f"{pad}{target} = {expr_str(v, names)}")
        else:
            lines.append(f"{pad}{x!r}")

    emit(s, indent)
    return "\n".join(lines)


def func_str(f: LoweredFunc) -> str:
    args = ", ".join(f"{b.name}: {b.dtype}[{', '.join(map(str, b.shape))}]" for b in f.args)
    return f"{f.name}({args}):\n" + stmt_str(f.body, 1)
