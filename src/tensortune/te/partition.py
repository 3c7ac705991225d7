"""Loop partitioning: full tiles without guards, tails with them, interiors without borders.

A split whose factor does not divide the extent leaves guards (`if i.0 * 16 + i.1 < 56`)
inside the tile; evaluated in every iteration of an unrolled, vectorized inner loop they
cost a lot. For each loop whose guards become provably true on a prefix of its range,
the loop is cut in two: the prefix without those guards and the rest with them. A loop
whose whole body is a guard false past some iteration is shortened instead (the tail of
a vectorized tile becomes a shorter constant-extent loop, not a masked one).

A `select` that loads on one side (padding: `select(x >= 1 and x < 57, data[x - 1], 0)`)
is cut out the same way, as Halide partitions boundary conditions: the loop is split
where the condition becomes provably true or false, and in each piece the select is
replaced by the side it takes. GCC 12 vectorizes such a conditional load as a masked
gather (measured on the padding of a 64 x 56 x 56 tensor: 33 us, against 8 us for the
partitioned loops, whose interior is a plain copy).

Example:
    >>> from tensortune import te
    >>> A = te.placeholder((10,), name="A")
    >>> B = te.compute((10,), lambda i: A[i] * 2.0, name="B")
    >>> s = te.create_schedule(B)
    >>> _ = s[B].split("i", 4)
    >>> print(partition_tails(s.lower()).body)
    for i.0 in 0..2:
      for i.1 in 0..4:
        B[((i.0 * 4) + i.1)] = (A[((i.0 * 4) + i.1)] * 2.0)
    for i.0 in 0..1:
      for i.1 in 0..2:
        B[(((i.0 * 4) + i.1) + 8)] = (A[(((i.0 * 4) + i.1) + 8)] * 2.0)
"""

from __future__ import annotations

from collections.abc import Mapping

from .affine import Affine, Range, interval
from .expr import Binary, BufferLoad, Compare, Const, Expr, Logical, Not, Select, Var, const
from .ir import Allocate, For, IfThenElse, LoweredFunc, Seq, Stmt, Store, seq, walk_stmts
from .lower import guarded, normalize_index
from .visit import map_expr, substitute, variables, walk

MAX_COPIES = 16  # a loop nest is copied at most this many times by partitioning
MAX_SELECT_COPIES = 16  # ... and at most this many times by cutting out selects


def partition_tails(func: LoweredFunc) -> LoweredFunc:
    """`func` with guarded tails split off the loops that carry them."""
    p = _Partition()
    return LoweredFunc(func.name, func.args, p.stmt(func.body, {}))


def provable(cond: Expr, ranges: Mapping[Expr, Range], value: bool = True) -> bool:
    """Whether `cond` is `value` for every value of its variables within `ranges`."""
    if isinstance(cond, Logical) and cond.op == "and":
        if value:
            return provable(cond.a, ranges) and provable(cond.b, ranges)
        return provable(cond.a, ranges, False) or provable(cond.b, ranges, False)
    if isinstance(cond, Const):
        return bool(cond.value) == value
    if not isinstance(cond, Compare) or cond.op in ("eq", "ne") or cond.a.dtype != "int32":
        return False
    r = interval(Binary("sub", cond.a, cond.b), ranges)
    if r is None:
        return False
    lo, hi = r
    if value:
        return {"lt": hi < 0, "le": hi <= 0, "gt": lo > 0, "ge": lo >= 0}[cond.op]
    return {"lt": lo >= 0, "le": lo > 0, "gt": hi <= 0, "ge": hi < 0}[cond.op]


def _conjuncts(cond: Expr) -> list[Expr]:
    if isinstance(cond, Logical) and cond.op == "and":
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [cond]


