"""Every search strategy: exact budgets, reproducibility, failures, tiny and huge spaces."""

import math
import os

import pytest

from tensortune.db import Target, Workload
from tensortune.measure import ErrorKind, MeasureResult
from tensortune.search import create_strategy, strategy_names
from tensortune.search.auto import AutoSearch
from tensortune.space import Config, IntRange, Space
from tensortune.tuner import Tuner

STRATEGIES = [
    ("exhaustive", {}), ("random", {}), ("annealing", {}), ("annealing", {"energy": "model"}),
    ("genetic", {}), ("evolutionary", {}), ("evolutionary", {"explore_switches": False}),
    ("evolutionary", {"tpe_share": 0.5}), ("model_based", {}), ("local", {}), ("auto", {}),
    ("bandit", {}), ("tpe", {}),
    ("tpe", {"multivariate": False}), ("tpe", {"learn_invalid": False}), ("screened_tpe", {}),
    ("screened_tpe", {"corner_bests": False}),
]
IDS = [name + ("-" + "-".join(f"{v}" for v in opts.values()) if opts else "") for name, opts in STRATEGIES]


class FunctionRunner:
    """Answers each configuration with fn(config): a time, or None for a runtime error."""

    def __init__(self, fn):
        self.fn = fn

    def run(self, builds):
        for b in builds:
            t = self.fn(b.config)
            yield MeasureResult(b.config, (t,)) if t is not None else \
                MeasureResult.failed(b.config, ErrorKind.RUNTIME_ERROR, "fails here")


def bowl_space():
    return Space({"x": list(range(24)), "y": list(range(24)), "mode": ["a", "b", "c"]},
                 constraints=["x + y <= 40"])


def bowl(cfg):
    if cfg["x"] > 19 and cfg["mode"] != "a":
        return None  # an invalid region the space does not know about
    return 1.0 + ((cfg["x"] - 17) ** 2 + (cfg["y"] - 6) ** 2) / 20 + {"a": 0.3, "b": 0.0, "c": 0.6}[cfg["mode"]]


BOWL_OPTIMUM = 1.0


def tune(name, space, fn, budget, seed=0, batch=1, options=None):
    return Tuner(space, FunctionRunner(fn), workload=Workload.make("test"), target=Target.make("cpu", "x"),
                 db=None, strategy=name, strategy_options=options, budget=budget, seed=seed,
                 batch_size=batch, progress=False).run()


def test_every_strategy_is_registered():
    assert {name for name, _ in STRATEGIES} <= set(strategy_names())
    with pytest.raises(ValueError, match="unknown strategy"):
        create_strategy("nope", bowl_space())


@pytest.mark.parametrize("name, options", STRATEGIES, ids=IDS)
@pytest.mark.parametrize("batch", [1, 6])
def test_budget_is_exact_and_configs_are_unique_and_valid(name, options, batch):
    space = bowl_space()
    result = tune(name, space, bowl, budget=37, batch=batch, options=options)
    configs = [r.config for r in result.history]
    assert result.trials == len(configs) == 37
    assert len(set(configs)) == 37
    assert all(space.is_valid(c) for c in configs)


@pytest.mark.parametrize("name, options", STRATEGIES, ids=IDS)
def test_same_seed_same_run(name, options):
    runs = [tuple(r.config for r in tune(name, bowl_space(), bowl, 30, seed=s, options=options).history)
            for s in (3, 3, 4)]
    assert runs[0] == runs[1]
    if name != "exhaustive":
        assert runs[0] != runs[2]


@pytest.mark.parametrize("name, options", STRATEGIES, ids=IDS)
def test_finds_good_points_and_survives_failures(name, options):
    result = tune(name, bowl_space(), bowl, budget=80, seed=1, options=options)
    assert result.failures > 0 or name == "exhaustive"
    assert result.best is not None
    if name in ("evolutionary", "model_based", "auto", "annealing", "local", "genetic", "bandit", "tpe",
                "screened_tpe"):
        assert result.best_time <= 1.5 * BOWL_OPTIMUM, result.best.config


@pytest.mark.parametrize("name, options", STRATEGIES, ids=IDS)
def test_everything_failing(name, options):
    result = tune(name, bowl_space(), lambda cfg: None, budget=25, options=options)
    assert result.trials == 25 and result.best is None and result.failures == 25


