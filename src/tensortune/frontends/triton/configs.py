"""Triton configurations as tensortune configurations, and lists of them as spaces.

A tensortune `Config` for a Triton kernel holds the meta-parameters and the launch
options (`num_warps`, `num_stages`, and `num_ctas` / `maxnreg` when not the default),
so records stay meaningful when the list of configurations is edited. A list that is
a full grid becomes a product space (strategies see its structure); any other list
becomes a space restricted to exactly those configurations.

Example:
    >>> import triton
    >>> cs = [triton.Config({"BLOCK": b}, num_warps=w) for b in (32, 64) for w in (4, 8)]
    >>> space, by_config = space_of_triton_configs(cs)
    >>> space.size, sorted(space.names)
    (4, ['BLOCK', 'num_stages', 'num_warps'])
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from ...space import Config, Coupled, Ordinal, Space
from ...space.params import Categorical, Param

LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "ir_override")
PRODUCT_LIMIT = 100_000  # a sparse list over a larger product becomes one coupled parameter


def config_of_triton(tc: Any) -> Config:
    """The tensortune form of a `triton.Config`."""
    values = dict(tc.kwargs)
    values["num_warps"] = tc.num_warps
    values["num_stages"] = tc.num_stages
    if getattr(tc, "num_ctas", 1) not in (None, 1):
        values["num_ctas"] = tc.num_ctas
    if getattr(tc, "maxnreg", None) is not None:
        values["maxnreg"] = tc.maxnreg
    if getattr(tc, "ir_override", None) is not None:
        values["ir_override"] = tc.ir_override
    return Config(values)


def triton_of_config(config: Mapping[str, Any], pre_hook: Any = None) -> Any:
    """A `triton.Config` for a tensortune configuration (for pruning hooks and users)."""
    import triton

    meta = {k: v for k, v in config.items() if k not in LAUNCH_OPTIONS and v is not None}
    opts = {k: config[k] for k in LAUNCH_OPTIONS if k in config and config[k] is not None}
    return triton.Config(meta, pre_hook=pre_hook, **opts)


def launch_kwargs(config: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments that launch the kernel with `config` (None means 'not set')."""
    return {k: v for k, v in config.items() if v is not None}


def space_of_configs(configs: Sequence[Config]) -> Space:
    """A space holding exactly `configs` (deduplicated, order kept)."""
    unique = list(dict.fromkeys(configs))
    if not unique:
        raise ValueError("no configurations to tune over")
    names = list(dict.fromkeys(n for c in unique for n in c))
    rows = [tuple(c.get(n) for n in names) for c in unique]
    choices = {n: list(dict.fromkeys(r[i] for r in rows)) for i, n in enumerate(names)}
    product = 1
    for vals in choices.values():
        product *= len(vals)
    params: list[Param] = [_param(n, vals) for n, vals in choices.items()]
    if product == len(unique):
        return Space(params)
    if product <= PRODUCT_LIMIT:
        allowed = frozenset(rows)
        return Space(params, constraints=[_member_of(names, allowed)])
    return Space([Coupled(names, rows)])


def _param(name: str, values: list[Any]) -> Param:
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    return Ordinal(name, sorted(values)) if numeric else Categorical(name, values)


def _member_of(names: list[str], allowed: frozenset[tuple[Any, ...]]) -> Any:
    def in_the_list(cfg: Mapping[str, Any]) -> bool:
        return tuple(cfg[n] for n in names) in allowed

    in_the_list.__name__ = "one of the listed configurations"
    return in_the_list


def space_of_triton_configs(configs: Sequence[Any]) -> tuple[Space, dict[Config, Any]]:
    """The space of a `triton.Config` list and the original object of each configuration
    (which keeps its `pre_hook`)."""
    plain = [config_of_triton(tc) for tc in configs]
    names = list(dict.fromkeys(n for c in plain for n in c))
    by_config: dict[Config, Any] = {}
    for c, tc in zip(plain, configs):  # a name some configurations lack is None ("not given") in them
        by_config.setdefault(Config({n: c.get(n) for n in names}), tc)
    return space_of_configs(list(by_config)), by_config


def is_grid(space: Space) -> bool:
    return not space.constraints and all(not isinstance(p, Coupled) for p in space.params)


def enumerate_space(space: Space, limit: int = PRODUCT_LIMIT) -> list[Config]:
    """Every configuration of a space, refusing spaces too large to list."""
    if space.size_is_exact and space.size > limit:
        raise ValueError(f"the space has {space.size} configurations, more than {limit} to list; "
                         f"use constraints instead of prune_configs_by")
    return list(itertools.islice(iter(space), limit + 1))
