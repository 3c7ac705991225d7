"""Recognising depthwise and grouped convolutions: a windowed sum whose weights miss the pixels.

A convolution with groups is a `sum` of `data * weight` in which the weight reads some
of the output's axes (the channels) and none of the others (the pixels: batch, rows,
columns), and some reduce axes slide over the pixels (the window's `r, s` in `y + r`).
The contraction pattern cannot take it: with no axis that only the weight reads there is
no N side for `tl.dot`. It becomes a `GroupedConvPlan`, whose kernel maps blocks of
channels and of pixels to programs, steps the window unrolled with the weights of each
position in registers, loops over a group's input channels (the reduce axes that do not
slide), and applies the fused epilogue before the one store. Any layout works
(NCHW, NHWC or another), since addresses come from the graph's own index expressions.

Example:
    >>> from tensortune.te import workloads
    >>> from tensortune.backends.triton.patterns import analyze
    >>> plan = analyze(workloads.depthwise_conv2d_nchw(2, 8, 6, 6, 3, 3, 1, 1, "float16").output)
    >>> plan.kind, [a.extent for a in plan.pixels], [a.extent for a in plan.channels], plan.sizes
    ('grouped_conv', [2, 6, 6], [8], (72, 8, 1, 9))
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...te.expr import Binary, Compare, Const, Expr, IterVar, TensorRead, Var
from ...te.tensor import Tensor
from ...te.visit import itervars, map_expr, reads, substitute, walk
from .patterns import ACC, Axis, ContractionPlan, GpuPlan, _axes, sum_of_products

MAX_WINDOW = 121  # window positions unrolled in the kernel (up to 11 x 11)
DOT_GROUP = 8  # channels per group (in and out) from which a group is a tl.dot contraction (M padded to 16)


@dataclass(frozen=True)
class GroupedConvPlan(GpuPlan):
    """`out[p, c] = epilogue(sum_{g, w} data[p, c, g, w] * weight[c, g, w])`.

    `pixels` (`p0, p1, ...`) are the output axes only the data reads, `channels`
    (`c0, ...`) those both factors read, `window` (`w0, ...`) the reduce axes that slide
    over a pixel axis (unrolled), `group` (`g0, ...`) the other reduce axes (a group's
    input channels, looped); `out_index` gives each output dimension's variable.
    """

    pixels: tuple[Axis, ...]
    channels: tuple[Axis, ...]
    window: tuple[Axis, ...]
    group: tuple[Axis, ...]
    data: Expr
    weight: Expr
    epilogue: Expr  # over pixel and channel variables and ACC
    out_index: tuple[Var, ...]
    reduction: Tensor

    @property
    def kind(self) -> str:
        return "grouped_conv"

    @property
    def sizes(self) -> tuple[int, int, int, int]:
        """(pixels, channels, group channels, window positions)."""
        return tuple(math.prod(a.extent for a in axes)  # type: ignore[return-value]
                     for axes in (self.pixels, self.channels, self.group, self.window))

    @property
    def channels_last(self) -> bool:
        """Whether the output is stored with a channel axis contiguous (NHWC)."""
        return self.out_index[-1] in {a.var for a in self.channels}

    @property
    def flops(self) -> int:
        p, c, g, w = self.sizes
        return 2 * p * c * g * w


def match_grouped_conv(out: Tensor, out_axes: tuple[IterVar, ...], value: Expr,
                       inputs: tuple[Tensor, ...]) -> GroupedConvPlan | ContractionPlan | None:
    """The plan when the graph is a windowed sum whose weight factor misses the pixel axes: a
    `GroupedConvPlan`, or a batched `ContractionPlan` (one batch entry per group) when each
    group has at least `DOT_GROUP` input and output channels."""
    found = sum_of_products(out, out_axes, value)
    if found is None:
        return None
    outer, red, fa, fb = found
    spatial, reduce_axes = tuple(red.op.axes), tuple(red.op.reduce_axes)
    sa, sb = itervars(fa) & set(spatial), itervars(fb) & set(spatial)
    if sb < sa:
        data, weight = fa, fb
    elif sa < sb:
        data, weight = fb, fa
    else:
        return None
    if (sa | sb) != set(spatial) or not (sa & sb):
        return None  # an axis only the weight reads is a contraction's N side; no channels: a row reduction
    channel_dims = [d for d, ax in enumerate(spatial) if ax in (sa & sb)]
    pixel_dims = [d for d, ax in enumerate(spatial) if ax not in (sa & sb)]
    pixel_axes = {spatial[d] for d in pixel_dims}
    sliding = _sliding(data, set(reduce_axes), pixel_axes)
    window_axes = [a for a in reduce_axes if a in sliding]
    group_axes = [a for a in reduce_axes if a not in sliding]
    if not window_axes or math.prod(a.extent for a in window_axes) > MAX_WINDOW:
        return None
    pixels = _axes("p", (spatial[d].extent for d in pixel_dims))
    channels = _axes("c", (spatial[d].extent for d in channel_dims))
    window = _axes("w", (a.extent for a in window_axes))
    group = _axes("g", (a.extent for a in group_axes))
    out_vars: list[Var] = [Var("?")] * len(spatial)
    for d, a in zip(pixel_dims, pixels):
        out_vars[d] = a.var
    for d, a in zip(channel_dims, channels):
        out_vars[d] = a.var
    mapping: dict[Expr, Expr] = {a: v for a, v in zip(spatial, out_vars)}
    mapping.update({a: w.var for a, w in zip(window_axes, window)})
    mapping.update({a: g.var for a, g in zip(group_axes, group)})
    data_k, weight_k = substitute(data, mapping), substitute(weight, mapping)
    epilogue = map_expr(substitute(outer, dict(zip(out_axes, out_vars))),
                        lambda x: ACC if isinstance(x, TensorRead) and x.tensor is red else None)
    if itervars(data_k) or itervars(weight_k) or itervars(epilogue):
        return None
    plan = GroupedConvPlan(out, inputs, pixels, channels, window, group, data_k, weight_k, epilogue,
                           tuple(out_vars), red)
    return group_contraction(plan) or plan


def group_contraction(plan: GroupedConvPlan) -> ContractionPlan | None:
    """A grouped convolution as one small implicit-GEMM contraction per group, when its data
    reads the group `c // fg` of a single channel axis and every group has at least
    `DOT_GROUP` input and output channels: the group is the batch, the group's filters M,
    the pixels N, the group's input channels K (the window stepped as scalars)."""
    if len(plan.channels) != 1 or len(plan.group) != 1 or plan.group[0].extent < DOT_GROUP:
        return None
    c, extent = plan.channels[0].var, plan.channels[0].extent
    divisors = {x.b.value for x in walk(plan.data)
                if isinstance(x, Binary) and x.op == "floordiv" and x.a == c and isinstance(x.b, Const)}
    if len(divisors) != 1:
        return None
    fg = int(divisors.pop())
    if fg < DOT_GROUP or extent % fg:
        return None
    batch = (Axis(Var("b0"), extent // fg),)
    m = (Axis(Var("m0"), fg),)
    n = tuple(Axis(Var(f"n{i}"), a.extent) for i, a in enumerate(plan.pixels))
    k = (Axis(Var("k0"), plan.group[0].extent),)
    window = tuple(Axis(Var(f"k{i + 1}"), a.extent) for i, a in enumerate(plan.window))
    channel = Binary("add", Binary("mul", batch[0].var, Const(fg, c.dtype)), m[0].var)
    mapping: dict[Expr, Expr] = {c: channel, plan.group[0].var: k[0].var}
    mapping.update({a.var: b.var for a, b in zip(plan.pixels, n)})
    mapping.update({a.var: b.var for a, b in zip(plan.window, window)})

    def rename(e: Expr) -> Expr:
        e = map_expr(e, lambda x: batch[0].var if isinstance(x, Binary) and x.op == "floordiv" and x.a == c
                     and isinstance(x.b, Const) and x.b.value == fg else None)
        return substitute(e, mapping)
    data, weight = rename(plan.data), rename(plan.weight)
    if m[0].var in _vars(data) or _vars(weight) & {a.var for a in n}:
        return None  # the data reads a filter, or the weights a pixel: not one contraction per group
    out_index = tuple(mapping.get(v, v) for v in plan.out_index)
    return ContractionPlan(plan.output, plan.inputs, batch, m, n, k, weight, data, rename(plan.epilogue),
                           out_index, plan.reduction, window)  # type: ignore[arg-type]


def _vars(e: Expr) -> set[Var]:
    return {x for x in walk(e) if isinstance(x, Var)}


def _sliding(data: Expr, reduce_axes: set[IterVar], pixel_axes: set[IterVar]) -> set[IterVar]:
    """Reduce axes added to a pixel axis in an index or a bound check of the data (`y + r`)."""
    found: set[IterVar] = set()
    exprs = [i for r in reads(data) for i in r.indices] + [x for x in walk(data) if isinstance(x, Compare)]
    for e in exprs:
        vs = itervars(e)
        if vs & pixel_axes:
            found |= vs & reduce_axes
    return found