@pytest.mark.parametrize("name, options", STRATEGIES, ids=IDS)
def test_almost_everything_failing(name, options):
    def fn(cfg):
        return 1.0 + cfg["y"] if cfg["x"] in (3, 4, 5) and cfg["y"] < 12 else None  # 7% succeed

    result = tune(name, bowl_space(), fn, budget=60, seed=0, options=options)
    assert result.trials == 60 and result.failures > 0
    assert result.best is not None or name == "exhaustive"


@pytest.mark.parametrize("name, options", STRATEGIES, ids=IDS)
def test_space_smaller_than_budget(name, options):
    space = Space({"a": [1, 2, 3], "b": ["x", "y"]}, constraints=["not (a == 3 and b == 'y')"])
    result = tune(name, space, lambda cfg: float(cfg["a"]), budget=20, options=options)
    assert result.trials == 5
    assert result.best_time == 1.0
    strategy = create_strategy(name, space, seed=0, budget=20, **options)
    seen = []
    while batch := strategy.ask(2):
        strategy.tell([MeasureResult(c, (1.0,)) for c in batch])
        seen += batch
    assert sorted(map(Config.to_json, seen)) == sorted(map(Config.to_json, space))


@pytest.mark.parametrize("name, options", [s for s in STRATEGIES if s[0] != "exhaustive"],
                         ids=[i for i in IDS if i != "exhaustive"])
def test_space_far_too_large_to_enumerate(name, options):
    params = {f"p{i}": [1, 2, 4, 8, 16, 32, 64, 128] for i in range(30)}  # 8^30 points
    space = Space(params, constraints=["p0 * p1 <= 256", "p2 != p3"])

    def fn(cfg):
        return None if cfg["p4"] == 128 else 1.0 + sum(abs(math.log2(cfg[f"p{i}"]) - 3) for i in range(6))

    result = tune(name, space, fn, budget=30, options=options)
    assert result.trials == 30 and len({r.config for r in result.history}) == 30
    assert all(space.is_valid(r.config) for r in result.history)


@pytest.mark.parametrize("name, options", [s for s in STRATEGIES if s[0] != "exhaustive"],
                         ids=[i for i in IDS if i != "exhaustive"])
def test_a_parameter_with_ten_million_values(name, options):
    space = Space([IntRange("n", 1, 10**7), IntRange("unroll", 1, 16)])
    result = tune(name, space, lambda cfg: 1.0 + abs(cfg["n"] - 4096) / 1e6 + cfg["unroll"] % 3,
                  budget=24, options=options)
    assert result.trials == 24 and result.best is not None


@pytest.mark.parametrize("name, options", STRATEGIES, ids=IDS)
def test_told_results_are_never_proposed_again(name, options):
    space = bowl_space()
    strategy = create_strategy(name, space, seed=0, budget=30, **options)
    earlier = space.sample(20, seed=5)
    strategy.tell([MeasureResult(c, (bowl(c) or 1.0,)) for c in earlier])
    # results of configurations outside the space (an old record) are ignored, not fatal
    strategy.tell([MeasureResult(Config(x=99, y=0, mode="a"), (1.0,))])
    new = strategy.ask(30)
    assert len(new) == 30 and not set(new) & set(earlier)


def test_auto_is_exhaustive_when_the_budget_covers_the_space():
    small = Space({"a": [1, 2, 3]})
    assert type(create_strategy("auto", small, budget=10).inner).__name__ == "ExhaustiveSearch"
    assert type(create_strategy("auto", bowl_space(), budget=10).inner).__name__ != "ExhaustiveSearch"


