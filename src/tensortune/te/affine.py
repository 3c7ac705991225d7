"""Integer index arithmetic: constant intervals and affine forms with symbolic parts.

Bound inference asks, for an index like `(f // 16) * 8 + ii` with `f` fixed and `ii`
in [0, 7], for the region `[S + 0, S + 7]` where `S = (f // 16) * 8` is symbolic.
Anything not affine in the varying variables gives None (callers fall back to the
full extent, which is always correct).

Example:
    >>> from tensortune.te.expr import Var
    >>> f, ii = Var("f"), Var("ii")
    >>> r = symbolic_range((f // 16) * 8 + ii, {ii: (0, 7)})
    >>> str(r.base.to_expr()), r.lo, r.hi
    ('((f // 16) * 8)', 0, 7)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .expr import Binary, Const, Expr, IterVar, Select, Var, const
from .visit import walk

Range = tuple[int, int]


def interval(e: Expr, ranges: Mapping[Expr, Range] | None = None) -> Range | None:
    """Constant bounds of an integer expression; variables take `ranges` (IterVars default
    to [0, extent - 1]); None when unknown."""
    ranges = ranges or {}
    if isinstance(e, Const):
        return (int(e.value), int(e.value))
    if isinstance(e, (Var, IterVar)):
        if e in ranges:
            return ranges[e]
        return (0, e.extent - 1) if isinstance(e, IterVar) else None
    if isinstance(e, Select):
        a, b = interval(e.then, ranges), interval(e.other, ranges)
        return (min(a[0], b[0]), max(a[1], b[1])) if a and b else None
    if not isinstance(e, Binary) or e.dtype != "int32":
        return None
    a = interval(e.a, ranges)
    if e.op in ("floordiv", "mod") and isinstance(e.b, Const) and int(e.b.value) > 0 and a:
        c = int(e.b.value)
        if e.op == "floordiv":
            return (a[0] // c, a[1] // c)
        return (a[0] % c, a[1] % c) if a[0] // c == a[1] // c else (0, c - 1)
    b = interval(e.b, ranges)
    if a is None or b is None:
        return None
    if e.op == "add":
        return (a[0] + b[0], a[1] + b[1])
    if e.op == "sub":
        return (a[0] - b[1], a[1] - b[0])
    if e.op == "mul":
        p = [a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1]]
        return (min(p), max(p))
    if e.op == "min":
        return (min(a[0], b[0]), min(a[1], b[1]))
    if e.op == "max":
        return (max(a[0], b[0]), max(a[1], b[1]))
    return None


@dataclass(frozen=True)
class Affine:
    """`sum(coef * atom) + offset`; atoms are variables or opaque sub-expressions."""

    terms: tuple[tuple[Expr, int], ...]
    offset: int = 0

    @staticmethod
    def of(e: Expr) -> Affine:
        terms: dict[Expr, int] = {}
        offset = _collect(e, 1, terms)
        return Affine(tuple(sorted(((a, c) for a, c in terms.items() if c), key=lambda t: str(t[0]))), offset)

    def to_expr(self) -> Expr:
        out: Expr | None = None
        for atom, coef in self.terms:
            term = atom if coef == 1 else Binary("mul", atom, const(coef))
            out = term if out is None else Binary("add", out, term)
        if out is None:
            return const(self.offset)
        return Binary("add", out, const(self.offset)) if self.offset else out

    def interval(self, ranges: Mapping[Expr, Range] | None = None) -> Range | None:
        lo = hi = self.offset
        for atom, coef in self.terms:
            r = interval(atom, ranges)
            if r is None:
                return None
            lo += min(coef * r[0], coef * r[1])
            hi += max(coef * r[0], coef * r[1])
        return (lo, hi)


def _collect(e: Expr, scale: int, terms: dict[Expr, int]) -> int:
    if isinstance(e, Const):
        return scale * int(e.value)
    if isinstance(e, Binary) and e.op in ("add", "sub"):
        left = _collect(e.a, scale, terms)
        return left + _collect(e.b, scale if e.op == "add" else -scale, terms)
    if isinstance(e, Binary) and e.op == "mul":
        if isinstance(e.b, Const):
            return _collect(e.a, scale * int(e.b.value), terms)
        if isinstance(e.a, Const):
            return _collect(e.b, scale * int(e.a.value), terms)
    terms[e] = terms.get(e, 0) + scale
    return 0


@dataclass(frozen=True)
class SymbolicRange:
    """Values `base + lo ... base + hi`; `base` depends only on fixed variables."""

    base: Affine
    lo: int
    hi: int

    @property
    def extent(self) -> int:
        return self.hi - self.lo + 1


def symbolic_range(e: Expr, varying: Mapping[Expr, Range]) -> SymbolicRange | None:
    """The range of `e` while the `varying` variables sweep their ranges and every other
    variable stays fixed; None when `e` is not affine in the varying ones."""
    aff = Affine.of(e)
    fixed: list[tuple[Expr, int]] = []
    lo = hi = aff.offset
    for atom, coef in aff.terms:
        names = {x for x in walk(atom) if isinstance(x, (Var, IterVar))}
        moving = {x for x in names if x in varying}
        if not moving:
            fixed.append((atom, coef))
            continue
        if moving != names:
            return None
        r = interval(atom, varying)
        if r is None:
            return None
        lo += min(coef * r[0], coef * r[1])
        hi += max(coef * r[0], coef * r[1])
    return SymbolicRange(Affine(tuple(fixed)), lo, hi)
