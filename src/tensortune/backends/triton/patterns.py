"""Which GPU kernel an expression graph becomes: a contraction, a grouped convolution, attention,
a row reduction, or elementwise.

Every stage without a reduction (casts, bias adds, activations, padding, scaling) is
inlined into the stages that read it, so what is left is the output expression over
the reductions it reads. Then:

- **contraction**: the output reads one `sum` whose source is a product of two factors,
  one free of some output axes (the M side) and the other free of others (the N side),
  at the output's own index. It becomes a block-tiled `tl.dot` kernel (the factor stored
  contiguously along the reduction is the dot's A operand, the other B, so that both
  tiles load along their contiguous dimension); the output
  expression around it is the fused epilogue, the inlined factor expressions the
  prologue (implicit GEMM for a padded convolution).
- **rows**: reductions over the same trailing ("column") axes for each leading ("row")
  index, possibly reading each other (softmax, layer and RMS norm, matrix-vector); one
  kernel per block of rows, in one pass or looping over column blocks.
- **grouped_conv**: a windowed sum whose weight factor misses the pixel axes (depthwise and
  grouped convolutions, `patterns_conv.py`): channels and pixels in blocks, the window
  unrolled; wide groups become a contraction batched over the groups.
- **attention**: a sum over keys of softmax weights (of a scores contraction) times values,
  one flash-attention kernel (`patterns_attention.py`).
- **elementwise**: no reduction at all.

All expressions of a plan are written over fresh `Var`s named after the kernel's
variables (`m0, n0, k0, b0` for a contraction, `r0, c0` for rows, `e0` elementwise),
never over the graph's own axes.

Example:
    >>> from tensortune.te import workloads
    >>> plan = analyze(workloads.matmul_bias_relu(64, 32, 16).output)
    >>> plan.kind, [v.name for v in plan.m_vars], [v.name for v in plan.k_vars]
    ('contraction', ['m0'], ['k0'])
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ...te.dtype import TEError, is_float
from ...te.expr import Binary, Cast, Compare, Expr, IterVar, Reduce, TensorRead, Var
from ...te.printer import expr_str
from ...te.tensor import Tensor, graph
from ...te.visit import itervars, map_expr, reads, substitute, variables, walk

ACC = Var("acc")  # the contraction's value at the output index, inside the epilogue


class PatternError(TEError):
    """The expression graph has no GPU kernel pattern; the message says what is missing."""


@dataclass(frozen=True)
class Axis:
    """A kernel variable and its extent."""

    var: Var
    extent: int


def _extent(axes: Sequence[Axis]) -> int:
    return math.prod(a.extent for a in axes)


@dataclass(frozen=True)
class GpuPlan:
    """Base of the three plans: the output, the inputs, the whole graph's description."""

    output: Tensor
    inputs: tuple[Tensor, ...]

    @property
    def kind(self) -> str:
        raise NotImplementedError

    def describe(self) -> str:
        return describe_graph(self.output)


@dataclass(frozen=True)
class ElementwisePlan(GpuPlan):
    axes: tuple[Axis, ...]
    value: Expr

    @property
    def kind(self) -> str:
        return "elementwise"

    @property
    def size(self) -> int:
        return _extent(self.axes)


@dataclass(frozen=True)
class ContractionPlan(GpuPlan):
    """`out[b, m, n] = epilogue(sum_k fa[b, m, k] * fb[b, k, n])`, axes flattened by group.

    `out_index` gives, for each output dimension, its variable (each one is in exactly
    one of the batch, m and n groups).
    """

    batch: tuple[Axis, ...]
    m: tuple[Axis, ...]
    n: tuple[Axis, ...]
    k: tuple[Axis, ...]
    factor_a: Expr
    factor_b: Expr
    epilogue: Expr  # over the batch, m and n variables and ACC
    out_index: tuple[Var, ...]
    reduction: Tensor
    window: tuple[Axis, ...] = ()  # reduce axes stepped one at a time (a convolution's r, s)

    @property
    def kind(self) -> str:
        return "contraction"

    @property
    def m_vars(self) -> tuple[Var, ...]:
        return tuple(a.var for a in self.m)

    @property
    def k_vars(self) -> tuple[Var, ...]:
        return tuple(a.var for a in self.k)

    @property
    def sizes(self) -> tuple[int, int, int, int]:
        """(batch, M, N, K) of the flattened product."""
        return _extent(self.batch), _extent(self.m), _extent(self.n), _extent(self.k) * _extent(self.window)

    @property
    def flops(self) -> int:
        b, m, n, k = self.sizes
        return 2 * b * m * n * k


