"""Elementwise ATen ops: arithmetic, math, activations, comparisons, selection, casts.

Each op is one elementwise stage that broadcasts and promotes like torch: the result's
dtype is the FX value's, half floats compute in float32, booleans are conditions.

Example:
    >>> import torch
    >>> from tensortune.graph.lowering import rule_for
    >>> rule_for(torch.ops.aten.gelu.default).__name__
    'gelu'
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ... import te
from ...te.expr import Expr
from . import register
from .context import LoweringContext, Unsupported, Val

aten = torch.ops.aten


def _out(ctx: LoweringContext) -> str:
    return ctx.out_dtype


def _binary(ctx: LoweringContext, fn: Any, a: Any, b: Any) -> Val:
    return ctx.elementwise(fn, [a, b], _out(ctx))


def _unary(ctx: LoweringContext, fn: Any, x: Val) -> Val:
    return ctx.elementwise(fn, [x], _out(ctx))


def _check_float_out(ctx: LoweringContext, what: str) -> None:
    if _out(ctx) not in ("float16", "bfloat16", "float32", "float64"):
        raise Unsupported(f"{what} on {_out(ctx)} values")


@register(aten.add.Tensor, aten.add.Scalar)
def add(ctx: LoweringContext, a: Any, b: Any, alpha: Any = 1) -> Val:
    return _binary(ctx, (lambda x, y: x + y) if alpha == 1 else (lambda x, y: x + y * alpha), a, b)


@register(aten.sub.Tensor, aten.sub.Scalar)
def sub(ctx: LoweringContext, a: Any, b: Any, alpha: Any = 1) -> Val:
    return _binary(ctx, (lambda x, y: x - y) if alpha == 1 else (lambda x, y: x - y * alpha), a, b)


@register(aten.rsub.Scalar, aten.rsub.Tensor)
def rsub(ctx: LoweringContext, a: Any, b: Any, alpha: Any = 1) -> Val:
    return _binary(ctx, (lambda x, y: y - x) if alpha == 1 else (lambda x, y: y - x * alpha), a, b)


@register(aten.mul.Tensor, aten.mul.Scalar)
def mul(ctx: LoweringContext, a: Any, b: Any) -> Val:
    return _binary(ctx, lambda x, y: x * y, a, b)


@register(aten.div.Tensor, aten.div.Scalar)
def div(ctx: LoweringContext, a: Any, b: Any) -> Val:
    _check_float_out(ctx, "true division")
    return _binary(ctx, lambda x, y: x / y, a, b)


@register(aten.div.Tensor_mode, aten.div.Scalar_mode)
def div_mode(ctx: LoweringContext, a: Any, b: Any, rounding_mode: str | None = None) -> Val:
    if rounding_mode is None:
        return div(ctx, a, b)
    if rounding_mode == "floor" and _out(ctx) not in ("float16", "bfloat16", "float32", "float64"):
        return _binary(ctx, lambda x, y: x // y, a, b)
    raise Unsupported(f"division with rounding_mode={rounding_mode!r} on {_out(ctx)}")


@register(aten.remainder.Scalar, aten.remainder.Tensor)
def remainder(ctx: LoweringContext, a: Any, b: Any) -> Val:
    if _out(ctx) in ("float16", "bfloat16", "float32", "float64"):
        raise Unsupported("a remainder of floats")
    return _binary(ctx, lambda x, y: x % y, a, b)


@register(aten.neg.default)
def neg(ctx: LoweringContext, x: Val) -> Val:
    return _unary(ctx, lambda v: -v, x)


@register(aten.reciprocal.default)
def reciprocal(ctx: LoweringContext, x: Val) -> Val:
    _check_float_out(ctx, "reciprocal")
    return _unary(ctx, lambda v: 1.0 / v, x)


def power(v: Expr, exponent: float) -> Expr:
    """`v ** exponent` by multiplication for small integers, sqrt for halves, else exp(e log v)."""
    if exponent == 0:
        return v * 0 + 1
    if float(exponent).is_integer() and abs(exponent) <= 8:
        n = int(abs(exponent))
        out, base = None, v
        while n:
            if n & 1:
                out = base if out is None else out * base
            n >>= 1
            if n:
                base = base * base
        return 1.0 / out if exponent < 0 else out
    if exponent == 0.5:
        return te.sqrt(v)
    if exponent == -0.5:
        return 1.0 / te.sqrt(v)
    return te.exp(te.log(v) * float(exponent))


@register(aten.pow.Tensor_Scalar)
def pow_tensor_scalar(ctx: LoweringContext, x: Val, exponent: Any) -> Val:
    if _out(ctx) not in ("float16", "bfloat16", "float32", "float64"):
        if not (isinstance(exponent, int) and 0 <= exponent <= 8):
            raise Unsupported(f"integer power {exponent!r}")
    return _unary(ctx, lambda v: power(v, exponent), x)


@register(aten.pow.Scalar)
def pow_scalar(ctx: LoweringContext, base: Any, x: Val) -> Val:
    _check_float_out(ctx, "a power of a scalar")
    if not base > 0:
        raise Unsupported(f"a power of the scalar {base!r}")
    return ctx.elementwise(lambda v: te.exp(v * math.log(base)), [x], _out(ctx))


@register(aten.pow.Tensor_Tensor)
def pow_tensor(ctx: LoweringContext, x: Val, y: Val) -> Val:
    _check_float_out(ctx, "power")
    return _binary(ctx, lambda a, b: te.exp(te.log(a) * b), x, y)


def _math(name: str) -> Any:
    fn = getattr(te, name)

    def rule(ctx: LoweringContext, x: Val) -> Val:
        _check_float_out(ctx, name)
        return _unary(ctx, fn, x)
    rule.__name__ = name
    return rule


for _name in ("exp", "log", "sqrt", "tanh", "sigmoid", "erf", "cos", "sin"):
    register(getattr(aten, _name).default)(_math(_name))


@register(aten.rsqrt.default)
def rsqrt(ctx: LoweringContext, x: Val) -> Val:
    _check_float_out(ctx, "rsqrt")
    return _unary(ctx, lambda v: 1.0 / te.sqrt(v), x)


@register(aten.abs.default)
def abs_(ctx: LoweringContext, x: Val) -> Val:
    return _unary(ctx, te.abs, x)


@register(aten.log1p.default)
def log1p(ctx: LoweringContext, x: Val) -> Val:
    _check_float_out(ctx, "log1p")
    return _unary(ctx, lambda v: te.log(v + 1.0), x)


@register(aten.expm1.default)
def expm1(ctx: LoweringContext, x: Val) -> Val:
    _check_float_out(ctx, "expm1")
    return _unary(ctx, lambda v: te.exp(v) - 1.0, x)


@register(aten.exp2.default)
def exp2(ctx: LoweringContext, x: Val) -> Val:
    _check_float_out(ctx, "exp2")
    return _unary(ctx, lambda v: te.exp(v * math.log(2.0)), x)


@register(aten.relu.default)
def relu(ctx: LoweringContext, x: Val) -> Val:
    return _unary(ctx, lambda v: te.maximum(v, 0), x)


@register(aten.gelu.default)
def gelu(ctx: LoweringContext, x: Val, approximate: str = "none") -> Val:
    if approximate == "tanh":
        c = math.sqrt(2.0 / math.pi)
        return _unary(ctx, lambda v: 0.5 * v * (1.0 + te.tanh(c * (v + 0.044715 * v * v * v))), x)
    return _unary(ctx, lambda v: 0.5 * v * (1.0 + te.erf(v * (1.0 / math.sqrt(2.0)))), x)


@register(aten.silu.default)
def silu(ctx: LoweringContext, x: Val) -> Val:
    return _unary(ctx, lambda v: v * te.sigmoid(v), x)


@register(aten.mish.default)
def mish(ctx: LoweringContext, x: Val) -> Val:
    return _unary(ctx, lambda v: v * te.tanh(te.log(1.0 + te.exp(v))), x)


@register(aten.hardtanh.default)
def hardtanh(ctx: LoweringContext, x: Val, min_val: float = -1.0, max_val: float = 1.0) -> Val:
    return _unary(ctx, lambda v: te.minimum(te.maximum(v, min_val), max_val), x)


@register(aten.hardsigmoid.default)
def hardsigmoid(ctx: LoweringContext, x: Val) -> Val:
    return _unary(ctx, lambda v: te.minimum(te.maximum(v / 6.0 + 0.5, 0.0), 1.0), x)


@register(aten.hardswish.default)
def hardswish(ctx: LoweringContext, x: Val) -> Val:
    return _unary(ctx, lambda v: v * te.minimum(te.maximum(v + 3.0, 0.0), 6.0) / 6.0, x)


@register(aten.leaky_relu.default)
def leaky_relu(ctx: LoweringContext, x: Val, negative_slope: float = 0.01) -> Val:
    return _unary(ctx, lambda v: te.select(v > 0, v, v * negative_slope), x)


@register(aten.elu.default)
def elu(ctx: LoweringContext, x: Val, alpha: float = 1.0, scale: float = 1.0, input_scale: float = 1.0) -> Val:
    return _unary(ctx, lambda v: te.select(v > 0, v * scale, (te.exp(v * input_scale) - 1.0) * (alpha * scale)), x)


@register(aten.softplus.default)
def softplus(ctx: LoweringContext, x: Val, beta: float = 1.0, threshold: float = 20.0) -> Val:
    return _unary(ctx, lambda v: te.select(v * beta > threshold, v, te.log(1.0 + te.exp(v * beta)) / beta), x)


@register(aten.clamp.default, aten.clamp.Tensor)
def clamp(ctx: LoweringContext, x: Val, min: Any = None, max: Any = None) -> Val:  # noqa: A002
    operands, names = [x], []
    for bound, name in ((min, "min"), (max, "max")):
        if bound is not None:
            operands.append(bound)
            names.append(name)

    def fn(v: Expr, *bounds: Expr) -> Expr:
        for b, name in zip(bounds, names):
            v = te.maximum(v, b) if name == "min" else te.minimum(v, b)
        return v
    return ctx.elementwise(fn, operands, _out(ctx))


@register(aten.clamp_min.default, aten.clamp_min.Tensor)
def clamp_min(ctx: LoweringContext, x: Val, bound: Any) -> Val:
    return _binary(ctx, te.maximum, x, bound)


@register(aten.clamp_max.default, aten.clamp_max.Tensor)
def clamp_max(ctx: LoweringContext, x: Val, bound: Any) -> Val:
    return _binary(ctx, te.minimum, x, bound)


@register(aten.maximum.default)
def maximum(ctx: LoweringContext, a: Val, b: Val) -> Val:
    return _binary(ctx, te.maximum, a, b)


@register(aten.minimum.default)
def minimum(ctx: LoweringContext, a: Val, b: Val) -> Val:
    return _binary(ctx, te.minimum, a, b)


def _compare(fn: Any) -> Any:
    def rule(ctx: LoweringContext, a: Any, b: Any) -> Val:
        dts = [o.dtype for o in (a, b) if isinstance(o, Val)]
        if any(isinstance(o, float) for o in (a, b)):
            dts.append("float32")
        from .context import compute_dtype
        cdt = compute_dtype([d if d != "bool" else "int32" for d in dts])
        return ctx.elementwise(fn, [a, b], "bool", compute=cdt)
    return rule


for _op, _fn in (("eq", te.equal), ("ne", te.not_equal), ("lt", lambda x, y: x < y), ("le", lambda x, y: x <= y),
                 ("gt", lambda x, y: x > y), ("ge", lambda x, y: x >= y)):
    _rule = _compare(_fn)
    _rule.__name__ = _op
    register(getattr(aten, _op).Tensor, getattr(aten, _op).Scalar)(_rule)


@register(aten.logical_and.default, aten.bitwise_and.Tensor)
def logical_and(ctx: LoweringContext, a: Val, b: Val) -> Val:
    _bool_operands(ctx, a, b)
    return ctx.elementwise(lambda x, y: x & y, [a, b], "bool", compute="bool")


@register(aten.logical_or.default, aten.bitwise_or.Tensor)
def logical_or(ctx: LoweringContext, a: Val, b: Val) -> Val:
    _bool_operands(ctx, a, b)
    return ctx.elementwise(lambda x, y: x | y, [a, b], "bool", compute="bool")


@register(aten.logical_xor.default, aten.bitwise_xor.Tensor)
def logical_xor(ctx: LoweringContext, a: Val, b: Val) -> Val:
    _bool_operands(ctx, a, b)
    return ctx.elementwise(lambda x, y: (x & ~y) | (~x & y), [a, b], "bool", compute="bool")


@register(aten.logical_not.default, aten.bitwise_not.default)
def logical_not(ctx: LoweringContext, a: Val) -> Val:
    _bool_operands(ctx, a)
    return ctx.elementwise(lambda x: ~x, [a], "bool", compute="bool")


def _bool_operands(ctx: LoweringContext, *vals: Any) -> None:
    if ctx.target_op_name.startswith("aten.bitwise") and any(isinstance(v, Val) and v.dtype != "bool" for v in vals):
        raise Unsupported("bitwise operations on integers")


@register(aten.isnan.default)
def isnan(ctx: LoweringContext, x: Val) -> Val:
    return ctx.elementwise(lambda v: te.not_equal(v, v), [x], "bool")


@register(aten.isinf.default)
def isinf(ctx: LoweringContext, x: Val) -> Val:
    return ctx.elementwise(lambda v: te.equal(te.abs(v), float("inf")), [x], "bool")


@register(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def where(ctx: LoweringContext, cond: Val, a: Any, b: Any) -> Val:
    from .context import compute_dtype
    out = _out(ctx)
    cdt = compute_dtype([out]) if out != "bool" else "bool"
    return ctx.elementwise(lambda c, x, y: te.select(c, x, y), [cond, a, b], out, compute=["bool", cdt, cdt])


@register(aten._to_copy.default)
def to_copy(ctx: LoweringContext, x: Val, dtype: Any = None, layout: Any = None, device: Any = None,
            pin_memory: Any = None, non_blocking: bool = False, memory_format: Any = None) -> Val:
    if device is not None and torch.device(device).type != ctx.device_type:
        raise Unsupported(f"a copy to {device}")
    return ctx.cast(x, _out(ctx)) if _out(ctx) != x.dtype else copy(ctx, x)


@register(aten.clone.default, aten.alias.default, aten.lift_fresh_copy.default, aten.detach.default,
          aten.detach_copy.default, aten.alias_copy.default, aten.contiguous.default)
def copy(ctx: LoweringContext, x: Val, **_: Any) -> Val:
    return ctx.elementwise(lambda v: v, [x], x.dtype, compute=x.dtype)
