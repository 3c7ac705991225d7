"""Walking and rewriting expression trees: children, post-order maps, substitution, reads.

Example:
    >>> from tensortune.te.expr import IterVar, Var
    >>> i = IterVar("i", 4)
    >>> str(substitute(i * 2 + 1, {i: Var("x")}))
    '((x * 2) + 1)'
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from .expr import Binary, BufferLoad, Call, Cast, Compare, Const, Expr, IterVar, Logical, Not, Reduce, Select, TensorRead, Var

_LEAVES = (Const, Var, IterVar)


def children(e: Expr) -> tuple[Expr, ...]:
    if isinstance(e, _LEAVES):
        return ()
    if isinstance(e, (Binary, Compare, Logical)):
        return (e.a, e.b)
    if isinstance(e, Not):
        return (e.a,)
    if isinstance(e, Select):
        return (e.cond, e.then, e.other)
    if isinstance(e, Call):
        return e.args
    if isinstance(e, Cast):
        return (e.value,)
    if isinstance(e, (TensorRead, BufferLoad)):
        return e.indices
    if isinstance(e, Reduce):
        return (e.source,)
    raise TypeError(f"unknown expression node {type(e).__name__}")


def with_children(e: Expr, new: tuple[Expr, ...]) -> Expr:
    """`e` with its children replaced (the same node when nothing changed)."""
    if all(a is b for a, b in zip(new, children(e))):
        return e
    if isinstance(e, (Binary, Compare, Logical)):
        return type(e)(e.op, new[0], new[1])
    if isinstance(e, Not):
        return Not(new[0])
    if isinstance(e, Select):
        return Select(*new)
    if isinstance(e, Call):
        return Call(e.name, tuple(new))
    if isinstance(e, Cast):
        return Cast(new[0], e.dtype)
    if isinstance(e, TensorRead):
        return TensorRead(e.tensor, tuple(new))
    if isinstance(e, BufferLoad):
        return BufferLoad(e.buffer, tuple(new))
    if isinstance(e, Reduce):
        return Reduce(e.combiner, new[0], e.axes)
    return e


def map_expr(e: Expr, fn: Callable[[Expr], Expr | None]) -> Expr:
    """Post-order rewrite: `fn(node)` (after its children were rewritten) returns a
    replacement, or None to keep the node."""
    memo: dict[int, Expr] = {}

    def go(x: Expr) -> Expr:
        key = id(x)
        if key in memo:
            return memo[key]
        kids = children(x)
        y = with_children(x, tuple(go(k) for k in kids)) if kids else x
        z = fn(y)
        out = y if z is None else z
        memo[key] = out
        return out

    return go(e)


def substitute(e: Expr, mapping: Mapping[Expr, Expr]) -> Expr:
    """Replace variables (IterVar or Var, compared structurally) by expressions."""
    if not mapping:
        return e
    return map_expr(e, lambda x: mapping.get(x) if isinstance(x, (IterVar, Var)) else None)


def walk(e: Expr) -> Iterator[Expr]:
    """Every node, pre-order."""
    stack = [e]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(reversed(children(x)))


def reads(e: Expr) -> list[TensorRead]:
    return [x for x in walk(e) if isinstance(x, TensorRead)]


def itervars(e: Expr) -> set[IterVar]:
    return {x for x in walk(e) if isinstance(x, IterVar)}


def variables(e: Expr) -> set[Var]:
    return {x for x in walk(e) if isinstance(x, Var)}