@dataclass(frozen=True)
class RowReduction:
    tensor: Tensor
    combiner: str  # sum | max | min
    source: Expr  # over row and column variables; reads earlier reductions at the row index


@dataclass(frozen=True)
class RowsPlan(GpuPlan):
    """Reductions over the column axes for each row, then the output over (rows, cols)."""

    rows: tuple[Axis, ...]
    cols: tuple[Axis, ...]
    reductions: tuple[RowReduction, ...]
    value: Expr  # over row and column variables (no column ones when the output is a reduction)
    out_index: tuple[Var, ...]

    @property
    def kind(self) -> str:
        return "rows"

    @property
    def n_rows(self) -> int:
        return _extent(self.rows)

    @property
    def n_cols(self) -> int:
        return _extent(self.cols)


def describe_graph(output: Tensor) -> str:
    """A canonical text of the graph (stages in order), what records are keyed by."""
    lines = []
    for t in graph(output):
        head = f"{t.name}: {t.dtype}{list(t.shape)}"
        if t.op is None:
            lines.append(head + " input")
        else:
            axes = ", ".join(a.name for a in t.op.axes)
            lines.append(f"{head} ({axes}) = {expr_str(t.op.body)}")
    return "\n".join(lines)


def _axes(prefix: str, extents: Iterable[int]) -> tuple[Axis, ...]:
    return tuple(Axis(Var(f"{prefix}{d}"), e) for d, e in enumerate(extents))


def _is_reduction(t: Tensor) -> bool:
    return t.op is not None and isinstance(t.op.body, Reduce)


def inline(e: Expr) -> Expr:
    """`e` with every read of a computed tensor without a reduction replaced by its body."""
    def rewrite(x: Expr) -> Expr | None:
        if isinstance(x, TensorRead) and x.tensor.op is not None and not _is_reduction(x.tensor):
            op = x.tensor.op
            return inline(substitute(op.body, dict(zip(op.axes, x.indices))))
        return None
    return map_expr(e, rewrite)


def reductions_read(e: Expr) -> list[Tensor]:
    seen: dict[int, Tensor] = {}
    for r in reads(e):
        if _is_reduction(r.tensor):
            seen.setdefault(id(r.tensor), r.tensor)
    return list(seen.values())


def analyze(outputs: Tensor | Sequence[Tensor]) -> GpuPlan:
    """The GPU plan of a graph with one output; `PatternError` says why there is none."""
    outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    if len(outs) != 1 or not isinstance(outs[0], Tensor):
        raise PatternError(f"the CUDA target compiles graphs with exactly one output tensor, got {len(outs)}")
    out = outs[0]
    if out.op is None:
        raise PatternError(f"{out.name!r} is a placeholder: there is nothing to compute")
    for t in graph(out):
        if t.dtype == "float64" or (not is_float(t.dtype) and t.op is not None and t is out):
            raise PatternError(f"tensor {t.name!r} is {t.dtype}; the CUDA target computes float16, bfloat16 "
                               "and float32 outputs (int32 only for indices and intermediate values)")
    inputs = tuple(t for t in graph(out) if t.op is None)
    if _is_reduction(out):
        body = out.op.body
        assert isinstance(body, Reduce)
        value: Expr = TensorRead(out, out.op.axes)
        out_axes: tuple[IterVar, ...] = out.op.axes
    else:
        value = out.op.body
        out_axes = out.op.axes
    found = reductions_read(inline(value))
    if not found:
        axes = _axes("e", out.shape)
        expr = inline(substitute(value, {a: x.var for a, x in zip(out_axes, axes)}))
        return ElementwisePlan(out, inputs, axes, expr)
    contraction = _contraction(out, out_axes, value, inputs)
    if contraction is not None:
        return contraction
    from .patterns_attention import match_attention
    from .patterns_conv import match_grouped_conv

    grouped = match_grouped_conv(out, out_axes, value, inputs)
    if grouped is not None:
        return grouped

    attention = match_attention(out, out_axes, value, inputs)
    if attention is not None:
        return attention
    return _rows(out, out_axes, value, inputs)


