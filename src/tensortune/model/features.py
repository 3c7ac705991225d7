"""Numeric features of configurations (and of the workload) for cost models.

Features are named, so models trained on one space can score another that shares
parameter names (a new shape, a new device). Per parameter a lookup table holds each
choice's value (numbers as they are, other values as a stable hash), its log2 when
the values are positive numbers, and for positive integers that are not all powers of
two their alignment (the largest power of two dividing them: 48 -> 2^4); pairwise products of numeric parameters follow (the
number of threads of a block is `block_x * block_y`, which trees cannot multiply).
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
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..space import Config, Space

MAX_PRODUCT_PARAMS = 16  # products of at most this many numeric parameters (120 pairs)


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
        elif name.startswith("log2."):
            x = _number(config.get(name[5:]))
            if x is not None and x > 0:
                out[j] = math.log2(x)
        elif "*" in name:
            a, b = (_number(config.get(n)) for n in name.split("*", 1))
            if a is not None and b is not None:
                out[j] = a * b
        elif name in config:
            out[j] = _value(config[name])
    return out


class FeatureExtractor:
    """Maps choice-index points of a space to a float matrix with named columns."""

    def __init__(self, space: Space, workload_key: Mapping[str, Any] | None = None,
                 products: bool = True) -> None:
        self.space = space
        self.workload_key = dict(workload_key or {})
        names: list[str] = []
        tables: list[np.ndarray] = []  # one (choices x columns) table per parameter
        numeric_cols: list[tuple[str, int, int]] = []  # (name, param index, column in table)
        for k, p in enumerate(space.params):
            cols: list[list[float]] = []
            col_names: list[str] = []
            for j, name in enumerate(p.names):
                values = [p.assignment(i)[name] for i in range(len(p))]
                nums = [_number(v) for v in values]
                if all(x is not None for x in nums):
                    cols.append([float(x) for x in nums])  # type: ignore[arg-type]
                    col_names.append(name)
                    if len(p) > 1 and not isinstance(values[0], bool):
                        numeric_cols.append((name, k, len(cols) - 1))
                    if all(x > 0 for x in nums):  # type: ignore[operator]
                        cols.append([math.log2(x) for x in nums])  # type: ignore[arg-type]
                        col_names.append(f"log2.{name}")
                        if all(_alignment(x) is not None for x in nums) and \
                                any(_alignment(x) != math.log2(x) for x in nums):  # type: ignore[arg-type]
                            cols.append([float(_alignment(x)) for x in nums])  # type: ignore[arg-type]
                            col_names.append(f"align.{name}")
                else:
                    cols.append([stable_hash(v) for v in values])
                    col_names.append(name)
            tables.append(np.asarray(cols, dtype=np.float64).T.reshape(len(p), len(cols)))
            names.extend(col_names)
        self._tables = tables
        self._pairs: list[tuple[int, int, int, int]] = []
        if products:
            numeric_cols = numeric_cols[:MAX_PRODUCT_PARAMS]
            for a in range(len(numeric_cols)):
                for b in range(a + 1, len(numeric_cols)):
                    na, ka, ca = numeric_cols[a]
                    nb, kb, cb = numeric_cols[b]
                    self._pairs.append((ka, ca, kb, cb))
                    names.append(f"{na}*{nb}")
        self._workload_values = [(f"workload.{k}", _value(v)) for k, v in sorted(self.workload_key.items())]
        names.extend(n for n, _ in self._workload_values)
        self.names: list[str] = names

    @property
    def width(self) -> int:
        return len(self.names)

    def points(self, points: Sequence[Sequence[int]] | np.ndarray) -> np.ndarray:
        """Feature rows of choice-index points (fast: table look-ups)."""
        idx = np.asarray(points, dtype=np.int64).reshape(-1, len(self._tables))
        blocks = [table[idx[:, k]] for k, table in enumerate(self._tables)]
        if self._pairs:
            blocks.append(np.stack(
                [self._tables[ka][idx[:, ka], ca] * self._tables[kb][idx[:, kb], cb]
                 for ka, ca, kb, cb in self._pairs], axis=1))
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