class _Partition:
    def __init__(self) -> None:
        self.copies = 1
        self.select_copies = 1

    def stmt(self, s: Stmt, ranges: dict[Expr, Range]) -> Stmt:
        if isinstance(s, Seq):
            return seq([self.stmt(c, ranges) for c in s.stmts])
        if isinstance(s, Allocate):
            return Allocate(s.buffer, self.stmt(s.body, ranges))
        if isinstance(s, IfThenElse):
            if provable(s.cond, ranges, False):
                return Seq(())  # never taken
            kept = [c for c in _conjuncts(s.cond) if not provable(c, ranges)]
            return guarded(kept, self.stmt(s.then, ranges))
        if isinstance(s, For):
            return self.loop(s, ranges)
        if isinstance(s, Store) and _loading_selects(s):
            return Store(s.buffer, s.indices, map_expr(s.value, lambda x: _decide(x, ranges)), s.stage, s.role)
        return s

    def loop(self, f: For, ranges: dict[Expr, Range]) -> Stmt:
        inner = dict(ranges)
        for x in walk_stmts(f.body):
            if isinstance(x, For):
                old = inner.get(x.var)
                inner[x.var] = (0, max(x.extent - 1, old[1] if old else 0))
        conds = [c for x in walk_stmts(f.body) if isinstance(x, IfThenElse) for c in _conjuncts(x.cond)
                 if f.var in variables(c)]
        if not conds:
            return self.select_cuts(f, ranges, inner)
        body = f.body
        if isinstance(body, IfThenElse):  # the loop's whole body is guarded: drop dead iterations
            own = [c for c in _conjuncts(body.cond) if f.var in variables(c)]
            t = _prefix(f, own, inner)
            if t < f.extent and provable(body.cond, {**inner, f.var: (t, f.extent - 1)}, False):
                short = For(f.var, t, f.kind, body, f.stage, f.loop, f.axis_kind)
                return self.select_cuts(short, ranges, inner) if t else Seq(())
        if f.kind in ("vectorize", "unroll"):  # (cutting a register tile in two does not pay)
            return self.select_cuts(f, ranges, inner)
        t = _prefix(f, conds, inner)
        if t == f.extent or 2 * t < f.extent or self.copies >= MAX_COPIES:  # worth it when most is full
            if t < f.extent and f.extent > 1 and self.copies < MAX_COPIES:
                switched = self.unswitch(f, ranges)
                if switched is not None:
                    return switched
            return self.select_cuts(f, ranges, inner)
        self.copies *= 2
        full = self._with_body(f, self.stmt(f.body, {**ranges, f.var: (0, t - 1)}), t)
        shifted = _shift(f.body, f.var, t)
        tail = self._with_body(f, self.stmt(shifted, {**ranges, f.var: (0, f.extent - t - 1)}), f.extent - t)
        return seq([full, tail])

    def unswitch(self, f: For, ranges: dict[Expr, Range]) -> Stmt | None:
        """`f` with its body in versions chosen per iteration, for loops whose guards no
        prefix proves (a fused parallel loop over tiles: `(f % 22) * 32 + j < 688`). Per
        guard whose whole-body condition depends on `f`: where it holds (a full tile), the
        body without that guard; elsewhere (the tail tile) the guarded body, with the
        tile's index fixed when the condition leaves it one value (`f % 22` is 21), so
        that the guards there shorten their loops to the tail's constant extents. None
        when no guard has such a condition."""
        own: dict[Expr, Range] = {}
        for x in walk_stmts(f.body):
            if isinstance(x, For):
                own[x.var] = (0, max(x.extent - 1, own.get(x.var, (0, 0))[1]))
        outer = {**ranges, f.var: (0, f.extent - 1)}
        groups: dict[Compare, Affine] = {}
        seen: set[Expr] = set()
        for x in walk_stmts(f.body):
            if not isinstance(x, IfThenElse):
                continue
            for c in _conjuncts(x.cond):
                names = variables(c)
                if c in seen or f.var not in names or not any(v in own for v in names) \
                        or provable(c, {**outer, **own}):
                    continue
                seen.add(c)
                whole = _whole_body(c, own)
                if whole is None or f.var not in variables(whole[0]) or provable(whole[0], outer, False):
                    continue
                groups.setdefault(whole[0], whole[1])
        if not groups:
            return None
        return self._with_body(f, self._switch(f.body, list(groups.items()), outer, own))

    def _switch(self, body: Stmt, groups: list[tuple[Compare, Affine]], ranges: dict[Expr, Range],
                own: Mapping[Expr, Range]) -> Stmt:
        if not groups or self.copies >= MAX_COPIES:
            return self.stmt(body, ranges)
        (cond, form), rest = groups[0], groups[1:]
        self.copies *= 2
        fast = self._switch(_drop_conjuncts(body, lambda c: (w := _whole_body(c, own)) is not None and w[0] == cond),
                            rest, ranges, own)
        pinned = _pinned(cond.op, form, ranges)
        tail = body if pinned is None else _replace(body, {pinned[0]: const(pinned[1])})
        slow = self._switch(tail, rest, ranges, own)
        return seq([IfThenElse(cond, fast), IfThenElse(Not(cond), slow)])

    def select_cuts(self, f: For, ranges: dict[Expr, Range], inner: dict[Expr, Range]) -> Stmt:
        """`f` cut where the conditions of loading selects in it become provably true or
        false (each piece is processed further, its selects decided where provable)."""
        whole = {**inner, f.var: (0, f.extent - 1)}
        conds = [c for x in walk_stmts(f.body) if isinstance(x, Store) for sel in _loading_selects(x)
                 if not provable(sel.cond, whole) and not provable(sel.cond, whole, False)
                 for c in _conjuncts(sel.cond) if f.var in variables(c)]
        cuts: set[int] = set()
        for c in conds:
            for value in (True, False):
                cuts.add(_prefix(f, [c], inner, value))
                cuts.add(f.extent - _suffix(f, c, inner, value))
        bounds = sorted(x for x in cuts if 0 < x < f.extent)
        if not bounds or self.select_copies * (len(bounds) + 1) > MAX_SELECT_COPIES:
            return self._with_body(f, self.stmt(f.body, {**ranges, f.var: (0, f.extent - 1)}))
        self.select_copies *= len(bounds) + 1
        pieces = []
        for lo, hi in zip([0] + bounds, bounds + [f.extent]):
            body = _shift(f.body, f.var, lo) if lo else f.body
            pieces.append(self._with_body(f, self.stmt(body, {**ranges, f.var: (0, hi - lo - 1)}), hi - lo))
        return seq(pieces)

    @staticmethod
    def _with_body(f: For, body: Stmt, extent: int | None = None) -> Stmt:
        if isinstance(body, Seq) and not body.stmts:
            return body
        return For(f.var, f.extent if extent is None else extent, f.kind, body, f.stage, f.loop, f.axis_kind)