def test_auto_runs_screened_tpe_from_100_measurements_and_evolutionary_below():
    space = Space({"x": list(range(40)), "y": list(range(40))})
    chosen = {b: type(create_strategy("auto", space, budget=b).inner).__name__ for b in (None, 99, 100, 400)}
    assert chosen == {None: "EvolutionarySearch", 99: "EvolutionarySearch", 100: "ScreenedTPESearch",
                      400: "ScreenedTPESearch"}
    assert create_strategy("auto", space, budget=100, keep=0.25).inner.keep == 0.25  # options go to the choice
    with pytest.raises(TypeError, match=r"screened_tpe .*\['tpe_share'\]; pass strategy='evolutionary'"):
        create_strategy("auto", space, budget=100, tpe_share=0.5)  # an option of the strategy not chosen
    with pytest.raises(TypeError, match=r"\['bogus'\]: none of the strategies"):
        AutoSearch(space, budget=100, bogus=1)  # an option no candidate takes
    with pytest.raises(TypeError, match=r"'auto' does not take the option\(s\) \['bogus'\]"):
        create_strategy("auto", Space({"a": [1, 2]}), budget=10, bogus=1)  # even when exhaustive
    assert type(create_strategy("auto", Space({"a": [1, 2]}), budget=10, keep=0.2).inner).__name__ == \
        "ExhaustiveSearch"  # measuring everything, options cannot matter

    def run(name):
        s = create_strategy(name, space, seed=4, budget=100)
        for _ in range(30):
            s.tell([MeasureResult(c, (1.0 + abs(c["x"] - 30) + abs(c["y"] - 7),)) for c in s.ask(2)])
        return [r.config for r in s.history]
    assert run("auto") == run("screened_tpe")


@pytest.mark.parametrize("name", ["random", "evolutionary", "screened_tpe", "genetic", "bandit"])
def test_an_unknown_option_names_the_strategy_and_its_options(name):
    with pytest.raises(TypeError, match=rf"strategy '{name}' does not take the option\(s\) \['bogus_opt'\]; "
                                        r"its options are \['"):
        create_strategy(name, bowl_space(), budget=30, bogus_opt=1)


def test_bandit_arms_share_one_history_and_never_propose_twice():
    space = bowl_space()
    bandit = create_strategy("bandit", space, seed=2, budget=60)
    while len(bandit.history) < 60:
        bandit.tell([MeasureResult(c, (bowl(c) or 1.0,)) for c in bandit.ask(4)])
    assert sum(bandit.uses.values()) == 60 and all(bandit.uses.values())
    for arm in bandit.arms.values():
        # every arm was told all 60 results, whoever proposed them
        assert len(arm.history) == 60 and len(arm.measured) == 60


def test_bandit_gives_the_measurements_to_the_arm_that_keeps_improving():
    space = Space({"a": list(range(400))})
    # exhaustive walks a = 0, 1, 2, ... from the slow end: once random search has drawn any
    # larger a, none of exhaustive's points is a new best, while random's often are
    bandit = create_strategy("bandit", space, seed=0, budget=100, arms=("exhaustive", "random"))
    for _ in range(100):
        bandit.tell([MeasureResult(c, (1000.0 - c["a"],)) for c in bandit.ask(1)])
    assert bandit.uses["random"] > 2 * bandit.uses["exhaustive"], bandit.uses
    assert bandit.uses["exhaustive"] >= 2  # the exploration bonus still tries it now and then


def test_bandit_hands_the_turn_of_an_arm_that_finds_nothing_to_another(monkeypatch):
    from tensortune.search import base

    class NeverFindsAnything(base.SearchStrategy):
        def ask(self, n):
            return []

    monkeypatch.setitem(base._REGISTRY, "test_never_finds_anything", NeverFindsAnything)
    space = Space({"a": list(range(12))})
    result = tune("bandit", space, lambda cfg: 1.0 + cfg["a"], budget=12,
                  options={"arms": ("test_never_finds_anything", "random")})
    assert result.trials == 12 and result.best_time == 1.0


@pytest.fixture
def registry(monkeypatch):
    """The strategy registry, restored after the test."""
    from tensortune.search import base

    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))
    monkeypatch.setattr(base, "_BOUND_OPTIONS", dict(base._BOUND_OPTIONS))
    return base


