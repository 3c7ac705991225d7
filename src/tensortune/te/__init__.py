"""Tensor expressions: write the math once, schedule it separately, compile it to C.

Example:
    >>> import numpy as np
    >>> from tensortune import te
    >>> C = te.parse("C(m, n) +=! A(m, k) * B(k, n)", A=(32, 16), B=(16, 24))
    >>> A, B = te.placeholders(C)
    >>> s = te.create_schedule(C)
    >>> mo, no, mi, ni = s[C].tile("m", "n", 8, 8)
    >>> s[C].reorder(mo, no, "k", mi, ni)
    >>> s[C].vectorize(ni)
    >>> f = te.build(s, [A, B, C])
    >>> a, b = np.ones((32, 16), "float32"), np.ones((16, 24), "float32")
    >>> float(f(a, b)[0, 0])
    16.0
"""

from __future__ import annotations

from .analysis import AccessInfo, LoopInfo, StoreInfo, loop_nest_info
from .build import Kernel, build, c_source
from .dtype import TEError
from .expr import Expr, IterVar, Var, const
from .interpret import evaluate
from .ir import LoweredFunc
from .lower import lower
from .ops import (abs, all, any, cast, cos, equal, erf, exp, if_then_else, log, max, maximum, min, minimum, not_equal,
                  reduce_axis, select, sigmoid, sin, sqrt, sum, tanh)
from .parse import parse
from .schedule import Loop, Schedule, Stage, create_schedule
from .steps import Step, steps_from_json, steps_to_json
from .tensor import Tensor, compute, graph, placeholder, placeholders
from . import workloads
from ..autoschedule.entry import autoschedule, autoschedule_many  # noqa: E402  (imports the search on first call)
from ..template.entry import template  # noqa: E402  (imports the template package on first use)

__all__ = [
    "AccessInfo", "LoopInfo", "StoreInfo", "c_source", "loop_nest_info", "lower", "Expr", "IterVar", "Kernel", "Loop", "LoweredFunc", "Schedule", "Stage", "Step", "TEError", "Tensor", "Var",
    "abs", "all", "any", "build", "cast", "compute", "cos", "const", "create_schedule", "equal", "erf", "evaluate", "exp",
    "graph", "if_then_else", "log", "max", "maximum", "min", "minimum", "not_equal", "parse", "placeholder",
    "placeholders", "reduce_axis", "select", "sigmoid", "sin", "sqrt", "steps_from_json", "steps_to_json", "sum", "tanh",
    "autoschedule", "autoschedule_many", "template", "workloads",
]
