"""Standard computations written as tensor expressions: the workloads tests, examples and
the auto-scheduler share (matmul, batched matmul, fused matmul + bias + ReLU, conv2d,
depthwise conv2d, softmax, layer norm, transpose).

Example:
    >>> w = conv2d_nchw(1, 3, 8, 8, 4, 3, 3, stride=2, padding=1)
    >>> [t.name for t in w.inputs], w.outputs[0].shape, w.flops
    (['data', 'weight'], (1, 4, 4, 4), 3456.0)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import ops
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


def matmul(m: int, n: int, k: int, dtype: str = "float32") -> Computation:
    A = placeholder((m, k), dtype, "A")
    B = placeholder((k, n), dtype, "B")
    r = ops.reduce_axis(k, "k")
    C = compute((m, n), lambda i, j: ops.sum(A[i, r] * B[r, j], axis=r), name="C")
    return Computation("matmul", (A, B), (C,), 2.0 * m * n * k, (("M", m), ("N", n), ("K", k), ("dtype", dtype)))


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
