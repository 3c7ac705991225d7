"""A Triton kernel's identity in the records: its qualified name and source text.

The source covers the kernel's own text and, transitively, the text of the
`@triton.jit` functions it calls by name, so editing a helper re-tunes the kernels
that use it while moving code around in the file does not.

Example:
    >>> def f(x):
    ...     return x + 1
    >>> kernel_name(f).endswith("f"), "return x + 1" in kernel_source(f)
    (True, True)
"""

from __future__ import annotations

import inspect
import textwrap
from typing import Any


def base_function(fn: Any) -> Any:
    """The plain Python function under any stack of Triton wrappers."""
    seen = 0
    while not inspect.isfunction(fn) and hasattr(fn, "fn") and seen < 16:
        fn = fn.fn
        seen += 1
    return fn


def kernel_name(fn: Any) -> str:
    base = base_function(fn)
    return f"{getattr(base, '__module__', '?')}.{getattr(base, '__qualname__', repr(base))}"


def _own_source(base: Any) -> str:
    try:
        return textwrap.dedent(inspect.getsource(base))
    except (OSError, TypeError):
        return getattr(base, "__qualname__", repr(base))


def _is_triton_function(obj: Any) -> bool:
    module = type(obj).__module__ or ""
    return module.startswith("triton.") and hasattr(obj, "fn") and inspect.isfunction(base_function(obj))


def kernel_source(fn: Any, depth: int = 4) -> str:
    """The kernel's source text followed by the sources of the jit helpers it calls."""
    base = base_function(fn)
    parts = [_own_source(base)]
    seen = {id(base)}
    frontier = [base]
    for _ in range(depth):
        nxt = []
        for f in frontier:
            globals_ = getattr(f, "__globals__", {})
            for name in sorted(set(getattr(getattr(f, "__code__", None), "co_names", ()))):
                obj = globals_.get(name)
                if obj is None or not _is_triton_function(obj):
                    continue
                helper = base_function(obj)
                if id(helper) in seen:
                    continue
                seen.add(id(helper))
                parts.append(_own_source(helper))
                nxt.append(helper)
        frontier = nxt
    return "\n".join(parts)
