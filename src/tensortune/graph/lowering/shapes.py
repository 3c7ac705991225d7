"""Shape ops: views and reshapes, permutes, broadcasts, slices, concatenation, padding.

Each is an elementwise stage that reads its input at remapped indices, so it costs
nothing once fused into a consumer. A reshape of contiguous data is marked `alias`: when
its input is in memory anyway, the runtime reuses that buffer under the new shape.

Example:
    >>> from tensortune.te.expr import Var
    >>> [str(e) for e in view_index((6, 4), (2, 3, 4), [Var("a"), Var("b"), Var("c")])]
    ['((a * 3) + b)', 'c']
    >>> [str(e) for e in view_index((2, 3, 4), (6, 4), [Var("a"), Var("b")])]
    ['(a // 3)', '(a % 3)', 'b']
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ... import te
from ...te.expr import Expr
from . import register
from .context import LoweringContext, Unsupported, Val, axis_names, te_shape

aten = torch.ops.aten


def _same(ctx: LoweringContext, x: Val, shape: Sequence[int], index_fn: Any, *, alias: bool = False,
          op: str = "") -> Val:
    """A stage that reads `x` at `index_fn(out_index)` (one expression per input dimension)."""
    out_shape = tuple(shape)
    from ..ir import ValueInfo

    def build(name: str, xt: te.Tensor) -> te.Tensor:
        def body(*idx: Expr) -> Expr:
            index = index_fn(list(idx) if out_shape else [])
            return xt[tuple(index)] if x.shape else xt[0]
        return te.compute(te_shape(out_shape), body, name=name, axis_names=axis_names(len(out_shape)))

    return ctx.stage(build, [x], ValueInfo(out_shape, x.dtype), op=op, alias=alias,
                     spec=ViewSpec(out_shape, _affine(x.shape, out_shape)) if alias else None)


def _affine(in_shape: Sequence[int], out_shape: Sequence[int]) -> bool:
    from ...te.expr import Binary, Var
    from ...te.visit import walk
    idx = [Var(f"v{d}") for d in range(len(out_shape))]
    return not any(isinstance(x, Binary) and x.op in ("floordiv", "mod")
                   for e in view_index(in_shape, out_shape, idx) if not isinstance(e, int) for x in walk(e))


@dataclass(frozen=True)
class ViewSpec:
    """A reshape of contiguous data to `shape`; `affine` when reading through it needs no
    `//` or `%` (it only merges dimensions or adds and drops ones)."""

    shape: tuple[int, ...]
    affine: bool = True


def _resolve(shape: Sequence[int], numel: int) -> tuple[int, ...]:
    shape = [int(s) for s in shape]
    if -1 in shape:
        known = math.prod(s for s in shape if s != -1)
        shape[shape.index(-1)] = numel // known if known else 0
    if math.prod(shape) != numel:
        raise Unsupported(f"cannot view {numel} elements as {shape}")
    return tuple(shape)


def view_index(in_shape: Sequence[int], out_shape: Sequence[int], idx: Sequence[Any]) -> list[Any]:
    """Input indices of a row-major reshape from `in_shape` to `out_shape`, at output index
    `idx`: dimensions are matched in groups of equal size, so merging dimensions stays
    affine and only a split dimension needs `//` and `%`."""
    ins = [(d, e) for d, e in enumerate(in_shape) if e != 1]
    outs = [(d, e) for d, e in enumerate(out_shape) if e != 1]
    result: list[Any] = [0] * len(in_shape)
    i = o = 0
    while i < len(ins) or o < len(outs):
        gi, go = [ins[i]], [outs[o]]
        pi, po = ins[i][1], outs[o][1]
        i, o = i + 1, o + 1
        while pi != po:
            if pi < po:
                gi.append(ins[i])
                pi *= ins[i][1]
                i += 1
            else:
                go.append(outs[o])
                po *= outs[o][1]
                o += 1
        flat: Any = None
        for d, e in go:
            flat = idx[d] if flat is None else flat * e + idx[d]
        stride = pi
        for k, (d, e) in enumerate(gi):
            stride //= e
            v = flat
            if stride > 1:
                v = v // stride
            if k > 0:
                v = v % e
            result[d] = v
    return result


@register(aten.view.default, aten._unsafe_view.default, aten.view_copy.default, aten.reshape.default,
          aten._reshape_alias.default)
def view(ctx: LoweringContext, x: Val, shape: Sequence[int], *_: Any) -> Val:
    out = _resolve(shape, x.info.numel)
    src = x
    node = ctx.graph.nodes[x.node]
    if node.alias and isinstance(node.spec, ViewSpec):  # a reshape of a reshape
        src = Val(node.inputs[0], ctx.graph.nodes[node.inputs[0]].info)
    if out == src.shape:
        return src
    if out == x.shape:
        return x
    return _same(ctx, src, out, lambda idx: view_index(src.shape, out, idx), alias=True)


@register(aten.unsqueeze.default, aten.unsqueeze_copy.default)
def unsqueeze(ctx: LoweringContext, x: Val, dim: int) -> Val:
    dim = dim % (x.ndim + 1)
    return view(ctx, x, x.shape[:dim] + (1,) + x.shape[dim:])


@register(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.squeeze_copy.dim,
          aten.squeeze_copy.dims, aten.squeeze_copy.default)
def squeeze(ctx: LoweringContext, x: Val, dim: Any = None) -> Val:
    dims = range(x.ndim) if dim is None else [dim] if isinstance(dim, int) else list(dim)
    drop = {d % max(1, x.ndim) for d in dims if x.shape[d % max(1, x.ndim)] == 1}
    return view(ctx, x, [e for d, e in enumerate(x.shape) if d not in drop]) if drop else x


@register(aten.permute.default, aten.permute_copy.default)
def permute(ctx: LoweringContext, x: Val, dims: Sequence[int]) -> Val:
    dims = [d % x.ndim for d in dims]
    if dims == list(range(x.ndim)):
        return x
    out = tuple(x.shape[d] for d in dims)

    def index(idx: list[Any]) -> list[Any]:
        full: list[Any] = [0] * x.ndim
        for k, d in enumerate(dims):
            full[d] = idx[k]
        return full
    return _same(ctx, x, out, index)


@register(aten.transpose.int, aten.transpose_copy.int)
def transpose(ctx: LoweringContext, x: Val, d0: int, d1: int) -> Val:
    dims = list(range(x.ndim))
    if x.ndim:
        d0, d1 = d0 % x.ndim, d1 % x.ndim
        dims[d0], dims[d1] = dims[d1], dims[d0]
    return permute(ctx, x, dims)


@register(aten.t.default, aten.t_copy.default)
def t(ctx: LoweringContext, x: Val) -> Val:
    return transpose(ctx, x, 0, 1) if x.ndim == 2 else x


@register(aten.expand.default, aten.expand_copy.default)
def expand(ctx: LoweringContext, x: Val, shape: Sequence[int], implicit: bool = False) -> Val:
    shape = list(shape)
    offset = len(shape) - x.ndim
    out = tuple(x.shape[d - offset] if s == -1 else s for d, s in enumerate(shape))
    if out == x.shape:
        return x
    return _same(ctx, x, out, lambda idx: _bcast(x.shape, out, idx), alias=False)


def _bcast(shape: Sequence[int], out: Sequence[int], idx: Sequence[Any]) -> list[Any]:
    offset = len(out) - len(shape)
    return [0 if e == 1 and out[d + offset] != 1 else idx[d + offset] for d, e in enumerate(shape)]


def _slice_bounds(extent: int, start: Any, end: Any, step: int) -> tuple[int, int]:
    start = 0 if start is None else int(start)
    end = extent if end is None else int(end)
    start = max(0, min(extent, start + extent if start < 0 else start))
    end = max(start, min(extent, end + extent if end < 0 else end))
    return start, max(0, (end - start + step - 1) // step)


@register(aten.slice.Tensor, aten.slice_copy.Tensor)
def slice_(ctx: LoweringContext, x: Val, dim: int = 0, start: Any = None, end: Any = None, step: int = 1) -> Val:
    dim %= x.ndim
    begin, n = _slice_bounds(x.shape[dim], start, end, step)
    if n == 0:
        raise Unsupported("an empty slice")
    if begin == 0 and n == x.shape[dim] and step == 1:
        return x
    out = x.shape[:dim] + (n,) + x.shape[dim + 1:]

    def index(idx: list[Any]) -> list[Any]:
        idx = list(idx)
        idx[dim] = idx[dim] * step + begin
        return idx
    return _same(ctx, x, out, index)


@register(aten.select.int, aten.select_copy.int)
def select(ctx: LoweringContext, x: Val, dim: int, index: int) -> Val:
    dim %= x.ndim
    index = index % x.shape[dim]
    out = x.shape[:dim] + x.shape[dim + 1:]
    return _same(ctx, x, out, lambda idx: idx[:dim] + [index] + idx[dim:])


@register(aten.split_with_sizes.default, aten.split_with_sizes_copy.default)
def split_with_sizes(ctx: LoweringContext, x: Val, sizes: Sequence[int], dim: int = 0) -> tuple[Val, ...]:
    out, begin = [], 0
    for s in sizes:
        out.append(slice_(ctx, x, dim, begin, begin + s) if s else None)
        begin += s
    if any(v is None for v in out):
        raise Unsupported("an empty split")
    return tuple(out)


@register(aten.split.Tensor, aten.split_copy.Tensor)
def split(ctx: LoweringContext, x: Val, size: int, dim: int = 0) -> tuple[Val, ...]:
    extent = x.shape[dim % x.ndim]
    sizes = [min(size, extent - b) for b in range(0, extent, size)]
    return split_with_sizes(ctx, x, sizes, dim)


@register(aten.unbind.int, aten.unbind_copy.int)
def unbind(ctx: LoweringContext, x: Val, dim: int = 0) -> tuple[Val, ...]:
    return tuple(select(ctx, x, dim, i) for i in range(x.shape[dim % x.ndim]))


@register(aten.cat.default)
def cat(ctx: LoweringContext, tensors: Sequence[Val], dim: int = 0) -> Val:
    parts = [t for t in tensors if t.info.numel > 0]
    if not parts:
        raise Unsupported("a concatenation of empty tensors")
    if len(parts) == 1:
        return parts[0]
    ndim = parts[0].ndim
    dim %= ndim
    total = sum(t.shape[dim] for t in parts)
    out_shape = parts[0].shape[:dim] + (total,) + parts[0].shape[dim + 1:]
    out_dtype = ctx.out_dtype
    from ..ir import ValueInfo
    from .context import logical, store, to_dtype

    def build(name: str, *ts: te.Tensor) -> te.Tensor:
        def body(*idx: Expr) -> Expr:
            offsets = []
            acc = 0
            for t in parts:
                offsets.append(acc)
                acc += t.shape[dim]
            value: Expr | None = None
            for k in reversed(range(len(parts))):
                index = list(idx)
                index[dim] = idx[dim] - offsets[k]
                v = to_dtype(logical(ts[k][tuple(index)], parts[k].dtype), out_dtype)
                value = v if value is None else te.select(idx[dim] < offsets[k + 1], v, value)
            assert value is not None
            return store(value, out_dtype)
        return te.compute(te_shape(out_shape), body, name=name, axis_names=axis_names(len(out_shape)))

    return ctx.stage(build, parts, ValueInfo(out_shape, out_dtype))


@register(aten.stack.default)
def stack(ctx: LoweringContext, tensors: Sequence[Val], dim: int = 0) -> Val:
    return cat(ctx, [unsqueeze(ctx, t, dim) for t in tensors], dim)


@register(aten.constant_pad_nd.default)
def constant_pad_nd(ctx: LoweringContext, x: Val, pad: Sequence[int], value: float = 0.0) -> Val:
    before = [0] * x.ndim
    after = [0] * x.ndim
    for k in range(len(pad) // 2):
        d = x.ndim - 1 - k
        before[d], after[d] = int(pad[2 * k]), int(pad[2 * k + 1])
    out_shape = tuple(e + b + a for e, b, a in zip(x.shape, before, after))
    if any(e <= 0 for e in out_shape):
        raise Unsupported("padding that empties the tensor")
    out_dtype = ctx.out_dtype
    from ..ir import ValueInfo
    from .context import logical, scalar, store, to_dtype

    def build(name: str, xt: te.Tensor) -> te.Tensor:
        def body(*idx: Expr) -> Expr:
            conds = []
            index = []
            for d in range(x.ndim):
                i = idx[d] - before[d]
                index.append(i)
                if before[d] > 0:
                    conds.append(i >= 0)
                if after[d] > 0:
                    conds.append(i < x.shape[d])
            inside = to_dtype(logical(xt[tuple(index)], x.dtype), out_dtype)
            if not conds:
                return store(inside, out_dtype)
            return store(te.select(te.all(*conds), inside, scalar(value, out_dtype)), out_dtype)
        return te.compute(te_shape(out_shape), body, name=name, axis_names=axis_names(len(out_shape)))

    return ctx.stage(build, [x], ValueInfo(out_shape, out_dtype))


@register(aten.repeat.default)
def repeat(ctx: LoweringContext, x: Val, repeats: Sequence[int]) -> Val:
    repeats = list(repeats)
    shape = (1,) * (len(repeats) - x.ndim) + x.shape
    out = tuple(s * r for s, r in zip(shape, repeats))
    offset = len(repeats) - x.ndim
    return _same(ctx, x, out, lambda idx: [idx[d + offset] % x.shape[d] if repeats[d + offset] > 1
                                            else idx[d + offset] for d in range(x.ndim)])


@register(aten.index_select.default)
def index_select(ctx: LoweringContext, x: Val, dim: int, index: Val) -> Val:
    dim %= x.ndim
    out_shape = x.shape[:dim] + index.shape + x.shape[dim + 1:]
    from ..ir import ValueInfo

    def build(name: str, xt: te.Tensor, it: te.Tensor) -> te.Tensor:
        def body(*idx: Expr) -> Expr:
            from .misc import clamp_index
            k = idx[dim] if index.shape else 0
            pos = clamp_index(it[k] if index.shape else it[0], x.shape[dim])
            return xt[tuple(list(idx[:dim]) + [pos] + list(idx[dim + index.ndim:]))]
        return te.compute(te_shape(out_shape), body, name=name, axis_names=axis_names(len(out_shape)))

    if index.ndim > 1:
        raise Unsupported("index_select with a multi-dimensional index")
    return ctx.stage(build, [x, index], ValueInfo(out_shape, x.dtype))


@register(aten.gather.default)
def gather(ctx: LoweringContext, x: Val, dim: int, index: Val, sparse_grad: bool = False) -> Val:
    dim %= x.ndim
    out_shape = index.shape
    from ..ir import ValueInfo

    def build(name: str, xt: te.Tensor, it: te.Tensor) -> te.Tensor:
        def body(*idx: Expr) -> Expr:
            from .misc import clamp_index
            full = list(idx)
            full[dim] = clamp_index(it[tuple(idx)], x.shape[dim])
            return xt[tuple(full)]
        return te.compute(te_shape(out_shape), body, name=name, axis_names=axis_names(len(out_shape)))

    if index.ndim != x.ndim:
        raise Unsupported("gather with an index of another rank")
    return ctx.stage(build, [x, index], ValueInfo(out_shape, x.dtype))

