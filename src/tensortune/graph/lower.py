"""From a captured FX graph of core ATen ops to the lowered `Graph`.

Each FX node becomes te stages through its lowering rule, or a `torch` node that calls
the original ATen op at run time when there is no rule or the rule declines (the
reason is kept for the compile report). Nodes that depend on no graph input (a causal
mask built from `arange`, lifted constants) are computed once here and become
constants, unless they are large.

Example:
    >>> import torch
    >>> from tensortune.graph.capture import capture
    >>> [cap] = capture(lambda x: torch.relu(x) * 2, [torch.randn(4, 8)])
    >>> g = lower(cap.gm, cap.example_inputs)
    >>> [n.kind + " " + n.op for n in g.nodes if n.kind != "input"]
    ['te aten.relu.default', 'te aten.mul.Tensor']
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .ir import Graph, Node, OutputRef, ValueInfo, itemsize
from .lowering import rule_for
from .lowering.context import LoweringContext, Unsupported, Val

FOLD_LIMIT = 16 << 20  # bytes: a constant subgraph with a larger result is computed at run time


@dataclass(frozen=True)
class _Slot:
    index: int


def dtype_name(dtype: Any) -> str:
    return str(dtype).replace("torch.", "")


def info_of(value: Any) -> ValueInfo | None:
    import torch
    if isinstance(value, torch.Tensor):
        return ValueInfo(tuple(int(s) for s in value.shape), dtype_name(value.dtype))
    return None


class Lowerer:
    """Walks the FX graph once, adding nodes to a `Graph`."""

    def __init__(self, gm: Any, example_inputs: Sequence[Any], device_type: str) -> None:
        self.gm = gm
        self.example_inputs = list(example_inputs)
        self.device_type = device_type
        self.graph = Graph()
        self.ctx = LoweringContext(self.graph)
        self.env: dict[Any, Any] = {}  # FX node -> Val | tuple | Python value
        self.folded: dict[Any, Any] = {}  # FX node -> real value
        self.force_fallback: set[str] = set()  # FX node names run by ATen whatever their rule

    def run(self) -> Graph:
        placeholders = 0
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                example = self.example_inputs[placeholders]
                info = info_of(node.meta.get("val", example))
                if info is None:  # a scalar argument (a size): specialised, this graph is for one shape
                    self.folded[node] = example
                else:
                    self.env[node] = self.ctx.input(node.name, info, placeholders)
                placeholders += 1
            elif node.op == "get_attr":
                self.folded[node] = getattr(self.gm, node.target)
            elif node.op == "call_function":
                self._call(node)
            elif node.op == "output":
                self.graph.outputs = self._outputs(node.args[0])
        return self.graph

    # -- values ----------------------------------------------------------------------------------
    def _val(self, node: Any) -> Any:
        if node in self.env:
            return self.env[node]
        if node in self.folded:
            value = self.folded[node]
            info = info_of(value)
            if info is None:
                return value
            v = self.ctx.constant(node.name, value, info)
            self.env[node] = v
            return v
        raise KeyError(node)

    def _map(self, arg: Any) -> Any:
        import torch.fx as fx
        if isinstance(arg, fx.Node):
            return self._val(arg)
        if isinstance(arg, (list, tuple)):
            return type(arg)(self._map(a) for a in arg)
        if isinstance(arg, dict):
            return {k: self._map(v) for k, v in arg.items()}
        return arg

    def _outputs(self, arg: Any) -> Any:
        import torch.fx as fx
        if isinstance(arg, fx.Node):
            v = self._val(arg)
            if isinstance(v, Val):
                return OutputRef(v.node)
            if isinstance(v, tuple):
                return tuple(OutputRef(x.node) if isinstance(x, Val) else x for x in v)
            return v
        if isinstance(arg, (list, tuple)):
            return type(arg)(self._outputs(a) for a in arg)
        return arg

    # -- one call --------------------------------------------------------------------------------
    def _call(self, node: Any) -> None:
        target = node.target
        if not node.users:
            return  # dead in a functional graph
        deps = [a for a in node.all_input_nodes]
        if target is operator.getitem:
            src = node.args[0]
            if src in self.folded:
                self.folded[node] = self.folded[src][node.args[1]]
                return
            base = self.env[src]
            item = base[node.args[1]] if isinstance(base, (tuple, list)) else None
            if isinstance(item, Val):
                self.env[node] = item
                return
            # an item the rule did not lower: take it from the original op, called by torch
            self.env[node] = self._fallback(node, reason=getattr(base, "reason", "not lowered"))
            return
        if all(d in self.folded for d in deps) and self._foldable(node):
            self.folded[node] = self._fold(node)
            return
        rule = rule_for(_functional(node))
        if rule is None or node.name in self.force_fallback:
            reason = "no lowering rule" if rule is None else "its lowering disagreed with ATen on this model"
            self.env[node] = self._fallback(node, reason=reason)
            return
        args, kwargs = self._map(tuple(node.args)), self._map(dict(node.kwargs))
        val = node.meta.get("val")
        ctx = self.ctx
        ctx.origin, ctx.op, ctx.target_op_name = node.name, str(target), str(target)
        ctx.device_type = self.device_type
        info = info_of(val)
        ctx.out_dtype = info.dtype if info else ""
        ctx.out_shape = info.shape if info else ()
        mark = len(self.graph.nodes)
        try:
            if any(isinstance(v, Val) and v.info.numel == 0 for v in _flat(args) + _flat(kwargs)) and \
                    target.__name__.split(".")[0] != "cat":
                raise Unsupported("an empty tensor")
            result = rule(ctx, *args, **kwargs)
        except Unsupported as exc:
            del self.graph.nodes[mark:]
            self.env[node] = self._fallback(node, reason=str(exc))
            return
        if isinstance(result, tuple):
            result = _Lowered(result, "not lowered")
        self.env[node] = result

    def _foldable(self, node: Any) -> bool:
        import torch
        target = node.target
        if hasattr(target, "tags") and torch.Tag.nondeterministic_seeded in target.tags:
            return False
        info = info_of(node.meta.get("val"))
        return info is None or info.numel * itemsize(info.dtype) <= FOLD_LIMIT

    def _fold(self, node: Any) -> Any:
        import torch
        import torch.fx as fx

        def real(a: Any) -> Any:
            return self.folded[a] if isinstance(a, fx.Node) else a
        args = fx.node.map_aggregate(node.args, real)
        kwargs = fx.node.map_aggregate(node.kwargs, real)
        with torch.no_grad():
            return node.target(*args, **kwargs)

    def _fallback(self, node: Any, reason: str) -> Any:
        """A torch node calling the FX node's target on its inputs' values at run time."""
        import torch.fx as fx
        inputs: list[int] = []
        slots: dict[Any, _Slot] = {}

        def slot(a: Any) -> Any:
            if isinstance(a, fx.Node):
                v = self._val(a)
                if isinstance(v, Val):
                    if a not in slots:
                        slots[a] = _Slot(len(inputs))
                        inputs.append(v.node)
                    return slots[a]
                if isinstance(v, _Lowered) or isinstance(v, tuple):
                    raise Unsupported(f"{node.name} reads a tuple")
                return v
            return a
        target = node.target
        val = node.meta.get("val")
        info = info_of(val)
        if target is operator.getitem:
            base = node.args[0]
            call = _Call(base.target, fx.node.map_aggregate(base.args, slot),
                         fx.node.map_aggregate(base.kwargs, slot), item=node.args[1])
            op = f"{base.target}[{node.args[1]}]"
        else:
            call = _Call(target, fx.node.map_aggregate(node.args, slot), fx.node.map_aggregate(node.kwargs, slot))
            op = str(target)
        nid = self.graph.add(Node(-1, "torch", op, tuple(inputs), info, call=call, origin=node.name, reason=reason))
        if info is not None:
            return Val(nid, info)
        items = []
        for k, item in enumerate(val if isinstance(val, (tuple, list)) else ()):
            ii = info_of(item)
            if ii is None:
                items.append(None)
                continue
            g = self.graph.add(Node(-1, "torch", f"{target}[{k}]", (nid,), ii, call=_Item(k), origin=node.name,
                                    reason=reason))
            items.append(Val(g, ii))
        return tuple(items)


class _Lowered(tuple):
    """A rule's tuple of results; items it did not lower are None."""

    def __new__(cls, items: tuple[Any, ...], reason: str) -> "_Lowered":
        obj = super().__new__(cls, items)
        obj.reason = reason
        return obj


