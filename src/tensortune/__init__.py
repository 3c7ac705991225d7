"""tensortune: make tensor kernels fast by searching for how to run them.

Example:
    >>> import tensortune as tt
    >>> tt.Space({"BLOCK": [16, 32, 64]}).size
    3
"""

from __future__ import annotations

from typing import Any

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
    "Settings": "tensortune.settings",
    "autotune": "tensortune.frontends.triton", "Autotuner": "tensortune.frontends.triton",
    "compile": "tensortune.graph", "CompiledModel": "tensortune.graph", "CompileOptions": "tensortune.graph",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tensortune' has no attribute {name!r}")


__all__ = sorted(_LAZY) + ["__version__"]
