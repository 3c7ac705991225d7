"""Search spaces: parameters, constraints and configurations.

Example:
    >>> from tensortune.space import Space, PowerOfTwo
    >>> s = Space([PowerOfTwo("BLOCK", 16, 256)], constraints=["BLOCK >= 32"])
    >>> s.size
    4
"""

from .config import Config
from .constraints import Constraint
from .params import Boolean, Categorical, Coupled, IntRange, Ordinal, Param, PowerOfTwo, SpaceError
from .space import Space

__all__ = [
    "Boolean", "Categorical", "Config", "Constraint", "Coupled", "IntRange", "Ordinal",
    "Param", "PowerOfTwo", "Space", "SpaceError",
]
