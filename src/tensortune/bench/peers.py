"""Peer tuners replayed on the same measured spaces, so a comparison is one run, side by side.

Peers are named like strategies and run wherever a strategy name is accepted by
`tensortune bench strategies`:

- `kt:<strategy>`: Kernel Tuner 1.5 (`pip install kernel-tuner==1.5.0`, or the `peers`
  extra) running its strategy (`genetic_algorithm`, `pso`, `bayes_opt`, ...) in simulation
  mode on the cache file itself, with the space restricted to the configurations the
  cache holds and `max_fevals` as the budget (distinct configurations; recorded failures
  count, as in our runs);
- `optuna:tpe`: Optuna's TPE sampler (`pip install optuna==5.0.0`) in an ask/tell loop
  over the same parameters, one categorical distribution each. A configuration the space
  does not hold, or a failed one, is told a penalty time of 1e9; a repeat is told its
  recorded value again and costs nothing; only distinct configurations of the space count
  against the budget. A run that has asked 50 times its budget stops there.

A peer's run is scored like ours: t_opt / the best time among the configurations it
measured, and its simulated time is the same sum of recorded compile and benchmark times.

Example:
    >>> run = peer_run("../shared/datasets/kernel_tuner/pnpoly-RTX_3090.json.gz", "kt:random_sample", 20, seed=0)
    >>> run.trials, 0 < run.score <= 1
    (20, True)
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import tempfile
import time
import warnings
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..datasets import ReplayDataset
from ..space import Config

if TYPE_CHECKING:
    from .replay import RunResult

PREFIXES = ("kt:", "optuna:")
OPTUNA_SAMPLERS = ("tpe",)
PENALTY = 1e9  # what the Optuna loop tells for a failed or out-of-space configuration
MAX_ASKS_PER_BUDGET = 50


def is_peer(name: str) -> bool:
    return name.startswith(PREFIXES)


def check_peer(name: str) -> None:
    """Raise ValueError naming the problem if `name` is not a peer that can run here."""
    if name.startswith("optuna:"):
        sampler = name.partition(":")[2]
        if sampler not in OPTUNA_SAMPLERS:
            raise ValueError(f"unknown Optuna sampler {sampler!r} in {name!r}; known: {', '.join(OPTUNA_SAMPLERS)}")
        _require("optuna", "optuna==5.0.0")
        return
    if not name.startswith("kt:"):
        raise ValueError(f"{name!r} is not a peer (names start with {' or '.join(PREFIXES)})")
    _require("kernel_tuner", "kernel-tuner==1.5.0")
    from kernel_tuner.interface import strategy_map

    strategy = name.partition(":")[2]
    if strategy not in strategy_map:
        raise ValueError(f"unknown Kernel Tuner strategy {strategy!r}; known: {', '.join(sorted(strategy_map))}")


def _require(module: str, requirement: str) -> None:
    try:
        __import__(module)
    except ImportError:
        raise ValueError(f"this peer needs {module}: pip install {requirement!r} "
                         "(or the peers extra: pip install -e '.[peers]')") from None


def peer_run(path: str | os.PathLike[str], name: str, budget: int, seed: int) -> "RunResult":
    """One fresh run of peer `name` on a replayed dataset, scored like our strategies."""
    from .replay import RunResult, cached_dataset

    check_peer(name)
    ds = cached_dataset(str(path))
    start = time.perf_counter()
    if name.startswith("kt:"):
        measured = _kernel_tuner_configs(str(path), name.partition(":")[2], budget, seed)
    else:
        measured = _optuna_tpe_configs(ds, budget, seed)
    wall = time.perf_counter() - start
    runner = ds.runner()
    results = list(runner.run_configs(measured))
    ok = [r.time for r in results if r.ok]
    return RunResult(ds.name, name, budget, seed, ds.score(min(ok)) if ok else 0.0, len(results),
                     sum(1 for r in results if not r.ok), runner.simulated_seconds, wall)


# ---- Kernel Tuner ----------------------------------------------------------------------------
def peers_cache_dir() -> Path:
    """This user's folder for plain copies of caches (not a shared, predictable path in
    the temporary directory, where another user could plant a file under the name)."""
    return Path.home() / ".cache" / "tensortune" / "peers"


@lru_cache(maxsize=8)
def _plain_cache(path: str) -> tuple[str, dict[str, Any]]:
    """Kernel Tuner reads only uncompressed caches: a plain copy, and the cache's header.

    The copy is named by the content's hash in one folder of this user's cache, so every
    worker process and every later run shares it (nothing to clean up per process, which
    worker processes could not do: they exit without running exit handlers); a copy whose
    content does not match its name is written again."""
    from ..datasets.kernel_tuner import _read_json

    data = _read_json(Path(path))
    text = json.dumps(data)
    folder = peers_cache_dir()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    digest = hashlib.sha256(text.encode()).hexdigest()
    copy = folder / f"{digest[:20]}.json"
    if not copy.is_file() or hashlib.sha256(copy.read_bytes()).hexdigest() != digest:
        fd, partial = tempfile.mkstemp(suffix=".part", dir=folder)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(partial, copy)  # atomic: a concurrent worker sees the whole file or none
    header = {k: data[k] for k in ("kernel_name", "tune_params_keys", "tune_params")}
    header["problem_size"] = data.get("problem_size") or [1]
    header["keys"] = frozenset(data["cache"])
    return str(copy), header


def _kernel_tuner_configs(path: str, strategy: str, budget: int, seed: int) -> list[Config]:
    import kernel_tuner

    copy, header = _plain_cache(path)
    names, keys = header["tune_params_keys"], header["keys"]

    def in_cache(params: dict[str, Any]) -> bool:
        return ",".join(str(params[k]) for k in names) in keys

    random.seed(seed)
    np.random.seed(seed % 2**32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results, _ = kernel_tuner.tune_kernel(
            header["kernel_name"], "", header["problem_size"], [], header["tune_params"],
            restrictions=in_cache, cache=copy, simulation_mode=True, strategy=strategy,
            strategy_options={"max_fevals": budget}, verbose=False, quiet=True)
    return list(dict.fromkeys(Config({k: r[k] for k in names}) for r in results))  # distinct, in order


# ---- Optuna --------------------------------------------------------------------------------
def _optuna_tpe_configs(ds: ReplayDataset, budget: int, seed: int) -> list[Config]:
    import optuna
    from optuna.distributions import CategoricalDistribution

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    fixed = {p.name: p.values[0] for p in ds.space.params if len(p.values) == 1}
    distributions = {p.name: CategoricalDistribution(list(p.values)) for p in ds.space.params if len(p.values) > 1}
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=seed))
    measured: dict[Config, None] = {}
    for _ in range(MAX_ASKS_PER_BUDGET * budget):
        if len(measured) >= budget:
            break
        trial = study.ask(distributions)
        config = Config({**fixed, **trial.params})
        result = ds.results.get(config)
        if result is not None:
            measured[config] = None
        study.tell(trial, result.time if result is not None and result.ok else PENALTY)
    return list(measured)