def _prefix(f: For, conds: list[Expr], ranges: dict[Expr, Range], value: bool = True) -> int:
    """The largest t such that every condition is provably `value` while f.var < t."""
    lo, hi = 0, f.extent
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if all(provable(c, {**ranges, f.var: (0, mid - 1)}, value) for c in conds):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _suffix(f: For, cond: Expr, ranges: dict[Expr, Range], value: bool) -> int:
    """The largest t such that `cond` is provably `value` while f.var >= extent - t."""
    lo, hi = 0, f.extent
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if provable(cond, {**ranges, f.var: (f.extent - mid, f.extent - 1)}, value):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _loading_selects(s: Store) -> list[Select]:
    """The selects of a store's value with a load on a side (conditional loads)."""
    return [x for x in walk(s.value) if isinstance(x, Select)
            and any(isinstance(y, BufferLoad) for side in (x.then, x.other) for y in walk(side))]


def _decide(x: Expr, ranges: Mapping[Expr, Range]) -> Expr | None:
    """A select whose condition is provably true or false, replaced by that side; its
    provably true conjuncts dropped otherwise."""
    if not isinstance(x, Select):
        return None
    if provable(x.cond, ranges):
        return x.then
    if provable(x.cond, ranges, False):
        return x.other
    kept = [c for c in _conjuncts(x.cond) if not provable(c, ranges)]
    if len(kept) == len(_conjuncts(x.cond)):
        return None
    cond = kept[0]
    for c in kept[1:]:
        cond = Logical("and", cond, c)
    return Select(cond, x.then, x.other)


def _whole_body(cond: Expr, own: Mapping[Expr, Range]) -> tuple[Compare, Affine] | None:
    """A condition on the variables outside a loop body that implies `cond` for every value
    of the body's own loop variables (`own`): `cond` at its worst corner, as
    `form OP 0` (returned with `form`). None when `cond` is no comparison affine in those
    variables."""
    if not isinstance(cond, Compare) or cond.op not in ("lt", "le", "gt", "ge") or cond.a.dtype != "int32":
        return None
    aff = Affine.of(Binary("sub", cond.a, cond.b))
    upper = cond.op in ("lt", "le")  # the worst corner maximizes a - b, else minimizes it
    kept: list[tuple[Expr, int]] = []
    worst = aff.offset
    for atom, coef in aff.terms:
        names = variables(atom)
        moving = {v for v in names if v in own}
        if not moving:
            kept.append((atom, coef))
            continue
        if moving != names:
            return None
        r = interval(atom, own)
        if r is None:
            return None
        lo, hi = min(coef * r[0], coef * r[1]), max(coef * r[0], coef * r[1])
        worst += hi if upper else lo
    form = Affine(tuple(kept), worst)
    return Compare(cond.op, form.to_expr(), const(0)), form


