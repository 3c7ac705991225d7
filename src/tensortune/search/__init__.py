"""Search strategies behind one ask/tell interface, created by name."""

from .base import SearchStrategy, create_strategy, register_strategy, strategy_class, strategy_names

__all__ = ["SearchStrategy", "create_strategy", "register_strategy", "strategy_class", "strategy_names"]