# -- contraction ---------------------------------------------------------------------------

def _factors(e: Expr) -> tuple[Expr, Expr] | None:
    while isinstance(e, Cast) and is_float(e.dtype):
        e = e.value
    if isinstance(e, Binary) and e.op == "mul":
        return e.a, e.b
    return None


def sum_of_products(out: Tensor, out_axes: tuple[IterVar, ...],
                    value: Expr) -> tuple[Expr, Tensor, Expr, Expr] | None:
    """`value` inlined, the one sum of a product it reads (at the output's own index and
    nowhere else), and the product's two factors; None when the graph is not such a sum
    (a contraction or a convolution, before their own checks)."""
    outer = inline(value)
    found = reductions_read(outer)
    if len(found) != 1:
        return None
    red = found[0]
    body = red.op.body
    assert isinstance(body, Reduce)
    if body.combiner != "sum" or red.shape != out.shape:
        return None
    own = TensorRead(red, tuple(out_axes))
    if any(r.tensor is red and r != own for r in reads(outer)):
        return None
    source = inline(body.source)
    if reductions_read(source):
        return None
    split = _factors(source)
    if split is None:
        return None
    return outer, red, split[0], split[1]


def _contraction(out: Tensor, out_axes: tuple[IterVar, ...], value: Expr,
                 inputs: tuple[Tensor, ...]) -> ContractionPlan | None:
    found = sum_of_products(out, out_axes, value)
    if found is None:
        return None
    outer, red, fa, fb = found
    spatial, reduce_axes = red.op.axes, red.op.reduce_axes
    if _contiguous_in(fa, reduce_axes) is False and _contiguous_in(fb, reduce_axes) is True:
        fa, fb = fb, fa  # tl.dot wants A[m, k] along k and B[k, n] along n, as NCHW convolution data is
    uses_a, uses_b = _itervars(fa), _itervars(fb)
    groups: dict[str, list[int]] = {"b": [], "m": [], "n": []}
    for d, ax in enumerate(spatial):
        in_a, in_b = ax in uses_a, ax in uses_b
        groups["b" if in_a and in_b else "n" if in_b else "m"].append(d)
    if not groups["m"] or not groups["n"]:
        return None  # a matrix-vector product: a row reduction does it better
    names = {"b": "b", "m": "m", "n": "n"}
    out_vars: list[Var] = [Var("?")] * len(spatial)
    grouped: dict[str, tuple[Axis, ...]] = {}
    for g, dims in groups.items():
        grouped[g] = tuple(Axis(Var(f"{names[g]}{i}"), spatial[d].extent) for i, d in enumerate(dims))
        for i, d in enumerate(dims):
            out_vars[d] = grouped[g][i].var
    k_axes = _axes("k", (a.extent for a in reduce_axes))
    mapping: dict[Expr, Expr] = {a: v for a, v in zip(spatial, out_vars)}
    mapping.update({a: k.var for a, k in zip(reduce_axes, k_axes)})
    factor_a, factor_b = substitute(fa, mapping), substitute(fb, mapping)
    epilogue = map_expr(substitute(outer, dict(zip(out_axes, out_vars))),
                        lambda x: ACC if isinstance(x, TensorRead) and x.tensor is red else None)
    if _free_iter(factor_a) or _free_iter(factor_b) or _free_iter(epilogue):
        return None
    sliding = _sliding(factor_a, k_axes) | _sliding(factor_b, k_axes)
    window = tuple(a for a in k_axes if a.var in sliding)
    inner = tuple(a for a in k_axes if a.var not in sliding)
    if not inner or _extent(window) > 64 or _extent(inner) < MIN_DOT_K:
        window, inner = (), k_axes  # one gathered K: a window stepped over 3 channels wastes 13 of 16 lanes
    return ContractionPlan(out, inputs, grouped["b"], grouped["m"], grouped["n"], inner, factor_a, factor_b,
                           epilogue, tuple(out_vars), red, window)


