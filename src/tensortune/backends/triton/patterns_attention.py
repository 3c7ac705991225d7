"""The attention pattern: scores, a softmax over the keys and the weighted sum of values, in one kernel.

The graph (after inlining every stage without a reduction) must read, at the output's
own index, one `sum` over a key axis of a product `P * V`, where `V` reads only inputs
and `P` is, up to casts, `exp(c * (logit - rowmax)) * w(rowsum)`:

- `logit` reads one contraction `scores = sum_d Q * K` at (row, key) plus anything
  elementwise: a scale, an additive mask, a boolean or causal `select(..., -inf)`;
- `rowmax` is the `max` over the keys of that same `logit` (possibly replaced by a finite
  constant when it is -inf, so that a fully masked row gets zero weights, not NaN);
- `rowsum` is the `sum` over the keys of that same exponential, and `w` (usually
  `1 / rowsum`, guarded against zero) may also be applied by the output expression instead.

This is what `te.workloads.attention_stages` builds, and any graph equal to it up to where
the scale and the casts sit. A flash-attention kernel computes it in one pass over the
keys: the running max replaces `rowmax` (the result does not depend on the value
subtracted), the running sum `rowsum`. A causal bound `key <= query + offset` found among
the conditions of the `select`s around the logit lets the kernel skip key blocks above
the diagonal and drop the condition on blocks below it.

Example:
    >>> from tensortune.te import workloads
    >>> from tensortune.backends.triton.patterns import analyze
    >>> plan = analyze(workloads.attention(1, 4, 64, 64, 16, causal=True, kv_heads=2).output)
    >>> plan.kind, plan.causal, plan.sizes, plan.p_dtype
    ('attention', 0, (4, 64, 64, 16, 16), 'float16')
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...te.affine import Affine
from ...te.dtype import is_float
from ...te.expr import Binary, Call, Cast, Compare, Const, Expr, IterVar, Logical, Reduce, Select, TensorRead, Var
from ...te.printer import expr_str
from ...te.tensor import Tensor
from ...te.visit import itervars, map_expr, reads, substitute, variables
from .patterns import ACC, Axis, GpuPlan, PatternError, inline, reductions_read

SCORE = Var("score")  # the scores at (query, key), inside the logits
ROWSUM = Var("rowsum")  # the row sum of the exponentials, inside the weight and the epilogue
HALF_TYPES = ("float16", "bfloat16")


@dataclass(frozen=True)
class AttentionPlan(GpuPlan):
    """`out[b, i, e] = epilogue(sum_j exp(c * (logit[b, i, j] - max_j logit)) * w(rowsum) * v[b, j, e])`.

    Kernel variables: batch `b0, b1, ...` (one program per batch index), the query `m0`,
    the key `n0`, the scores' reduction `k0` and the value column `e0`.
    """

    batch: tuple[Axis, ...]
    query: Axis
    key: Axis
    head: Axis  # the scores' reduction (d)
    value: Axis  # the output's column (dv)
    q_factor: Expr  # over batch, m0, k0
    k_factor: Expr  # over batch, n0, k0
    logits: Expr  # over batch, m0, n0 and SCORE
    logits_inside: Expr  # the logits where the causal bound holds (its condition dropped)
    exp_scale: float  # weights are exp(exp_scale * (logit - row max)), exp_scale > 0
    row_guarded: bool  # a fully masked row subtracts a finite value: zero weights, not NaN
    weight: Expr  # over batch, m0 and ROWSUM: multiplies the weighted sum of values
    p_dtype: str  # the weights' type before the second product ("float32": not rounded)
    v_factor: Expr  # over batch, n0, e0
    epilogue: Expr  # over batch, m0, e0, ACC (the normalised weighted sum) and ROWSUM
    out_index: tuple[Var, ...]
    causal: int | None  # key j is kept only where j <= i + causal (None: no such bound found)

    @property
    def kind(self) -> str:
        return "attention"

    @property
    def sizes(self) -> tuple[int, int, int, int, int]:
        """(batch, Sq, Skv, D, Dv), the batch axes flattened."""
        return (math.prod(a.extent for a in self.batch), self.query.extent, self.key.extent, self.head.extent,
                self.value.extent)

    @property
    def flops(self) -> int:
        nb, sq, skv, d, dv = self.sizes
        pairs = sq * skv
        if self.causal is not None:
            pairs = sum(min(skv, max(0, i + self.causal + 1)) for i in range(sq))
        return 2 * nb * pairs * (d + dv)


def _fail(why: str) -> PatternError:
    return PatternError(f"no GPU pattern for this attention graph: {why}")


def _is_reduction(t: Tensor, combiner: str) -> bool:
    return t.op is not None and isinstance(t.op.body, Reduce) and t.op.body.combiner == combiner


def _strip(e: Expr) -> Expr:
    while isinstance(e, Cast) and is_float(e.dtype):
        e = e.value
    return e


def _product(e: Expr) -> tuple[Expr, Expr] | None:
    e = _strip(e)
    return (e.a, e.b) if isinstance(e, Binary) and e.op == "mul" else None


def match_attention(out: Tensor, out_axes: tuple[IterVar, ...], value: Expr,
                    inputs: tuple[Tensor, ...]) -> AttentionPlan | None:
    """The attention plan of a graph; None when its output is not a weighted sum over keys of
    values (with one value axis) by weights computed from reductions (with one query axis);
    `PatternError` when it is, but the weights are not a softmax of scores."""
    outer = inline(value)
    weighted = _weighted_sum(out, out_axes, outer)
    if weighted is None:
        return None
    red, p_side, v_side = weighted
    spatial = red.op.axes
    key_axis = red.op.reduce_axes[0]
    uses_p, uses_v = itervars(p_side), itervars(v_side)
    groups: dict[str, list[int]] = {"b": [], "m": [], "e": []}
    for d, ax in enumerate(spatial):
        if ax in uses_p and ax in uses_v:
            groups["b"].append(d)
        elif ax in uses_p:
            groups["m"].append(d)
        elif ax in uses_v:
            groups["e"].append(d)
        else:
            return None
    for g in ("m", "e"):  # a unit axis (a batch of one, read at index 0 on one side) is a batch axis
        if len(groups[g]) > 1:
            units = [d for d in groups[g] if spatial[d].extent == 1]
            keep = [d for d in groups[g] if spatial[d].extent != 1] or units[-1:]
            groups["b"] = sorted(groups["b"] + [d for d in groups[g] if d not in keep])
            groups[g] = keep
    if len(groups["m"]) != 1 or len(groups["e"]) != 1:
        return None  # not attention's shape (a row reduction reading a reduction of the same rows, say)
    batch = tuple(Axis(Var(f"b{i}"), spatial[d].extent) for i, d in enumerate(groups["b"]))
    query = Axis(Var("m0"), spatial[groups["m"][0]].extent)
    value_axis = Axis(Var("e0"), spatial[groups["e"][0]].extent)
    key = Axis(Var("n0"), key_axis.extent)
    out_vars: list[Var] = [Var("?")] * len(spatial)
    for a, d in zip(batch, groups["b"]):
        out_vars[d] = a.var
    out_vars[groups["m"][0]], out_vars[groups["e"][0]] = query.var, value_axis.var
    mapping: dict[Expr, Expr] = dict(zip(spatial, out_vars))
    mapping[key_axis] = key.var
    p_expr, v_expr = substitute(p_side, mapping), substitute(v_side, mapping)
    epilogue = map_expr(substitute(outer, dict(zip(out_axes, out_vars))),
                        lambda x: ACC if isinstance(x, TensorRead) and x.tensor is red else None)
    row_vars = tuple(a.var for a in batch) + (query.var,)
    if reductions_read(v_expr) or itervars(v_expr):
        raise _fail(f"the values of {red.name!r} must read inputs only, got {expr_str(v_expr)}")
    p_dtype, ex, weight = _normalisation(p_expr, key.var)
    logit, c, row_max, guarded = _exponent(ex, row_vars)
    if _row_source(row_max.tensor, tuple(row_max.indices), key) != logit:
        raise _fail(f"the row max {row_max.tensor.name!r} is not taken over the logits the exponential uses")
    weight = _rowsum(weight, ex, row_vars, key, "the weights")
    epilogue = _rowsum(epilogue, ex, row_vars, key, "the output expression")
    for what, e in (("weights", weight), ("output expression", epilogue)):
        if key.var in variables(e) or itervars(e) or reductions_read(e):
            raise _fail(f"the {what} {expr_str(e)} read more than the row sum and the rows")
    scores, logits = _scores(logit, row_vars, key)
    q_factor, k_factor, head = _score_factors(scores, row_vars, key)
    causal, inside = causal_bound(logits, query.var, key.var)
    if causal is not None and causal >= key.extent - 1:  # every key is kept (a decode step)
        causal, logits = None, inside
    (pulled, c1), (pulled_inside, c2) = _pull_scale(logits, c), _pull_scale(inside, c)
    if c1 == c2:
        logits, inside, c = pulled, pulled_inside, c1
    return AttentionPlan(out, inputs, batch, query, key, head, value_axis, q_factor, k_factor, logits, inside, c,
                         guarded, weight, p_dtype, v_expr, epilogue, tuple(out_vars), causal)


def _weighted_sum(out: Tensor, out_axes: tuple[IterVar, ...], outer: Expr) -> tuple[Tensor, Expr, Expr] | None:
    """The sum over keys the output reads at its own index, with its weights and values."""
    own = tuple(out_axes)
    for red in reductions_read(outer):
        if not _is_reduction(red, "sum") or red.shape != out.shape or len(red.op.reduce_axes) != 1:
            continue
        if any(r.tensor is red and tuple(r.indices) != own for r in reads(outer)):
            continue
        split = _product(inline(red.op.body.source))
        if split is None:
            continue
        a_reads, b_reads = bool(reductions_read(split[0])), bool(reductions_read(split[1]))
        if a_reads != b_reads:
            return (red, split[0], split[1]) if a_reads else (red, split[1], split[0])
    return None


def _normalisation(p: Expr, key: Var) -> tuple[str, Expr, Expr]:
    """(the weights' rounding type, the exponential, the factor w(rowsum)) of `p`."""
    p_dtype = "float32"
    x = p
    while isinstance(x, Cast) and (is_float(x.dtype) or x.dtype in HALF_TYPES):
        if x.dtype in HALF_TYPES:
            p_dtype = x.dtype
        x = x.value
    one = Const(1.0, "float32")
    if isinstance(x, Binary) and x.op == "div" and key not in variables(x.b):
        ex, weight = x.a, Binary("div", one, x.b)
    elif isinstance(x, Binary) and x.op == "mul" and (key in variables(x.a)) != (key in variables(x.b)):
        ex, weight = (x.a, x.b) if key in variables(x.a) else (x.b, x.a)
    else:
        ex, weight = x, one
    ex = _strip(ex)
    if not (isinstance(ex, Call) and ex.name == "exp"):
        raise _fail(f"the weights are not an exponential times a per-row factor: {expr_str(p)}")
    return p_dtype, ex, weight


def _exponent(ex: Call, row_vars: tuple[Var, ...]) -> tuple[Expr, float, TensorRead, bool]:
    """`exp(c * (logit - m))` -> (logit, c, the read of the row max, whether m is guarded)."""
    u, c = ex.args[0], 1.0
    while isinstance(u, Binary) and u.op in ("mul", "div"):
        if u.op == "mul" and isinstance(u.a, Const):
            c, u = c * float(u.a.value), u.b
        elif isinstance(u.b, Const) and float(u.b.value) != 0.0:
            c, u = (c * float(u.b.value) if u.op == "mul" else c / float(u.b.value)), u.a
        else:
            break
    if isinstance(u, Binary) and u.op == "sub":  # c * logit - c * max: the same c on both sides
        a, b = _scaled(u.a), _scaled(u.b)
        if a[1] == b[1] != 1.0:
            c, u = c * a[1], Binary("sub", a[0], b[0])
    if not (isinstance(u, Binary) and u.op == "sub") or not (c > 0 and math.isfinite(c)):
        raise _fail(f"the exponent {expr_str(ex.args[0])} is not a positive constant times (logit - row max)")
    logit, m = u.a, _strip(u.b)
    guarded = False
    if isinstance(m, Select):
        sides = [_strip(m.then), _strip(m.other)]
        found = [s for s in sides if isinstance(s, TensorRead)]
        const = [s for s in sides if isinstance(s, Const) and math.isfinite(float(s.value))]
        cond_reads = reads(m.cond)
        if len(found) != 1 or len(const) != 1 or any(r != found[0] for r in cond_reads):
            raise _fail(f"the subtracted row max {expr_str(m)} is neither the max nor the max guarded by a constant")
        m, guarded = found[0], True
    if not (isinstance(m, TensorRead) and _is_reduction(m.tensor, "max")):
        raise _fail(f"the exponent subtracts {expr_str(u.b)}, not a row max over the keys")
    if set(m.indices) != set(row_vars) or len(m.indices) != len(row_vars):
        raise _fail(f"the row max is read at [{', '.join(map(expr_str, m.indices))}], not at its own row")
    return logit, c, m, guarded


def _scaled(e: Expr) -> tuple[Expr, float]:
    """`x * k` or `k * x` with a constant k -> (x, k); anything else -> (e, 1)."""
    if isinstance(e, Binary) and e.op == "mul":
        if isinstance(e.b, Const):
            return e.a, float(e.b.value)
        if isinstance(e.a, Const):
            return e.b, float(e.a.value)
    return e, 1.0


def _row_source(red: Tensor, indices: tuple[Expr, ...], key: Axis) -> Expr:
    """A row reduction's source over the kernel variables, given where it is read."""
    body = red.op.body
    assert isinstance(body, Reduce)
    if len(body.axes) != 1 or body.axes[0].extent != key.extent:
        raise _fail(f"{red.name!r} must reduce over the {key.extent} keys alone")
    if not all(isinstance(i, Var) for i in indices) or len(set(indices)) != len(indices):
        raise _fail(f"{red.name!r} is read at [{', '.join(map(expr_str, indices))}], not at its own row")
    mapping: dict[Expr, Expr] = dict(zip(red.op.axes, indices))
    mapping[body.axes[0]] = key.var
    return inline(substitute(body.source, mapping))


def _rowsum(e: Expr, ex: Expr, row_vars: tuple[Var, ...], key: Axis, where: str) -> Expr:
    """`e` with each read of the row sum of `ex` replaced by ROWSUM."""
    def rewrite(x: Expr) -> Expr | None:
        if not isinstance(x, TensorRead) or x.tensor.op is None:
            return None
        if not _is_reduction(x.tensor, "sum") or set(x.indices) != set(row_vars) or len(x.indices) != len(row_vars):
            raise _fail(f"{where} read {x.tensor.name!r}, which is not the row sum of the exponentials")
        if _strip(_row_source(x.tensor, tuple(x.indices), key)) != ex:
            raise _fail(f"{x.tensor.name!r} does not sum the exponentials the weights use")
        return ROWSUM
    return map_expr(e, rewrite)


def _scores(logit: Expr, row_vars: tuple[Var, ...], key: Axis) -> tuple[TensorRead, Expr]:
    """The read of the scores contraction in the logits, and the logits over SCORE."""
    found = reductions_read(logit)
    if len(found) != 1 or not _is_reduction(found[0], "sum"):
        raise _fail(f"the logits {expr_str(logit)} must read one sum (the scores), found "
                    f"{[t.name for t in found]}")
    scores = found[0]
    want = set(row_vars) | {key.var}
    at = [r for r in reads(logit) if r.tensor is scores]
    for r in at:
        if r != at[0] or set(r.indices) != want or len(r.indices) != len(want):
            raise _fail(f"the scores {scores.name!r} are read at [{', '.join(map(expr_str, r.indices))}], not at "
                        "(row, key)")
    logits = map_expr(logit, lambda x: SCORE if isinstance(x, TensorRead) and x.tensor is scores else None)
    if itervars(logits) or any(r.tensor.op is not None for r in reads(logits)):
        raise _fail(f"the logits {expr_str(logits)} read more than the scores and inputs")
    return at[0], logits


def _score_factors(read: TensorRead, row_vars: tuple[Var, ...], key: Axis) -> tuple[Expr, Expr, Axis]:
    scores = read.tensor
    body = scores.op.body
    assert isinstance(body, Reduce)
    if len(body.axes) != 1:
        raise _fail(f"the scores {scores.name!r} must reduce over one axis (the head dimension)")
    head = Axis(Var("k0"), body.axes[0].extent)
    mapping: dict[Expr, Expr] = dict(zip(scores.op.axes, read.indices))
    mapping[body.axes[0]] = head.var
    source = inline(substitute(body.source, mapping))
    split = _product(source)
    if split is None:
        raise _fail(f"the scores {scores.name!r} are not a sum of a product of two factors")
    fq, fk = split
    query = row_vars[-1]
    if key.var in variables(fq) or query in variables(fk):
        fq, fk = fk, fq
    for f, own, other in ((fq, query, key.var), (fk, key.var, query)):
        vs = variables(f)
        if other in vs or own not in vs or reductions_read(f) or itervars(f):
            raise _fail(f"the scores {scores.name!r} must multiply a query factor and a key factor, got "
                        f"{expr_str(fq)} and {expr_str(fk)}")
    return fq, fk, head


def _conjuncts(cond: Expr) -> list[Expr]:
    if isinstance(cond, Logical) and cond.op == "and":
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [cond]


def _diagonal(cond: Expr, query: Var, key: Var) -> int | None:
    """`c` when `cond` says key <= query + c, else None."""
    if not isinstance(cond, Compare) or cond.a.dtype != "int32" or cond.op not in ("lt", "le", "gt", "ge"):
        return None
    aff = Affine.of(Binary("sub", cond.a, cond.b))
    coef = dict(aff.terms)
    if set(coef) != {query, key} or coef[key] != -coef[query] or abs(coef[key]) != 1:
        return None
    sign, off = coef[key], aff.offset  # cond: sign * (key - query) + off  OP  0
    if sign == 1 and cond.op in ("le", "lt"):
        return -off - (cond.op == "lt")
    if sign == -1 and cond.op in ("ge", "gt"):
        return off - (cond.op == "gt")
    return None


def causal_bound(logits: Expr, query: Var, key: Var) -> tuple[int | None, Expr]:
    """The tightest `c` with logits = -inf wherever key > query + c (found in the conditions
    of the `select(cond, x, -inf)`s wrapping the logits), and the logits with those
    conditions dropped (what they are where the bound holds)."""
    bound: int | None = None
    true = Const(True, "bool")

    def go(e: Expr) -> Expr:
        nonlocal bound
        if not (isinstance(e, Select) and isinstance(e.other, Const) and float(e.other.value) == float("-inf")):
            return e
        kept = []
        for c in _conjuncts(e.cond):
            off = _diagonal(c, query, key)
            if off is None:
                kept.append(c)
            else:
                bound = off if bound is None else min(bound, off)
        inner = go(e.then)
        if not kept:
            return inner
        cond = kept[0]
        for c in kept[1:]:
            cond = Logical("and", cond, c)
        return Select(cond, inner, e.other) if cond != true else inner

    inside = go(logits)
    return bound, inside


def _pull_scale(logits: Expr, c: float) -> tuple[Expr, float]:
    """`select(cond, score * a, -inf)` -> (`select(cond, score, -inf)`, c * a) for a > 0:
    the scale then joins the exponent's constant (one multiply per score, not two)."""
    if isinstance(logits, Select) and isinstance(logits.other, Const) and float(logits.other.value) == float("-inf"):
        inner, c2 = _pull_scale(logits.then, c)
        return Select(logits.cond, inner, logits.other), c2
    if isinstance(logits, Binary) and logits.op == "mul":
        for x, y in ((logits.a, logits.b), (logits.b, logits.a)):
            if x == SCORE and isinstance(y, Const) and float(y.value) > 0 and math.isfinite(float(y.value)):
                return SCORE, c * float(y.value)
    return logits, c
