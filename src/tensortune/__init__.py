"""tensortune: make tensor kernels fast by searching for how to run them.

Example:
    >>> import tensortune as tt
    >>> tt.Space({"BLOCK": [16, 32, 64]}).size
    3
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY = {
    "Space": "tensortune.space", "Config": "tensortune.space", "Categorical": "tensortune.space",
    "Ordinal": "tensortune.space", "PowerOfTwo": "tensortune.space", "IntRange": "tensortune.space",
    "Boolean": "tensortune.space", "Coupled": "tensortune.space", "SpaceError": "tensortune.space",
    "Constraint": "tensortune.space",
    "Tuner": "tensortune.tuner", "Budget": "tensortune.tuner", "TuneResult": "tensortune.tuner",
    "TuningFailed": "tensortune.tuner",
    "Database": "tensortune.db", "Workload": "tensortune.db", "Target": "tensortune.db",
    "ErrorKind": "tensortune.measure", "MeasureResult": "tensortune.measure", "Timer": "tensortune.measure",
    "create_strategy": "tensortune.search", "tune": "tensortune.frontends.callable",
    "tune_c": "tensortune.frontends.c", "ArrayArg": "tensortune.backends.c_kernel",
    "ScalarArg": "tensortune.backends.c_kernel",
    "Settings": "tensortune.settings",
    "autotune": "tensortune.frontends.triton", "Autotuner": "tensortune.frontends.triton",
    "compile": "tensortune.graph", "CompiledModel": "tensortune.graph", "CompileOptions": "tensortune.graph",
}


_EXTRA = {"tensortune.frontends.triton": "triton", "tensortune.graph": "torch"}  # module -> the extra it needs


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        from .extras import needs_extra

        with needs_extra(f"tensortune.{name}", _EXTRA.get(_LAZY[name])):
            module = importlib.import_module(_LAZY[name])
        value = getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tensortune' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = sorted(_LAZY) + ["__version__"]

if TYPE_CHECKING:  # what IDEs and type checkers see; at run time each name is imported on first use
    from .backends.c_kernel import ArrayArg, ScalarArg
    from .db import Database, Target, Workload
    from .frontends.c import tune_c
    from .frontends.callable import tune
    from .frontends.triton import Autotuner, autotune
    from .graph import CompiledModel, CompileOptions, compile
    from .measure import ErrorKind, MeasureResult, Timer
    from .search import create_strategy
    from .settings import Settings
    from .space import (Boolean, Categorical, Config, Constraint, Coupled, IntRange, Ordinal, PowerOfTwo, Space,
                        SpaceError)
    from .tuner import Budget, TuneResult, Tuner, TuningFailed