def _pinned(op: str, form: Affine, ranges: Mapping[Expr, Range]) -> tuple[Expr, int] | None:
    """(atom, value) when `form OP 0` failing leaves the one atom of `form` a single value
    within its range (the last tile's index), else None."""
    if len(form.terms) != 1:
        return None
    atom, coef = form.terms[0]
    r = interval(atom, ranges)
    if r is None:
        return None
    lo, hi = r
    off = form.offset
    # where the condition fails: coef * atom + off >= 0 (lt), >= 1 (le), <= 0 (gt), <= -1 (ge)
    if op in ("lt", "le"):
        need = (0 if op == "lt" else 1) - off  # coef * atom >= need
        if coef > 0:
            lo = max(lo, -(-need // coef))
        else:
            hi = min(hi, need // coef)  # (coef < 0: dividing flips the inequality; // floors)
    else:
        need = (0 if op == "gt" else -1) - off  # coef * atom <= need
        if coef > 0:
            hi = min(hi, need // coef)
        else:
            lo = max(lo, -(-need // coef))
    return (atom, lo) if lo == hi else None


def _replace(s: Stmt, mapping: Mapping[Expr, Expr]) -> Stmt:
    """`s` with the sub-expressions in `mapping` replaced, its indices normalized."""
    def fn(x: Expr) -> Expr | None:
        return mapping.get(x)

    return _rewrite(s, lambda e: map_expr(e, fn))


def _drop_conjuncts(s: Stmt, dropped) -> Stmt:
    """`s` without the conjuncts of its guards for which `dropped(conjunct)` (known to hold)."""
    if isinstance(s, Seq):
        return Seq(tuple(_drop_conjuncts(c, dropped) for c in s.stmts))
    if isinstance(s, For):
        return For(s.var, s.extent, s.kind, _drop_conjuncts(s.body, dropped), s.stage, s.loop, s.axis_kind)
    if isinstance(s, Allocate):
        return Allocate(s.buffer, _drop_conjuncts(s.body, dropped))
    if isinstance(s, IfThenElse):
        kept = [c for c in _conjuncts(s.cond) if not dropped(c)]
        return guarded(kept, _drop_conjuncts(s.then, dropped))
    return s


def _shift(s: Stmt, var: Var, offset: int) -> Stmt:
    """`s` with `var` replaced by `var + offset`."""
    mapping = {var: Binary("add", var, const(offset))}
    return _rewrite(s, lambda e: substitute(e, mapping))


def _rewrite(s: Stmt, change) -> Stmt:
    """`s` with `change` applied to every expression, indices and comparisons normalized."""
    def tidy(x: Expr) -> Expr | None:
        if isinstance(x, BufferLoad):
            return BufferLoad(x.buffer, tuple(normalize_index(i) for i in x.indices))
        if isinstance(x, Compare) and x.a.dtype == "int32":
            return Compare(x.op, normalize_index(x.a), normalize_index(x.b))
        return None

    def ex(e: Expr) -> Expr:
        return map_expr(change(e), tidy)

    def go(x: Stmt) -> Stmt:
        if isinstance(x, Seq):
            return Seq(tuple(go(c) for c in x.stmts))
        if isinstance(x, For):
            return For(x.var, x.extent, x.kind, go(x.body), x.stage, x.loop, x.axis_kind)
        if isinstance(x, IfThenElse):
            return IfThenElse(ex(x.cond), go(x.then))
        if isinstance(x, Allocate):
            return Allocate(x.buffer, go(x.body))
        if isinstance(x, Store):
            return Store(x.buffer, tuple(normalize_index(ex(i)) for i in x.indices), ex(x.value), x.stage, x.role)
        return x

    return go(s)
