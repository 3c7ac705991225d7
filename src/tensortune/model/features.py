"""Numeric features of configurations (and of the workload) for cost models.

Features are named, so models trained on one space can score another that shares
parameter names (a new shape, a new device). Per parameter: each choice's value (numbers
as they are, other values as a stable hash), its log2 when the values are positive
numbers, and for positive integers that are not all powers of two their alignment (the
largest power of two dividing them: 48 -> 2^4) and whether they are a power of two (96
aligns like 32, but kernels with fast paths for powers of two tell them apart: on the
A4000 convolution space, without shared memory only block widths 32, 64, 128 and 256
are fast), kept in a look-up table per parameter
(computed on demand for parameters with huge ranges). Pairwise products of numeric
parameters follow (threads per block is `block_x * block_y`, which trees cannot
multiply). When a parameter is called `num_warps` (Triton's launch option), each other
numeric parameter and each product of two is also divided by the threads of a block
(`BLOCK_M*BLOCK_N/thread`: accumulator elements per thread, what decides register
pressure and spilling).
Numeric entries of the workload key (shapes) are constant columns; other entries
(dtypes, layouts) become stable hashes.

Example:
    >>> from tensortune.space import Space
    >>> fx = FeatureExtractor(Space({"bx": [16, 32], "by": [1, 2, 4], "order": ["ij", "ji"]}))
    >>> fx.names
    ['bx', 'log2.bx', 'by', 'log2.by', 'order', 'bx*by']
    >>> row = fx.points([(1, 2, 0)])[0]
    >>> row[[0, 1, 2, 3, 5]].tolist()
    [32.0, 5.0, 4.0, 2.0, 128.0]
    >>> bool((fx.foreign([{"bx": 32, "by": 4, "order": "ij"}]) == row).all())
    True
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..space import Config, Space
from ..space.params import Param

MAX_PRODUCT_PARAMS = 16  # products of at most this many numeric parameters (120 pairs)
WARPS = "num_warps"  # a parameter of this name sets the threads of a block: 32 x num_warps
WARP_SIZE = 32
TABLE_LIMIT = 4096  # parameters with more choices compute their features on demand


def _number(v: Any) -> float | None:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)) and math.isfinite(v):
        return float(v)
    return None


def stable_hash(value: Any) -> float:
    """A number for a non-numeric value, equal in every process (exact in float32)."""
    return float(int(hashlib.sha256(repr(value).encode()).hexdigest()[:6], 16))


def _value(v: Any) -> float:
    x = _number(v)
    return x if x is not None else stable_hash(v)


def _alignment(x: float) -> int | None:
    """log2 of the largest power of two dividing a positive integer (48 -> 4): how a
    size aligns with warps, vectors and cache lines; None for other numbers."""
    if x <= 0 or x != int(x):
        return None
    n = int(x)
    return (n & -n).bit_length() - 1


def named_features(names: Sequence[str], config: Mapping[str, Any],
                   workload_key: Mapping[str, Any] | None = None) -> np.ndarray:
    """The features called `names` of any configuration, by name (NaN where unknown):
    how records of other spaces (other shapes, devices) are scored by one model."""
    key = workload_key or {}
    out = np.full(len(names), np.nan)
    for j, name in enumerate(names):
        if name.startswith("workload."):
            if name[9:] in key:
                out[j] = _value(key[name[9:]])
        elif name.startswith("align."):
            x = _number(config.get(name[6:]))
            if x is not None and _alignment(x) is not None:
                out[j] = _alignment(x)
        elif name.startswith("pow2."):
            x = _number(config.get(name[5:]))
            if x is not None and _alignment(x) is not None:
                out[j] = _encode(x, "pow2")
        elif name.startswith("log2."):
            x = _number(config.get(name[5:]))
            if x is not None and x > 0:
                out[j] = math.log2(x)
        elif name.endswith("/thread"):
            values = [_number(config.get(n)) for n in name[:-7].split("*")]
            warps = _number(config.get(WARPS))
            if warps and all(v is not None for v in values):
                out[j] = math.prod(values) / (WARP_SIZE * warps)  # type: ignore[arg-type]
        elif "*" in name:
            a, b = (_number(config.get(n)) for n in name.split("*", 1))
            if a is not None and b is not None:
                out[j] = a * b
        elif name in config:
            out[j] = _value(config[name])
    return out


class _ParamFeatures:
    """The feature columns of one parameter: a table of every choice when it has at most
    TABLE_LIMIT choices, computed for the choices asked for otherwise (huge ranges)."""

    def __init__(self, param: Param) -> None:
        self.param = param
        n = len(param)
        probe = range(n) if n <= TABLE_LIMIT else sorted({int(i) for i in np.linspace(0, n - 1, 257)})
        self.columns: list[tuple[str, str]] = []  # (parameter name, kind)
        self.is_number: dict[str, bool] = {}
        for name in param.names:
            values = [param.assignment(i)[name] for i in probe]
            kinds = _column_kinds(values)
            self.columns += [(name, kind) for kind in kinds]
            self.is_number[name] = kinds[0] == "value" and not isinstance(values[0], bool) and n > 1
        self.table = self._compute(np.arange(n)) if n <= TABLE_LIMIT else None

    @property
    def names(self) -> list[str]:
        return [name if kind in ("value", "hash") else f"{kind}.{name}" for name, kind in self.columns]

    def _compute(self, indices: np.ndarray) -> np.ndarray:
        rows = []
        for i in indices.tolist():
            values = self.param.assignment(int(i))
            rows.append([_encode(values[name], kind) for name, kind in self.columns])
        return np.asarray(rows, dtype=np.float64).reshape(len(indices), len(self.columns))

    def __call__(self, indices: np.ndarray) -> np.ndarray:
        if self.table is not None:
            return self.table[indices]
        unique, inverse = np.unique(indices, return_inverse=True)
        return self._compute(unique)[inverse]


def _column_kinds(values: Sequence[Any]) -> list[str]:
    nums = [_number(v) for v in values]
    if any(x is None for x in nums):
        return ["hash"]
    kinds = ["value"]
    if all(x > 0 for x in nums):  # type: ignore[operator]
        kinds.append("log2")
        aligned = [_alignment(x) for x in nums]  # type: ignore[arg-type]
        if all(a is not None for a in aligned) and any(a != math.log2(x) for a, x in zip(aligned, nums)):  # type: ignore[arg-type]
            kinds += ["align", "pow2"]
    return kinds


def _encode(value: Any, kind: str) -> float:
    if kind == "hash":
        return stable_hash(value)
    x = _number(value)
    if x is None:
        return math.nan
    if kind == "value":
        return x
    if kind == "log2":
        return math.log2(x) if x > 0 else math.nan
    a = _alignment(x)
    if kind == "pow2":
        return float(a is not None and 2**a == x)
    return float(a) if a is not None else math.nan


class FeatureExtractor:
    """Maps choice-index points of a space to a float matrix with named columns."""

    def __init__(self, space: Space, workload_key: Mapping[str, Any] | None = None,
                 products: bool = True) -> None:
        self.space = space
        self.workload_key = dict(workload_key or {})
        self._params = [_ParamFeatures(p) for p in space.params]
        names: list[str] = []
        numeric: list[tuple[str, int, int]] = []  # (name, parameter index, column in its block)
        for k, pf in enumerate(self._params):
            for c, (name, kind) in enumerate(pf.columns):
                if kind == "value" and pf.is_number[name]:
                    numeric.append((name, k, c))
            names.extend(pf.names)
        self._pairs: list[tuple[int, int, int, int]] = []
        self._warps: tuple[int, int] | None = None
        self._per_thread: list[tuple[tuple[int, int], ...]] = []
        if products:
            numeric = numeric[:MAX_PRODUCT_PARAMS]
            for a in range(len(numeric)):
                for b in range(a + 1, len(numeric)):
                    na, ka, ca = numeric[a]
                    nb, kb, cb = numeric[b]
                    self._pairs.append((ka, ca, kb, cb))
                    names.append(f"{na}*{nb}")
            warps = [(k, c) for n, k, c in numeric if n == WARPS]
            if warps:
                self._warps = warps[0]
                others = [(n, k, c) for n, k, c in numeric if n != WARPS]
                for combo in [*itertools.combinations(others, 1), *itertools.combinations(others, 2)]:
                    self._per_thread.append(tuple((k, c) for _, k, c in combo))
                    names.append("*".join(n for n, _, _ in combo) + "/thread")
        self._workload_values = [(f"workload.{k}", _value(v)) for k, v in sorted(self.workload_key.items())]
        names.extend(n for n, _ in self._workload_values)
        self.names: list[str] = names

    @property
    def width(self) -> int:
        return len(self.names)

    def points(self, points: Sequence[Sequence[int]] | np.ndarray) -> np.ndarray:
        """Feature rows of choice-index points (fast: table look-ups)."""
        idx = np.asarray(points, dtype=np.int64).reshape(-1, len(self._params))
        blocks = [pf(idx[:, k]) for k, pf in enumerate(self._params)]
        if self._pairs:
            blocks.append(np.stack([blocks[ka][:, ca] * blocks[kb][:, cb] for ka, ca, kb, cb in self._pairs],
                                   axis=1))
        if self._warps is not None and self._per_thread:
            threads = WARP_SIZE * blocks[self._warps[0]][:, self._warps[1]]
            blocks.append(np.stack([np.prod([blocks[k][:, c] for k, c in combo], axis=0) / threads
                                    for combo in self._per_thread], axis=1))
        if self._workload_values:
            blocks.append(np.tile([v for _, v in self._workload_values], (len(idx), 1)))
        return np.concatenate(blocks, axis=1) if blocks else np.zeros((len(idx), 0))

    def configs(self, configs: Sequence[Mapping[str, Any]]) -> np.ndarray:
        return self.points([self.space.to_point(c) for c in configs])

    def foreign(self, configs: Sequence[Mapping[str, Any]],
                workload_key: Mapping[str, Any] | None = None) -> np.ndarray:
        """Rows for configurations of another space or workload, matched by feature name."""
        return np.stack([named_features(self.names, c, workload_key) for c in configs]) \
            if configs else np.zeros((0, self.width))

    def __call__(self, config: Config) -> np.ndarray:
        return self.configs([config])[0]