@dataclass(frozen=True)
class _Call:
    """An ATen call with its tensor arguments in slots, filled from the node's inputs."""

    target: Any
    args: Any
    kwargs: Any
    item: int | None = None

    def __call__(self, *values: Any) -> Any:
        import torch.fx as fx

        def fill(a: Any) -> Any:
            return values[a.index] if isinstance(a, _Slot) else a
        out = self.target(*fx.node.map_aggregate(self.args, fill), **fx.node.map_aggregate(self.kwargs, fill))
        return out[self.item] if self.item is not None else out


@dataclass(frozen=True)
class _Item:
    index: int

    def __call__(self, value: Any) -> Any:
        return value[self.index]


def _functional(node: Any) -> Any:
    """The op of `node`, or the out-of-place op of an in-place one that updates a value
    nothing else reads (decompositions applied after functionalization leave such ops,
    as RMS norm's `add_` of its epsilon): there the two compute the same."""
    import torch
    import torch.fx as fx
    target = node.target
    packet = getattr(target, "overloadpacket", None)
    name = getattr(packet, "__name__", "")
    if not name.endswith("_") or name.endswith("__") or not node.args:
        return target
    first = node.args[0]
    if not isinstance(first, fx.Node) or first.op != "call_function" or len(first.users) != 1:
        return target
    packet = getattr(torch.ops.aten, name[:-1], None)
    return getattr(packet, target._overloadname, target) if packet is not None else target


def _flat(x: Any) -> list[Any]:
    if isinstance(x, (list, tuple)):
        return [y for v in x for y in _flat(v)]
    if isinstance(x, dict):
        return [y for v in x.values() for y in _flat(v)]
    return [x]


def lower(gm: Any, example_inputs: Sequence[Any], device_type: str = "cpu") -> Graph:
    """The lowered graph of a captured FX graph (see the module docstring)."""
    return Lowerer(gm, example_inputs, device_type).run()
