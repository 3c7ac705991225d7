"""The lowered loop-nest program: loops, guards, stores and allocations over buffers.

This is what code generators print and what feature extractors walk. Every loop starts
at 0 and has a constant extent; tails of non-dividing splits are `IfThenElse` guards.

Example:
    >>> from tensortune.te.expr import Buffer, Var, const
    >>> b = Buffer("x", (4,), "float32")
    >>> loop = For(Var("i"), 4, "vectorize", Store(b, (Var("i"),), const(0.0), "x"), "x", "i", "spatial")
    >>> [f.loop for f in loops(loop)]
    ['i']
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from .expr import Buffer, Expr, Var

LOOP_KINDS = ("serial", "parallel", "vectorize", "unroll")


class Stmt:
    __slots__ = ()

    def __str__(self) -> str:
        from .printer import stmt_str
        return stmt_str(self)


@dataclass(frozen=True, repr=False)
class For(Stmt):
    var: Var
    extent: int
    kind: str  # one of LOOP_KINDS
    body: Stmt
    stage: str
    loop: str  # the schedule's loop name
    axis_kind: str  # "spatial" or "reduce"


@dataclass(frozen=True, repr=False)
class Seq(Stmt):
    stmts: tuple[Stmt, ...]


@dataclass(frozen=True, repr=False)
class IfThenElse(Stmt):
    cond: Expr
    then: Stmt


@dataclass(frozen=True, repr=False)
class Store(Stmt):
    buffer: Buffer
    indices: tuple[Expr, ...]
    value: Expr
    stage: str
    role: str = "compute"  # "compute", "init" (reduction start) or "update" (reduction step)


@dataclass(frozen=True, repr=False)
class Allocate(Stmt):
    buffer: Buffer
    body: Stmt


@dataclass(frozen=True)
class LoweredFunc:
    """A whole program: arguments in call order, temporaries inside `body`."""

    name: str
    args: tuple[Buffer, ...]
    body: Stmt

    def __str__(self) -> str:
        from .printer import func_str
        return func_str(self)


def seq(stmts: list[Stmt]) -> Stmt:
    flat: list[Stmt] = []
    for s in stmts:
        flat.extend(s.stmts if isinstance(s, Seq) else (s,))
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))  # (an empty Seq is a no-op)


def stmt_children(s: Stmt) -> tuple[Stmt, ...]:
    if isinstance(s, Seq):
        return s.stmts
    if isinstance(s, (For, Allocate)):
        return (s.body,)
    if isinstance(s, IfThenElse):
        return (s.then,)
    return ()


def walk_stmts(s: Stmt) -> Iterator[Stmt]:
    yield s
    for c in stmt_children(s):
        yield from walk_stmts(c)


def loops(s: Stmt) -> list[For]:
    return [x for x in walk_stmts(s) if isinstance(x, For)]


def stores_with_loops(s: Stmt, outer: tuple[For, ...] = ()) -> Iterator[tuple[Store, tuple[For, ...]]]:
    """Each store with the loops around it, outermost first."""
    if isinstance(s, Store):
        yield s, outer
        return
    inner = outer + (s,) if isinstance(s, For) else outer
    for c in stmt_children(s):
        yield from stores_with_loops(c, inner)
