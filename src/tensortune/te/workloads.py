"""Standard computations written as tensor expressions: the workloads tests, examples and
the auto-scheduler share (matmul, batched matmul, fused matmul + bias + ReLU, conv2d,
depthwise conv2d, softmax, layer norm, transpose, attention).

Example:
    >>> w = conv2d_nchw(1, 3, 8, 8, 4, 3, 3, stride=2, padding=1)
    >>> [t.name for t in w.inputs], w.outputs[0].shape, w.flops
    (['data', 'weight'], (1, 4, 4, 4), 3456.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from . import ops
from .dtype import TEError, is_float
from .tensor import Tensor, compute, placeholder


@dataclass(frozen=True)
class Computation:
    """Inputs and outputs of a named computation, with its floating-point work."""

    name: str
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    flops: float
    key: tuple[tuple[str, Any], ...] = ()

    @property
    def args(self) -> tuple[Tensor, ...]:
        return self.inputs + self.outputs

    @property
    def output(self) -> Tensor:
        return self.outputs[0]


def matmul(m: int, n: int, k: int, dtype: str = "float32", layout: str = "NN") -> Computation:
    """C = A @ B (m x n, reducing over k). `layout` says which operands are stored
    transposed, as BLAS does: "NN" (A is m x k, B is k x n), "NT" (B is n x k: A @ B^T),
    "TN" (A is k x m: A^T @ B) or "TT"."""
    if layout not in ("NN", "NT", "TN", "TT"):
        raise TEError(f"matmul layout {layout!r} must be one of NN, NT, TN, TT")
    ta, tb = layout[0] == "T", layout[1] == "T"
    A = placeholder((k, m) if ta else (m, k), dtype, "A")
    B = placeholder((n, k) if tb else (k, n), dtype, "B")
    r = ops.reduce_axis(k, "k")
    C = compute((m, n), lambda i, j: ops.sum((A[r, i] if ta else A[i, r]) * (B[j, r] if tb else B[r, j]), axis=r),
                name="C")
    key = (("M", m), ("N", n), ("K", k), ("dtype", dtype)) + ((("layout", layout),) if layout != "NN" else ())
    return Computation("matmul", (A, B), (C,), 2.0 * m * n * k, key)


def batch_matmul(b: int, m: int, n: int, k: int, dtype: str = "float32") -> Computation:
    A = placeholder((b, m, k), dtype, "A")
    B = placeholder((b, k, n), dtype, "B")
    r = ops.reduce_axis(k, "k")
    C = compute((b, m, n), lambda x, i, j: ops.sum(A[x, i, r] * B[x, r, j], axis=r), name="C")
    return Computation("batch_matmul", (A, B), (C,), 2.0 * b * m * n * k,
                       (("B", b), ("M", m), ("N", n), ("K", k), ("dtype", dtype)))


def matmul_bias_relu(m: int, n: int, k: int, dtype: str = "float32") -> Computation:
    """relu(A @ B + bias): the matmul stage `C` and the fused elementwise output `D`."""
    A = placeholder((m, k), dtype, "A")
    B = placeholder((k, n), dtype, "B")
    bias = placeholder((n,), dtype, "bias")
    r = ops.reduce_axis(k, "k")
    C = compute((m, n), lambda i, j: ops.sum(A[i, r] * B[r, j], axis=r), name="C")
    D = compute((m, n), lambda i, j: ops.maximum(C[i, j] + bias[j], 0.0), name="D")
    return Computation("matmul_bias_relu", (A, B, bias), (D,), 2.0 * m * n * k + 2.0 * m * n,
                       (("M", m), ("N", n), ("K", k), ("dtype", dtype)))


def pad(x: Tensor, pad_h: int, pad_w: int, value: float = 0.0, name: str = "pad") -> Tensor:
    """Zero-pad (or `value`-pad) the last two dimensions of an NCHW tensor."""
    n, c, h, w = x.shape
    return compute((n, c, h + 2 * pad_h, w + 2 * pad_w),
                   lambda b, ch, y, z: ops.select(ops.all(y >= pad_h, y < h + pad_h, z >= pad_w, z < w + pad_w),
                                                  x[b, ch, y - pad_h, z - pad_w], value), name=name)


def _out(size: int, kernel: int, stride: int, padding: int) -> int:
    return (size + 2 * padding - kernel) // stride + 1


def conv2d_nchw(n: int, c: int, h: int, w: int, k: int, r: int, s: int, stride: int = 1, padding: int = 0,
                dtype: str = "float32") -> Computation:
    data = placeholder((n, c, h, w), dtype, "data")
    weight = placeholder((k, c, r, s), dtype, "weight")
    padded = pad(data, padding, padding) if padding else data
    oh, ow = _out(h, r, stride, padding), _out(w, s, stride, padding)
    rc, rr, rs = ops.reduce_axis(c, "rc"), ops.reduce_axis(r, "rr"), ops.reduce_axis(s, "rs")
    out = compute((n, k, oh, ow), lambda b, f, y, x: ops.sum(
        padded[b, rc, y * stride + rr, x * stride + rs] * weight[f, rc, rr, rs], axis=[rc, rr, rs]), name="conv")
    return Computation("conv2d_nchw", (data, weight), (out,), 2.0 * n * k * oh * ow * c * r * s,
                       (("N", n), ("C", c), ("H", h), ("W", w), ("K", k), ("R", r), ("S", s), ("stride", stride),
                        ("padding", padding), ("dtype", dtype)))


def depthwise_conv2d_nchw(n: int, c: int, h: int, w: int, r: int, s: int, stride: int = 1, padding: int = 0,
                          dtype: str = "float32") -> Computation:
    data = placeholder((n, c, h, w), dtype, "data")
    weight = placeholder((c, r, s), dtype, "weight")
    padded = pad(data, padding, padding) if padding else data
    oh, ow = _out(h, r, stride, padding), _out(w, s, stride, padding)
    rr, rs = ops.reduce_axis(r, "rr"), ops.reduce_axis(s, "rs")
    out = compute((n, c, oh, ow), lambda b, ch, y, x: ops.sum(
        padded[b, ch, y * stride + rr, x * stride + rs] * weight[ch, rr, rs], axis=[rr, rs]), name="dwconv")
    return Computation("depthwise_conv2d_nchw", (data, weight), (out,), 2.0 * n * c * oh * ow * r * s,
                       (("N", n), ("C", c), ("H", h), ("W", w), ("R", r), ("S", s), ("stride", stride),
                        ("padding", padding), ("dtype", dtype)))


def softmax(rows: int, cols: int, dtype: str = "float32") -> Computation:
    """Softmax over each row, stabilized by the row maximum."""
    X = placeholder((rows, cols), dtype, "X")
    k1, k2 = ops.reduce_axis(cols, "k"), ops.reduce_axis(cols, "k")
    mx = compute((rows,), lambda i: ops.max(X[i, k1], axis=k1), name="rowmax")
    e = compute((rows, cols), lambda i, j: ops.exp(X[i, j] - mx[i]), name="exp")
    total = compute((rows,), lambda i: ops.sum(e[i, k2], axis=k2), name="rowsum")
    out = compute((rows, cols), lambda i, j: e[i, j] / total[i], name="softmax")
    return Computation("softmax", (X,), (out,), 5.0 * rows * cols, (("rows", rows), ("cols", cols), ("dtype", dtype)))


def layer_norm(rows: int, cols: int, eps: float = 1e-5, dtype: str = "float32") -> Computation:
    """(x - mean) / sqrt(var + eps) * gamma + beta over each row."""
    X = placeholder((rows, cols), dtype, "X")
    gamma = placeholder((cols,), dtype, "gamma")
    beta = placeholder((cols,), dtype, "beta")
    k1, k2 = ops.reduce_axis(cols, "k"), ops.reduce_axis(cols, "k")
    inv = 1.0 / cols
    mean = compute((rows,), lambda i: ops.sum(X[i, k1] * inv, axis=k1), name="mean")
    var = compute((rows,), lambda i: ops.sum((X[i, k2] - mean[i]) * (X[i, k2] - mean[i]) * inv, axis=k2),
                  name="var")
    out = compute((rows, cols), lambda i, j: (X[i, j] - mean[i]) / ops.sqrt(var[i] + eps) * gamma[j] + beta[j],
                  name="layer_norm")
    return Computation("layer_norm", (X, gamma, beta), (out,), 8.0 * rows * cols,
                       (("rows", rows), ("cols", cols), ("dtype", dtype)))


def transpose(m: int, n: int, dtype: str = "float32") -> Computation:
    A = placeholder((m, n), dtype, "A")
    T = compute((n, m), lambda i, j: A[j, i], name="T")
    return Computation("transpose", (A,), (T,), 0.0, (("M", m), ("N", n), ("dtype", dtype)))


def _accumulator(dtype: str) -> str:
    """Where products of `dtype` values are summed: float32 for half types, else the type itself."""
    return dtype if dtype in ("float32", "float64") else "float32"


def _widen(x: Any, dtype: str) -> Any:
    return x if x.dtype == dtype else x.astype(dtype)


def _mask_reader(mask: Tensor, shape: tuple[int, ...]) -> Any:
    """Reads of a mask broadcast (right-aligned, as torch broadcasts) to `shape`."""
    if mask.ndim > len(shape):
        raise TEError(f"attention mask {mask.name!r} {list(mask.shape)} has more dimensions than the scores "
                      f"{list(shape)}")
    lead = len(shape) - mask.ndim
    for d, n in enumerate(mask.shape):
        if n not in (1, shape[lead + d]):
            raise TEError(f"attention mask {mask.name!r} {list(mask.shape)} does not broadcast to the scores "
                          f"{list(shape)} (dimension {d} is {n})")
    return lambda *idx: mask[tuple(0 if n == 1 else i for n, i in zip(mask.shape, idx[lead:]))]


def attention_stages(q: Tensor, k: Tensor, v: Tensor, *, scale: float, mask: Tensor | None = None,
                     causal: bool = False, name: str = "attn") -> Tensor:
    """Scaled dot-product attention of existing tensors, as the stages a compiler splits or fuses.

    `q` [B, H, Sq, D], `k` [B, Hkv, Skv, D], `v` [B, Hkv, Skv, Dv] with `Hkv` dividing `H`
    (grouped-query attention: head h reads key/value head h // (H // Hkv)). `mask`
    broadcasts to [B, H, Sq, Skv]: float values are added to the scaled scores, bool values
    keep a score where True (False is -inf). `causal` keeps key j for query i when
    j <= i + (Skv - Sq): the last query sees every key (FlashAttention's convention, and
    torch's `is_causal` when Sq == Skv; torch aligns `is_causal` to the top left when
    Sq != Skv). A query whose keys are all masked gets zeros, as torch does. Returns
    [B, H, Sq, Dv] in q's dtype.

    Stages: `{name}_scores` (sum over d of q * k, in float32 for half inputs),
    `{name}_logits` (scale, mask, causal select), `{name}_max` (row max over the keys),
    `{name}_exp` (exp of the logit minus the max; a fully masked row subtracts 0),
    `{name}_sum` (row sum), `{name}_probs` (normalised, rounded to q's dtype as torch's
    math path does before the second product), `{name}_pv` (sum over the keys of probs *
    v, in float32 for half inputs) and `name` (cast to q's dtype; the `_pv` stage itself
    when no cast is needed).

    Example:
        >>> q = placeholder((1, 4, 8, 16), "float16", "q")
        >>> kv = placeholder((1, 2, 8, 16), "float16", "k"), placeholder((1, 2, 8, 16), "float16", "v")
        >>> out = attention_stages(q, *kv, scale=0.25, causal=True)
        >>> out.shape, out.dtype, out.name
        ((1, 4, 8, 16), 'float16', 'attn')
    """
    for t, what in ((q, "q"), (k, "k"), (v, "v")):
        if not isinstance(t, Tensor) or t.ndim != 4:
            raise TEError(f"attention {what} must be a 4-dimensional tensor [batch, heads, sequence, dim], got {t!r}")
        if not is_float(t.dtype) and t.dtype != "bfloat16":
            raise TEError(f"attention {what} {t.name!r} is {t.dtype}; q, k and v must be floats")
    if not (q.dtype == k.dtype == v.dtype):
        raise TEError(f"attention q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    b, h, sq, d = q.shape
    bk, hkv, skv, dk = k.shape
    if (bk, dk) != (b, d) or v.shape[:3] != k.shape[:3]:
        raise TEError(f"attention shapes do not fit: q {list(q.shape)} [B, H, Sq, D], k {list(k.shape)} "
                      f"[B, Hkv, Skv, D], v {list(v.shape)} [B, Hkv, Skv, Dv]")
    if h % hkv:
        raise TEError(f"attention: {hkv} key/value heads do not divide {h} query heads")
    if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not math.isfinite(scale):
        raise TEError(f"attention scale must be a finite number, got {scale!r}")
    dv = v.shape[3]
    group = h // hkv
    acc = _accumulator(q.dtype)
    scores_shape = (b, h, sq, skv)
    kv_head = (lambda x: x // group) if group > 1 else (lambda x: x)
    rd = ops.reduce_axis(d, "d")
    scores = compute(scores_shape, lambda z, y, i, j: ops.sum(
        _widen(q[z, y, i, rd], acc) * _widen(k[z, kv_head(y), j, rd], acc), axis=rd), name=f"{name}_scores")
    read_mask = _mask_reader(mask, scores_shape) if mask is not None else None
    if mask is not None and not (mask.dtype == "bool" or is_float(mask.dtype) or mask.dtype == "bfloat16"):
        raise TEError(f"attention mask {mask.name!r} is {mask.dtype}; use bool (True keeps) or a float (added)")
    neg_inf = float("-inf")

    def logit(z: Any, y: Any, i: Any, j: Any) -> Any:
        x = scores[z, y, i, j] * float(scale)
        keep = None
        if read_mask is not None:
            m = read_mask(z, y, i, j)
            if mask is not None and mask.dtype == "bool":
                keep = m
            else:
                x = x + _widen(m, acc)
        if causal:
            diagonal = j <= i + (skv - sq)
            keep = diagonal if keep is None else ops.all(diagonal, keep)
        return x if keep is None else ops.select(keep, x, neg_inf)

    logits = compute(scores_shape, logit, name=f"{name}_logits")
    j1 = ops.reduce_axis(skv, "j")
    row_max = compute((b, h, sq), lambda z, y, i: ops.max(logits[z, y, i, j1], axis=j1), name=f"{name}_max")
    exps = compute(scores_shape, lambda z, y, i, j: ops.exp(
        logits[z, y, i, j] - ops.select(row_max[z, y, i] > neg_inf, row_max[z, y, i], 0.0)), name=f"{name}_exp")
    j2 = ops.reduce_axis(skv, "j")
    row_sum = compute((b, h, sq), lambda z, y, i: ops.sum(exps[z, y, i, j2], axis=j2), name=f"{name}_sum")
    probs = compute(scores_shape, lambda z, y, i, j: ops.cast(
        exps[z, y, i, j] / ops.select(row_sum[z, y, i] > 0.0, row_sum[z, y, i], 1.0), q.dtype), name=f"{name}_probs")
    j3 = ops.reduce_axis(skv, "j")
    out_shape = (b, h, sq, dv)
    pv_name = name if acc == q.dtype else f"{name}_pv"
    pv = compute(out_shape, lambda z, y, i, e: ops.sum(
        _widen(probs[z, y, i, j3], acc) * _widen(v[z, kv_head(y), j3, e], acc), axis=j3), name=pv_name)
    if acc == q.dtype:
        return pv
    return compute(out_shape, lambda z, y, i, e: ops.cast(pv[z, y, i, e], q.dtype), name=name)


def attention_pairs(sq: int, skv: int, causal: bool) -> int:
    """How many (query, key) pairs attention keeps per head (all of them unless causal)."""
    if not causal:
        return sq * skv
    return sum(min(skv, max(0, i + skv - sq + 1)) for i in range(sq))


def attention(b: int, h: int, sq: int, skv: int, d: int, dtype: str = "float16", causal: bool = False, *,
              kv_heads: int | None = None, dv: int | None = None, mask: str | None = None,
              mask_shape: tuple[int, ...] | None = None, scale: float | None = None) -> Computation:
    """Scaled dot-product attention on fresh inputs `q`, `k`, `v` (and `mask`): see
    `attention_stages`. `kv_heads` (default `h`) makes it grouped-query attention, `dv` the
    value width (default `d`), `mask` "float" or "bool" adds a mask input of `mask_shape`
    (default [b, h, sq, skv]), `scale` defaults to 1/sqrt(d). Flops count the kept pairs.

    Example:
        >>> w = attention(2, 4, 16, 16, 8, causal=True, kv_heads=2)
        >>> [t.name for t in w.inputs], w.output.shape, w.flops
        (['q', 'k', 'v'], (2, 4, 16, 8), 34816.0)
    """
    hkv = h if kv_heads is None else kv_heads
    dv = d if dv is None else dv
    q = placeholder((b, h, sq, d), dtype, "q")
    k = placeholder((b, hkv, skv, d), dtype, "k")
    v = placeholder((b, hkv, skv, dv), dtype, "v")
    inputs = [q, k, v]
    m = None
    if mask is not None:
        if mask not in ("float", "bool"):
            raise TEError(f"attention mask must be 'float', 'bool' or None, got {mask!r}")
        m = placeholder(tuple(mask_shape or (b, h, sq, skv)), dtype if mask == "float" else "bool", "mask")
        inputs.append(m)
    out = attention_stages(q, k, v, scale=1.0 / math.sqrt(d) if scale is None else scale, mask=m, causal=causal,
                           name="attention")
    flops = 2.0 * b * h * attention_pairs(sq, skv, causal) * (d + dv)
    key = (("B", b), ("H", h), ("Hkv", hkv), ("Sq", sq), ("Skv", skv), ("D", d), ("Dv", dv), ("dtype", dtype),
           ("causal", causal), ("mask", mask), ("mask_shape", tuple(m.shape) if m is not None else None))
    return Computation("attention", tuple(inputs), (out,), flops, key)
