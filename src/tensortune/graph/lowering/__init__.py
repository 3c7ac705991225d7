"""ATen ops lowered to te stages: a registry of rules, one module per family of ops.

`RULES` maps an ATen overload (`torch.ops.aten.add.Tensor`) to its rule; `rule_for(target)`
finds it. Rules live in `elementwise`, `shapes`, `reductions`, `linalg`, `norms`,
`attention` and `misc`; each is `rule(ctx, *args, **kwargs)` over `Val` operands (see
`context`).

Example:
    >>> import torch
    >>> rule_for(torch.ops.aten.addmm.default).__name__
    'addmm'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .context import LoweringContext, Unsupported, Val

RULES: dict[Any, Callable[..., Any]] = {}
_LOADED = False


def register(*targets: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a rule for ATen overloads (or packets: every overload of the op)."""
    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        for t in targets:
            if hasattr(t, "overloads"):
                for name in t.overloads():
                    RULES[getattr(t, name)] = fn
            else:
                RULES[t] = fn
        return fn
    return deco


def rule_for(target: Any) -> Callable[..., Any] | None:
    global _LOADED
    if not _LOADED:
        from . import attention, elementwise, linalg, misc, norms, reductions, shapes  # noqa: F401  (registers rules)
        _LOADED = True
    return RULES.get(target)


def covered_ops() -> list[str]:
    """The ATen overloads that have a rule, sorted by name (for the docs and the report)."""
    rule_for(None)
    return sorted({str(t) for t in RULES})


__all__ = ["LoweringContext", "RULES", "Unsupported", "Val", "covered_ops", "register", "rule_for"]
