"""`te.template`, importable from `tensortune.te` without importing the template package
(which imports te) until a template is registered.

Example:
    >>> from tensortune import te
    >>> te.template("doctest_entry")(lambda cfg, n: None).name
    'doctest_entry'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def template(name: str) -> Callable[[Callable[..., Any]], Any]:
    """Register a schedule template under `name`: `@te.template("matmul")` (see
    `tensortune.template.template.template`)."""
    from .template import template as register
    return register(name)
