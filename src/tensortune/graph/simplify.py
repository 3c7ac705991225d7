"""Rewrites of the lowered graph before it is cut into kernels.

`sink_views` moves elementwise work to the far side of reshapes: models reshape a
matmul's [B*S, H] output to [B, S, H] before adding a bias or a residual, which would
keep that work out of the matmul's epilogue (the epilogue reads the product at its own
index). The elementwise op is made again over [B*S, H] (its other operands reshaped,
or broadcast when only their trailing dimensions matter) and the reshape applied to
its result, where it costs nothing once the result is in memory. Reshapes of reshapes
collapse, and one that undoes another disappears.

Example:
    >>> import torch
    >>> from tensortune.graph.capture import capture
    >>> from tensortune.graph.lower import lower
    >>> [cap] = capture(lambda x, w, r: (x @ w).view(2, 3, 8) + r, [torch.randn(6, 4), torch.randn(4, 8),
    ...                                                           torch.randn(2, 3, 8)])
    >>> g = sink_views(lower(cap.gm, cap.example_inputs))
    >>> [(n.op.split(".")[1], n.info.shape) for n in g if n.kind == "te"]
    [('mm', (6, 8)), ('view', (6, 8)), ('add', (6, 8)), ('view', (2, 3, 8))]
"""

from __future__ import annotations

from typing import Any

from .ir import Graph, Node, OutputRef, map_outputs
from .lowering.context import ElementwiseSpec, LoweringContext, Val
from .lowering.shapes import ViewSpec, view


def sink_views(graph: Graph) -> Graph:
    """The graph with elementwise ops moved before the reshapes they read (see module)."""
    new = Graph()
    ctx = LoweringContext(new)
    vals: dict[int, Val] = {}
    for n in graph:
        if n.kind == "input":
            vals[n.id] = ctx.input(n.op, n.info, graph.input_positions[graph.input_ids.index(n.id)])
            continue
        ctx.origin, ctx.op = n.origin, n.op
        if n.kind == "te" and isinstance(n.spec, ViewSpec):
            vals[n.id] = view(ctx, vals[n.inputs[0]], n.spec.shape)
            continue
        if n.kind == "te" and isinstance(n.spec, ElementwiseSpec):
            operands = _operands(n, vals)
            sunk = _sink(ctx, n, operands)
            vals[n.id] = sunk if sunk is not None else ctx.elementwise(
                n.spec.fn, operands, n.spec.dtype, compute=list(n.spec.compute), op=n.op)
            continue
        m = Node(-1, n.kind, n.op, tuple(vals[i].node for i in n.inputs), n.info, build=n.build, call=n.call,
                 role=n.role, origin=n.origin, alias=n.alias, flops=n.flops, value=n.value, reason=n.reason,
                 spec=n.spec, expensive=n.expensive)
        vals[n.id] = Val(new.add(m), n.info) if n.info is not None else Val(new.add(m), n.info)
    new.outputs = map_outputs(graph.outputs, lambda r: OutputRef(vals[r.node].node))
    return new.pruned()


def _operands(n: Node, vals: dict[int, Val]) -> list[Any]:
    """The node's elementwise operands in the new graph (its k-th tensor operand is its k-th input)."""
    out: list[Any] = []
    k = 0
    for o in n.spec.operands:
        if isinstance(o, Val):
            v = vals[n.inputs[k]]
            out.append(Val(v.node, v.info, o.dims))
            k += 1
        else:
            out.append(o)
    return out


def _reshape(ctx: LoweringContext, v: Val, shape: Any) -> Val:
    op, ctx.op = ctx.op, "aten.view.default"
    try:
        return view(ctx, v, shape)
    finally:
        ctx.op = op


def _view_source(ctx: LoweringContext, v: Val) -> Val | None:
    node = ctx.graph.nodes[v.node]
    if v.dims is None and node.alias and isinstance(node.spec, ViewSpec):
        return Val(node.inputs[0], ctx.graph.nodes[node.inputs[0]].info)
    return None


def _suffix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    k = 0
    while k < min(len(a), len(b)) and a[len(a) - 1 - k] == b[len(b) - 1 - k]:
        k += 1
    return k


def _sink(ctx: LoweringContext, n: Node, operands: list[Any]) -> Val | None:
    assert n.info is not None
    out_shape = n.info.shape
    pivot = None
    for o in operands:
        if isinstance(o, Val) and o.shape == out_shape and (src := _view_source(ctx, o)) is not None:
            pivot = src.shape
            break
    if pivot is None:
        return None
    common = _suffix(out_shape, pivot)
    moved: list[Any] = []
    for o in operands:
        if not isinstance(o, Val):
            moved.append(o)
            continue
        if o.dims is not None:
            return None
        src = _view_source(ctx, o)
        if o.shape == out_shape:
            moved.append(src if src is not None and src.shape == pivot else _reshape(ctx, o, pivot))
            continue
        shape = list(o.shape)
        while shape and shape[0] == 1:
            shape.pop(0)
        if len(shape) > common:
            return None  # broadcast along dimensions the reshape changes
        moved.append(_reshape(ctx, o, shape) if tuple(shape) != o.shape else o)
    spec = n.spec
    inner = ctx.elementwise(spec.fn, moved, spec.dtype, compute=list(spec.compute), op=n.op)
    if inner.shape != pivot:
        return None
    return _reshape(ctx, inner, out_shape)
