"""The options of `@tensortune.autotune`, checked once when the decorator is applied.

Example:
    >>> o = AutotuneOptions.make(space={"BLOCK": [32, 64]}, key=["n"])
    >>> o.space.size, o.key, o.listed
    (2, ('n',), False)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...db import Database
from ...settings import Settings
from ...space import Space
from ...tuner import Budget

ON_NEW_KEY = ("tune", "nearest", "enqueue")
CHECK_INPUTS = ("random", "given")
DISTRIBUTED = ("auto", "broadcast", "shared-db", "off")


@dataclass(frozen=True)
class AutotuneOptions:
    configs: tuple[Any, ...] | None  # triton.Config objects (Triton's form)
    space: Space | None  # tensortune's form
    key: tuple[str, ...]
    prune_configs_by: Mapping[str, Any] | None = None
    reset_to_zero: tuple[str, ...] = ()
    restore_value: tuple[str, ...] = ()
    pre_hook: Callable[..., Any] | None = None
    post_hook: Callable[..., Any] | None = None
    do_bench: Callable[..., Any] | None = None
    strategy: Any = "auto"
    budget: Budget | None = None
    reference: Callable[..., Any] | None = None
    bucket: Any = "exact"
    on_new_key: str = "tune"
    recheck_seconds: float = 30.0  # on_new_key="enqueue": how often a waiting key is looked up again
    timer: Any = None
    db: "Database | str | os.PathLike[str] | None" = None
    records: tuple[Path, ...] = ()
    settings: Settings | None = None
    tolerance: "float | Mapping[str, float] | None" = None
    check_inputs: str = "random"
    distributed: str = "auto"
    seed: int = 0
    name: str | None = None
    progress: bool | None = None
    builder: Any = None
    isolate: bool | None = None  # None: isolated on a GPU when the launch can be described
    compile_jobs: int | None = None
    warm_start: bool = True  # a budget-limited search starts from the nearest tuned keys' best
    executor: Any = None  # where candidates are compiled and measured: "local" (None), "ray" or an Executor
    ray_address: str | None = None

    @property
    def listed(self) -> bool:
        return self.configs is not None

    @staticmethod
    def make(configs: Sequence[Any] | None = None, key: Sequence[str] = (), *,
             space: "Space | Mapping[str, Any] | None" = None, budget: Any = None,
             records: "str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None" = None,
             reset_to_zero: Sequence[str] | None = None, restore_value: Sequence[str] | None = None,
             **rest: Any) -> "AutotuneOptions":
        if configs is not None and space is not None:
            raise ValueError("give configs= (a list of triton.Config) or space= (a tensortune space), not both")
        if isinstance(key, str):
            raise TypeError(f"key must be a list of argument names, got the string {key!r}")
        if space is not None and not isinstance(space, Space):
            space = Space(space)
        if configs is not None:
            configs = list(configs)
            bad = [c for c in configs if not (hasattr(c, "kwargs") and hasattr(c, "num_warps"))]
            if bad:
                raise TypeError(f"configs must be triton.Config objects; got {bad[0]!r}")
        elif space is None:
            import triton

            configs = [triton.Config({}, num_warps=4, num_stages=3)]  # as triton.autotune does
        for name, value, allowed in (("on_new_key", rest.get("on_new_key", "tune"), ON_NEW_KEY),
                                     ("check_inputs", rest.get("check_inputs", "random"), CHECK_INPUTS),
                                     ("distributed", rest.get("distributed", "auto"), DISTRIBUTED)):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")
        recheck = rest.get("recheck_seconds", 30.0)
        if isinstance(recheck, bool) or not isinstance(recheck, (int, float)) or not 0 <= recheck < float("inf"):
            raise ValueError(f"recheck_seconds must be a number of seconds (0 or more), got {recheck!r}")
        executor = rest.get("executor")
        if isinstance(executor, str) and executor not in ("local", "ray"):
            raise ValueError(f"executor must be 'local', 'ray' or an Executor object; got {executor!r}")
        if rest.get("ray_address") is not None and executor != "ray":
            raise ValueError("ray_address= needs executor='ray'")
        if executor not in (None, "local") and rest.get("isolate") is False:
            raise ValueError("isolate=False cannot measure on a Ray cluster: candidates run in isolated workers "
                             "on its nodes")
        if isinstance(records, (str, os.PathLike)):
            records = [records]
        return AutotuneOptions(
            configs=tuple(configs) if configs is not None else None, space=space, key=tuple(key),
            reset_to_zero=tuple(reset_to_zero or ()), restore_value=tuple(restore_value or ()),
            budget=Budget.of(budget) if budget is not None else None,
            records=tuple(Path(r) for r in (records or ())), **rest)
