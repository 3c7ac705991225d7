"""Tuning keys: which launches of a kernel share one tuned configuration.

A launch's key is the values of the kernel's `key` arguments plus the dtypes of its
tensor arguments (as `triton.autotune` does). A bucketing policy maps each key value to
its bucket, so a new shape in the same bucket reuses the tuned result:

- `exact`: the value itself;
- `pow2`: the next power of two (700 -> 1024);
- `round`: rounded up to a multiple of 2**(bits - 2), as tilus does, which keeps the
  midpoint between two powers of two (700 -> 768, 1000 -> 1024, 1536 -> 1536).

Example:
    >>> maker = KeyMaker(["x_ptr", "n", "BLOCK"], ["n"], bucket="pow2")
    >>> raw = maker.raw((None, 700), {})
    >>> maker.tuning_key(raw).as_dict()
    {'n': 1024, 'dtypes': []}
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

BucketFn = Callable[[Any], Any]


def exact(value: Any) -> Any:
    return value


def pow2(value: Any) -> Any:
    """The smallest power of two at least `value` (integers above 1 only; others unchanged)."""
    if not _is_int(value) or value <= 1:
        return value
    return 1 << (int(value) - 1).bit_length()


def round_up(value: Any) -> Any:
    """Round up to a multiple of 2**(bit_length - 2): two buckets per power of two."""
    if not _is_int(value) or value <= 2:
        return value
    step = 1 << max(int(value).bit_length() - 2, 0)
    return -(-int(value) // step) * step


POLICIES: dict[str, BucketFn] = {"exact": exact, "pow2": pow2, "round": round_up}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def policy(spec: "str | BucketFn") -> BucketFn:
    if callable(spec):
        return spec
    if spec not in POLICIES:
        raise ValueError(f"unknown bucketing policy {spec!r}; known: {', '.join(POLICIES)} "
                         f"or a function value -> bucket")
    return POLICIES[spec]


@dataclass(frozen=True)
class TuningKey:
    """A bucketed key: the key arguments' bucket values and the tensor dtypes."""

    names: tuple[str, ...]
    values: tuple[Any, ...]
    dtypes: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {**dict(zip(self.names, self.values)), "dtypes": list(self.dtypes)}

    def distance(self, other: "TuningKey") -> float:
        """How far apart two keys are: log2 distance summed over numeric values;
        infinite when dtypes or any non-numeric value differ."""
        if self.names != other.names or self.dtypes != other.dtypes:
            return math.inf
        total = 0.0
        for a, b in zip(self.values, other.values):
            if a == b:
                continue
            if _is_int(a) and _is_int(b) and a > 0 and b > 0:
                total += abs(math.log2(a) - math.log2(b))
            elif isinstance(a, (int, float)) and isinstance(b, (int, float)):
                total += abs(float(a) - float(b))
            else:
                return math.inf
        return total

    @staticmethod
    def from_dict(names: Sequence[str], d: Mapping[str, Any]) -> "TuningKey":
        return TuningKey(tuple(names), tuple(_tuple(d.get(n)) for n in names),
                         tuple(d.get("dtypes", ())))


def _tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


class KeyMaker:
    """Computes a launch's raw key fast (no bucketing, no strings) and its tuning key.

    The raw key is what the dispatch cache is indexed by: key-argument values, then the
    dtype objects of every argument that has one, in argument order.
    """

    def __init__(self, arg_names: Sequence[str], key: Sequence[str],
                 bucket: "str | BucketFn | Mapping[str, str | BucketFn]" = "exact") -> None:
        self.arg_names = tuple(arg_names)
        unknown = [k for k in key if k not in self.arg_names]
        if unknown:
            raise ValueError(f"key names {unknown} are not arguments of the kernel; "
                             f"its arguments are {list(self.arg_names)}")
        self.names = tuple(key)
        self._pos = tuple(self.arg_names.index(k) for k in key)
        if isinstance(bucket, Mapping):
            extra = set(bucket) - set(key)
            if extra:
                raise ValueError(f"bucket names {sorted(extra)} are not in key {list(key)}")
            self._buckets = tuple(policy(bucket.get(k, "exact")) for k in key)
        else:
            self._buckets = tuple(policy(bucket) for _ in key)
        self._by_arity: dict[int, Callable[[tuple[Any, ...]], tuple[Any, ...]]] = {}

    def raw(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """Key-argument values, then the dtype (or None) of every argument, in order."""
        if not kwargs:
            fast = self._by_arity.get(len(args))
            if fast is None:
                fast = self._by_arity[len(args)] = self._compile(len(args))
            return fast(args)
        bound = dict(zip(self.arg_names, args))
        bound.update((k, v) for k, v in kwargs.items() if k in self.arg_names)
        missing = [k for k in self.names if k not in bound]
        if missing:
            raise TypeError(f"key argument(s) {missing} were not passed to the kernel")
        return (*[bound[k] for k in self.names],
                *[getattr(bound[n], "dtype", None) for n in self.arg_names if n in bound])

    def _compile(self, arity: int) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
        """A function for `arity` positional arguments: indexing and getattr, no loops
        (the dispatch path's cost is mostly this)."""
        missing = [k for k, i in zip(self.names, self._pos) if i >= arity]
        if missing:
            def fail(args: tuple[Any, ...]) -> tuple[Any, ...]:
                raise TypeError(f"key argument(s) {missing} were not passed to the kernel")
            return fail
        items = [f"args[{i}]" for i in self._pos] + [f"_get(args[{i}], 'dtype', None)" for i in range(arity)]
        namespace: dict[str, Any] = {}
        body = f"({', '.join(items)},)" if items else "()"  # key=[] and no arguments: the empty key
        exec(f"def raw(args, _get=getattr):\n    return {body}\n", namespace)  # noqa: S102
        return namespace["raw"]

    def tuning_key(self, raw: tuple[Any, ...]) -> TuningKey:
        n = len(self.names)
        values = tuple(b(_plain(v)) for b, v in zip(self._buckets, raw[:n]))
        dtypes = tuple(dtype_name(d) for d in raw[n:] if d is not None)
        return TuningKey(self.names, values, dtypes)


def _plain(value: Any) -> Any:
    """Key values as JSON-friendly Python values (numpy/torch scalars unwrapped, a tensor
    as its shape, anything else, such as a `tl.float32` constexpr, as its text)."""
    if hasattr(value, "item") and callable(value.item) and not hasattr(value, "data_ptr"):
        return value.item()
    if hasattr(value, "dtype") and hasattr(value, "shape"):
        return tuple(value.shape)  # a tensor used as a key: its shape
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (tuple, list)):
        return tuple(_plain(v) for v in value)
    return str(value)


def dtype_name(dtype: Any) -> str:
    text = str(dtype)
    return text.split(".", 1)[1] if text.startswith("torch.") else text