def test_a_name_registered_with_options_creates_the_strategy_with_them(registry):
    registry.register_strategy("two_searches", "bandit", arms=("screened_tpe", "evolutionary"), window=7)
    space = Space({"a": list(range(30))})
    made = create_strategy("two_searches", space, seed=0, budget=10)
    assert list(made.arms) == ["screened_tpe", "evolutionary"] and made.outcomes["evolutionary"].maxlen == 7
    assert create_strategy("two_searches", space, seed=0, window=3).outcomes["evolutionary"].maxlen == 3  # creation overrides
    registry.register_strategy("two_searches_wide", "two_searches", exploration=0.5)  # options carry over
    wide = create_strategy("two_searches_wide", space, seed=0)
    assert list(wide.arms) == ["screened_tpe", "evolutionary"] and wide.exploration == 0.5
    result = tune("two_searches", space, lambda cfg: 1.0 + abs(cfg["a"] - 17), budget=30)
    assert result.trials == 30 and result.best_time == 1.0


def test_registering_a_strategy_wrongly_is_an_error_that_says_how(registry):
    import functools

    from tensortune.search.bandit import BanditSearch

    with pytest.raises(TypeError, match="does not take the option.*'arm'"):
        registry.register_strategy("typo", BanditSearch, arm=("local",))
    with pytest.raises(TypeError, match="does not take the option.*'arm'"):
        registry.register_strategy("typo", "bandit", arm=("local",))
    with pytest.raises(TypeError, match=r"register_strategy\(name, target, \*\*options\)"):
        registry.register_strategy("partial", functools.partial(BanditSearch, arms=("local",)))
    with pytest.raises(ValueError, match="'psychic' is neither a registered strategy"):
        registry.register_strategy("psychic_too", "psychic")
    assert "typo" not in strategy_names() and "partial" not in strategy_names()


@pytest.mark.parametrize("options, error", [
    ({"arms": ()}, "at least one arm"),
    ({"arms": ("local", "local")}, "distinct"),
    ({"arms": ("local", "psychic")}, "unknown strategy 'psychic'"),
    ({"arm_options": {"genetic": {}}, "arms": ("local",)}, "not arms"),
    ({"window": 0}, "window"),
    ({"exploration": -0.1}, "exploration"),
])
def test_bandit_names_bad_options(options, error):
    with pytest.raises(ValueError, match=error):
        create_strategy("bandit", bowl_space(), **options)


def test_bandit_hands_a_prior_to_its_model_guided_arms():
    from tensortune.model.xgb_rank import XGBRankModel

    bandit = create_strategy("bandit", bowl_space(), seed=0, budget=30)
    assert bandit.accepts_prior
    assert bandit.use_prior(XGBRankModel(seed=0))
    assert bandit.arms["evolutionary"].random_start == 0
    assert not create_strategy("bandit", bowl_space(), arms=("random", "local")).accepts_prior


def test_annealing_rejects_an_unknown_energy():
    with pytest.raises(ValueError, match="energy"):
        create_strategy("annealing", bowl_space(), energy="psychic")


@pytest.mark.parametrize("name", ["auto", "random"])
def test_replay_of_a_real_space(shared_datasets, name):
    from tensortune.bench.replay import replay_run

    path = os.path.join(shared_datasets, "kernel_tuner", "convolution-RTX_3090.json.gz")
    runs = [replay_run(path, name, 40, seed) for seed in (0, 1)]
    for run in runs:
        assert run.trials == 40 and 0 < run.score <= 1 and run.simulated_seconds > 0
    assert sum(r.failures for r in runs) > 0  # this space fails often; failures count as trials
    if name == "auto":
        assert min(r.score for r in runs) > 0.85


def test_mutate_many_uses_a_subclass_mutate():
    """A PointOps subclass that only redefines `mutate` is not bypassed by the vectorized path."""
    import numpy as np

    from tensortune.search.points import PointOps

    class OnlyUp(PointOps):
        def mutate(self, point, genes=1):
            return tuple(min(i + 1, n - 1) for i, n in zip(point, self.sizes))

    ops = OnlyUp(Space({"a": list(range(5)), "b": list(range(5))}), np.random.default_rng(0))
    assert ops.mutate_many([(0, 0), (3, 4)]) == [(1, 1), (4, 4)]


def _rejected(config):
    return MeasureResult.failed(config, ErrorKind.OUT_OF_RESOURCES, "too much shared memory",
                                extra={"stage": "build"})