MIN_DOT_K = 16  # tl.dot's smallest K step


def _sliding(factor: Expr, k_axes: tuple[Axis, ...]) -> set[Var]:
    """Reduce variables added to other variables in an index or a bound check (a convolution
    window's r in h + r): stepped as scalars, they keep addresses and masks one-dimensional."""
    kv = {a.var for a in k_axes}
    found: set[Var] = set()
    exprs = [i for r in reads(factor) for i in r.indices]
    exprs += [x for x in walk(factor) if isinstance(x, Compare)]
    for e in exprs:
        vs = variables(e)
        if vs & kv and vs - kv:
            found |= vs & kv
    return found


def _contiguous_in(factor: Expr, reduce_axes: tuple[IterVar, ...]) -> bool | None:
    """Whether the first tensor a factor reads has its contiguous (last) index moving with
    reduce axes only (True), with some spatial axis (False), or with none (None)."""
    rd = reads(factor)
    if not rd:
        return None
    last = itervars(rd[0].indices[-1])
    if not last:
        return None
    return last <= set(reduce_axes)


def _itervars(e: Expr) -> set[IterVar]:
    return itervars(e)


def _free_iter(e: Expr) -> bool:
    return bool(itervars(e))


# -- rows ----------------------------------------------------------------------------------

def _rows(out: Tensor, out_axes: tuple[IterVar, ...], value: Expr, inputs: tuple[Tensor, ...]) -> RowsPlan:
    order = [t for t in graph(out) if _is_reduction(t)]
    first = order[0]
    row_extents = first.shape
    body0 = first.op.body
    assert isinstance(body0, Reduce)
    col_extents = tuple(a.extent for a in body0.axes)
    for r in order:
        body = r.op.body
        assert isinstance(body, Reduce)
        if r.shape != row_extents or tuple(a.extent for a in body.axes) != col_extents:
            raise PatternError(
                f"no GPU pattern: reductions {first.name!r} (rows {list(row_extents)}, columns "
                f"{list(col_extents)}) and {r.name!r} (rows {list(r.shape)}, columns "
                f"{[a.extent for a in body.axes]}) do not share their row and column axes; the CUDA target "
                "fuses a contraction with elementwise work, or reductions over the same columns of each row")
    rows, cols = _axes("r", row_extents), _axes("c", col_extents)
    row_vars = tuple(a.var for a in rows)
    if out.shape == row_extents:
        out_vars = row_vars
    elif out.shape == row_extents + col_extents:
        out_vars = row_vars + tuple(a.var for a in cols)
    else:
        raise PatternError(f"no GPU pattern: the output {out.name!r} {list(out.shape)} is neither the rows "
                           f"{list(row_extents)} of its reductions nor rows x columns "
                           f"{list(row_extents + col_extents)}")
    reductions = []
    for r in order:
        body = r.op.body
        assert isinstance(body, Reduce)
        mapping: dict[Expr, Expr] = dict(zip(r.op.axes, row_vars))
        mapping.update(zip(r.op.reduce_axes, (a.var for a in cols)))
        source = inline(substitute(body.source, mapping))
        _check_row_reads(source, row_vars, r.name)
        reductions.append(RowReduction(r, body.combiner, source))
    expr = inline(substitute(value, dict(zip(out_axes, out_vars))))
    _check_row_reads(expr, row_vars, out.name)
    if any(not isinstance(v, Var) or v.name[0] not in "rc" for v in variables(expr)) or _free_iter(expr):
        raise PatternError(f"no GPU pattern for {out.name!r}: unexpected free variables")
    return RowsPlan(out, inputs, rows, cols, tuple(reductions), expr, out_vars)


def _check_row_reads(e: Expr, row_vars: tuple[Var, ...], where: str) -> None:
    for r in reads(e):
        if _is_reduction(r.tensor) and tuple(r.indices) != row_vars:
            raise PatternError(f"no GPU pattern: {where!r} reads the reduction {r.tensor.name!r} at "
                               f"[{', '.join(expr_str(i) for i in r.indices)}], not at its own row")
