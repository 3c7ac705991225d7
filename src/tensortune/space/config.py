"""An immutable, hashable configuration with a stable JSON form.

Example:
    >>> c = Config({"BLOCK_M": 64, "num_warps": 4})
    >>> c["BLOCK_M"], c.to_json()
    (64, '{"BLOCK_M":64,"num_warps":4}')
    >>> Config.from_json(c.to_json()) == c
    True
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from typing import Any


def _normalize(value: Any) -> Any:
    """JSON-normal scalar: numpy scalars become Python ones, tuples become lists."""
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    if isinstance(value, (list, tuple)):
        return tuple(_normalize(v) for v in value)
    return value


class Config(Mapping[str, Any]):
    """A mapping from parameter names to values that never changes once made."""

    __slots__ = ("_items", "_json", "_hash")

    def __init__(self, values: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        merged = dict(values or {}, **kwargs)
        self._items: dict[str, Any] = {str(k): _normalize(v) for k, v in merged.items()}
        self._json = json.dumps(
            self._items, sort_keys=True, separators=(",", ":"), default=list
        )
        self._hash = hash(self._json)

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Config):
            return self._json == other._json
        if isinstance(other, Mapping):
            return self == Config(other)
        return NotImplemented

    def __repr__(self) -> str:
        body = ", ".join(f"{k}={v!r}" for k, v in self._items.items())
        return f"Config({body})"

    def __reduce__(self):
        return (Config, (self._items,))

    def to_json(self) -> str:
        """Canonical JSON: sorted keys, no spaces; equal configs give equal strings."""
        return self._json

    @property
    def digest(self) -> str:
        """A stable 16-hex-digit hash of the JSON form (the same in every process)."""
        return hashlib.sha256(self._json.encode()).hexdigest()[:16]

    @classmethod
    def from_json(cls, text: str) -> "Config":
        return cls(json.loads(text))

    def replace(self, **changes: Any) -> "Config":
        """A copy with some values changed."""
        return Config({**self._items, **changes})

    def as_dict(self) -> dict[str, Any]:
        return dict(self._items)