def test_rejections_train_the_failure_classifier_not_the_ranking():
    from tensortune.search.evolutionary import EvolutionarySearch

    # bigger is faster, up to a boundary past which the builder rejects the point
    space = Space({"x": list(range(16)), "y": list(range(16))})
    s = EvolutionarySearch(space, seed=0, budget=60)
    for _ in range(4):
        batch = s.ask(8)
        s.tell([_rejected(c) if c["x"] + c["y"] > 20 else MeasureResult(c, (1.0 / (1 + c["x"] + c["y"]),))
                for c in batch])
    ran = sum(1 for p in s.measured if p not in s.rejected)
    assert s.rejected and ran >= 2
    s.refit()
    assert s.model.trained_rows == ran and s.failures.fitted
    inside = [s.ops.point(Config(x=8, y=6)), s.ops.point(Config(x=6, y=8))]
    beyond = [s.ops.point(Config(x=15, y=15)), s.ops.point(Config(x=14, y=15))]
    scores = s.acquisition(inside + beyond)
    assert scores[:2].min() > scores[2:].max()  # predicted rejections rank last


def test_failures_that_ran_still_rank_last_in_the_model():
    from tensortune.search.evolutionary import EvolutionarySearch

    space = Space({"x": list(range(16)), "y": list(range(16))})
    s = EvolutionarySearch(space, seed=0, budget=60)
    for _ in range(4):
        batch = s.ask(8)
        s.tell([MeasureResult.failed(c, ErrorKind.RUNTIME_ERROR, "crash") if c["x"] > 12
                else MeasureResult(c, (1.0 + c["x"],)) for c in batch])
    s.refit()
    assert not s.rejected and s.model.trained_rows == len(s.measured)


def _switch_space():
    """Two switches (padding only with shared memory) and a block size."""
    return Space({"shmem": [0, 1], "pad": [0, 1], "x": list(range(32))}, constraints=["pad <= shmem"])


def test_a_stalled_search_explores_each_switch_combination_least_measured_first():
    from tensortune.search.evolutionary import EvolutionarySearch

    s = EvolutionarySearch(_switch_space(), seed=0, budget=100)  # on by default
    assert [s.space.params[k].name for k in s.switches] == ["shmem", "pad"]
    # 30 measurements with shared memory and padding, the first the best: stalled
    told = [Config(shmem=1, pad=1, x=x) for x in range(30)]
    s.tell([MeasureResult(c, (1.0 + 0.01 * c["x"],)) for c in told])
    assert s.stalled()
    asked = s.ask(3)
    # the two unmeasured valid combinations come first; (shmem 0, pad 1) is invalid
    assert {(c["shmem"], c["pad"]) for c in asked[:2]} == {(0, 0), (1, 0)}
    assert all(s.space.is_valid(c) and c not in told for c in asked)


def test_per_switch_exploring_finds_an_optimum_behind_a_slow_switch():
    # without shared memory the typical block is several times slower, but x = 5 there is the fastest
    def cost(c):
        if c["shmem"] == 0:
            return 0.5 + 0.3 * abs(c["x"] - 5)
        return 1.0 + 0.02 * abs(c["x"] - 20) + 0.1 * c["pad"]

    found = [tune("auto", _switch_space(), cost, budget=40, seed=seed).best_time for seed in range(5)]
    assert found == [0.5] * 5


def test_per_switch_exploring_finds_what_the_old_stall_rule_misses():
    # a wider block range: without shared memory the optimum (x = 5) is far from where the
    # typical configuration with shared memory is fastest (x = 40)
    space = Space({"shmem": [0, 1], "pad": [0, 1], "x": list(range(64))}, constraints=["pad <= shmem"])

    def cost(c):
        if c["shmem"] == 0:
            return 0.5 + 0.3 * abs(c["x"] - 5)
        return 1.0 + 0.02 * abs(c["x"] - 40) + 0.1 * c["pad"]

    def hits(explore_switches):
        return sum(tune("auto", space, cost, budget=40, seed=seed,
                        options={"explore_switches": explore_switches}).best_time == 0.5 for seed in range(10))

    assert hits(True) >= 6 and hits(False) <= 2


def test_per_switch_exploring_is_off_with_too_many_switches():
    from tensortune.search.evolutionary import EvolutionarySearch

    space = Space({f"flag{i}": [0, 1] for i in range(7)} | {"x": list(range(8))})
    assert EvolutionarySearch(space, seed=0, budget=50, explore_switches=True).switches == []
