"""The TPE strategy's Parzen densities: what they draw is what they score."""

import itertools

import numpy as np
import pytest

from tensortune.measure import MeasureResult
from tensortune.search import create_strategy
from tensortune.search.tpe import IndependentParzen, JointParzen
from tensortune.space import Space

SIZES = [3, 2, 4]
POINTS = np.asarray([[0, 1, 3], [2, 0, 3], [0, 1, 1]])
WEIGHTS = np.asarray([1.0, 0.5, 2.0])


@pytest.mark.parametrize("density", [IndependentParzen, JointParzen])
def test_a_density_sums_to_one_and_draws_as_it_scores(density):
    parzen = density(POINTS, WEIGHTS, SIZES, 1.0)
    grid = np.asarray(list(itertools.product(*map(range, SIZES))))
    pdf = np.exp(parzen.log_pdf(grid))
    assert pdf.sum() == pytest.approx(1.0)
    draws = parzen.sample(200_000, np.random.default_rng(0))
    index = {tuple(p): i for i, p in enumerate(grid.tolist())}
    freq = np.bincount([index[tuple(p)] for p in draws.tolist()], minlength=len(grid)) / len(draws)
    assert np.abs(freq - pdf).max() < 0.005
    assert pdf[index[(0, 1, 1)]] == pdf.max()  # the heaviest point


def test_joint_keeps_observed_combinations_that_independent_splits():
    # two points that differ in both parameters: the joint density favours them over the
    # two "crossed" combinations, the independent one cannot tell them apart
    points, weights, sizes = np.asarray([[0, 0], [1, 1]]), np.ones(2), [2, 2]
    grid = np.asarray([[0, 0], [1, 1], [0, 1], [1, 0]])
    joint = JointParzen(points, weights, sizes, 1.0).log_pdf(grid)
    independent = IndependentParzen(points, weights, sizes, 1.0).log_pdf(grid)
    assert joint[0] > joint[2] and joint[1] > joint[3]
    assert independent[0] == pytest.approx(independent[2])


def test_an_empty_density_is_the_prior():
    for density in (IndependentParzen, JointParzen):
        parzen = density(np.zeros((0, 2), dtype=np.int64), np.zeros(0), [4, 5], 1.0)
        assert np.exp(parzen.log_pdf(np.asarray([[1, 2], [3, 4]]))) == pytest.approx([1 / 20, 1 / 20])
        assert parzen.sample(50, np.random.default_rng(0)).max(axis=0).tolist() <= [3, 4]


@pytest.mark.parametrize("multivariate, learn_invalid", [(True, True), (True, False), (False, True)])
def test_tpe_proposes_only_valid_unseen_points_in_a_sparse_space(multivariate, learn_invalid):
    # 1 in 8 of the product is valid: draws from l are mostly invalid and are redrawn
    space = Space({"a": list(range(16)), "b": list(range(16))}, constraints=["(a + b) % 8 == 0"])
    tpe = create_strategy("tpe", space, seed=0, budget=30, multivariate=multivariate, learn_invalid=learn_invalid)
    seen = []
    while len(seen) < 30:
        batch = tpe.ask(3)
        assert batch
        tpe.tell([MeasureResult(c, (1.0 + abs(c["a"] - 9),)) for c in batch])
        seen += batch
    assert all(space.is_valid(c) for c in seen) and len(set(seen)) == len(seen)
    assert min(abs(c["a"] - 9) for c in seen) <= 1


def test_invalid_choices_are_learned_as_failures_in_the_order_they_were_made():
    # the valid half of the space is a < 8; the fastest points lie at its edge, so l's best
    # draws keep falling across it until g has learned the invalid side
    space = Space({"a": list(range(16)), "b": list(range(4))}, constraints=["a < 8"])
    tpe = create_strategy("tpe", space, seed=1, budget=24)
    while len(tpe.measured) < 24:
        tpe.tell([MeasureResult(c, (1.0 + 8 - c["a"] + c["b"],)) for c in tpe.ask(1)])
    penalties = [(before, p) for before, p, time in tpe.proposer.learned]
    assert all(time == float("inf") for *_, time in tpe.proposer.learned)  # no repeats unless asked
    assert penalties and all(p[0] >= 8 for _, p in penalties)
    assert [before for before, _ in penalties] == sorted(before for before, _ in penalties)
    points, times = tpe.proposer.history(tpe)
    assert len(points) == len(tpe.measured) + len(penalties)
    before, first = penalties[0]
    assert points[before] == first and times[before] == float("inf")  # after `before` measurements
    assert points[:before] == list(tpe.measured)[:before]
    off = create_strategy("tpe", space, seed=1, budget=24, learn_invalid=False)
    while len(off.measured) < 24:
        off.tell([MeasureResult(c, (1.0 + 8 - c["a"] + c["b"],)) for c in off.ask(1)])
    assert not off.proposer.learned


@pytest.mark.parametrize("strategy", ["tpe", "screened_tpe"])
def test_repeated_choices_are_told_again_with_their_measured_time(strategy):
    # a narrow valley: l's best draw is often a point measured already, as in Optuna's loop
    space = Space({"a": list(range(10)), "b": list(range(10))})
    tpe = create_strategy(strategy, space, seed=0, budget=40, learn_repeats=True)
    order = []
    while len(tpe.measured) < 40:
        batch = tpe.ask(1)
        assert batch and all(tpe.ops.point(c) not in tpe.measured for c in batch)
        tpe.tell([MeasureResult(c, (1.0 + abs(c["a"] - 6) + 2 * abs(c["b"] - 2),)) for c in batch])
        order.append(tpe.ops.point(batch[0]))
    repeats = [(before, p, t) for before, p, t in tpe.proposer.learned if t != float("inf")]
    assert len(repeats) >= 5, "measured points were seldom proposed again"
    assert all(tpe.measured[p] == t and order.index(p) < before for before, p, t in repeats)
    points, times = tpe.proposer.history(tpe)
    assert len(points) == len(tpe.measured) + len(tpe.proposer.learned)
    assert min(times) == min(tpe.measured.values())
    plain = create_strategy(strategy, space, seed=0, budget=40)
    while len(plain.measured) < 40:
        plain.tell([MeasureResult(c, (1.0 + abs(c["a"] - 6) + 2 * abs(c["b"] - 2),)) for c in plain.ask(1)])
    assert all(t == float("inf") for *_, t in plain.proposer.learned)


@pytest.mark.parametrize("options, error", [
    ({"gamma": 1.0}, "gamma"), ({"candidates": 0}, "at least 1"), ({"prior_weight": 0.0}, "prior_weight"),
    ({"learn_repeats": True, "learn_invalid": False}, "learn_repeats needs learn_invalid")])
def test_bad_options_are_named(options, error):
    with pytest.raises(ValueError, match=error):
        create_strategy("tpe", Space({"a": [1, 2]}), **options)


def test_a_share_of_evolutionary_plans_comes_from_tpe():
    from tensortune.search.evolutionary import EvolutionarySearch

    space = Space({"a": list(range(12)), "b": list(range(12)), "c": [0, 1]})
    search = EvolutionarySearch(space, seed=0, budget=60, tpe_share=0.5)
    drawn = []
    search.tpe.propose = lambda s, n, exclude=None, _orig=search.tpe.propose: drawn.append(n) or _orig(s, n, exclude)
    while len(search.measured) < 60:
        batch = search.ask(4)
        search.tell([MeasureResult(c, (1.0 + abs(c["a"] - 3) + abs(c["b"] - 8) + c["c"],)) for c in batch])
    assert drawn and max(drawn) <= 4  # half of a plan (at most 8 points), in plans not stalled
    with pytest.raises(ValueError, match="tpe_share"):
        EvolutionarySearch(space, tpe_share=1.5)


def test_the_model_screens_tpe_candidates_before_l_over_g_picks():
    from tensortune.search.screened_tpe import ScreenedTPESearch

    space = Space({"a": list(range(12)), "b": list(range(12))})
    search = ScreenedTPESearch(space, seed=0, budget=40)
    while len(search.measured) < 40:
        search.tell([MeasureResult(c, (1.0 + abs(c["a"] - 3) + abs(c["b"] - 8),)) for c in search.ask(1)])
    assert search.best.time <= 3.0
    pool = [(a, b) for a in range(12) for b in range(0, 12, 3)]
    kept = search.model_screen(pool)
    scores = dict(zip(pool, search.acquisition(pool).tolist()))
    assert len(kept) == len(pool) // 2 and len(set(kept)) == len(kept)
    assert min(scores[p] for p in kept) >= max(scores[p] for p in pool if p not in kept)
    picked = []
    search.proposer.best = lambda pool, good, bad, _orig=search.proposer.best: picked.append(pool) or _orig(pool, good, bad)
    search.proposer.propose(search, 1, screen=search.model_screen)
    assert picked and len(picked[0]) <= 12  # half of at most 24 draws
    with pytest.raises(ValueError, match="keep"):
        ScreenedTPESearch(space, keep=0.0)


def _plateau_and_a_better_corner() -> tuple[Space, dict]:
    # corner (s=0, t=0) has a plateau of nearly equal times that fills the plain good set
    # (4 of 40 points); corner (s=1, t=1) is a little slower but among the fastest quarter;
    # the other two corners are slow everywhere
    space = Space({"x": list(range(10)), "s": [0, 1], "t": [0, 1]})
    times = {}
    for x in range(10):
        times[(x, 0, 0)] = 1.00 + 0.001 * x if x < 4 else 2.0 + x
        times[(x, 1, 1)] = 1.05 + 0.1 * x
        times[(x, 1, 0)] = 5.0 + x
        times[(x, 0, 1)] = 3.0 + x
    return space, times


def _good_corners(search) -> set[tuple[int, int]]:
    return {(int(p[1]), int(p[2])) for p in search.proposer.densities(search)[0].points}


def test_corner_bests_keep_each_switch_corners_best_in_the_good_set():
    from tensortune.search.screened_tpe import ScreenedTPESearch

    space, times = _plateau_and_a_better_corner()
    search = ScreenedTPESearch(space, seed=0)  # the default keeps corners (no budget: no fading)
    plain = ScreenedTPESearch(space, seed=0, corner_bests=False)
    assert search.proposer.corners == [1, 2] and plain.proposer.corners == []
    for s in (search, plain):
        s.tell([MeasureResult(s.ops.config(p), (t,)) for p, t in times.items()])
    good = search.proposer.densities(search)[0].points
    assert _good_corners(search) == {(0, 0), (1, 1)}
    assert [p for p in good.tolist() if p[1:] == [1, 1]] == [[0, 1, 1]]  # that corner's fastest only
    assert _good_corners(plain) == {(0, 0)}
    with pytest.raises(ValueError, match="corner_quantile"):
        ScreenedTPESearch(space, corner_bests=True, corner_quantile=0.0)


def test_corner_bests_fade_over_the_budget():
    from tensortune.search.screened_tpe import ScreenedTPESearch

    space, times = _plateau_and_a_better_corner()
    kept = {}
    for budget in (80, 41, 40):
        search = ScreenedTPESearch(space, seed=0, budget=budget)
        search.tell([MeasureResult(search.ops.config(p), (t,)) for p, t in times.items()])
        kept[budget] = (search.proposer.corner_share(search), _good_corners(search))
    assert kept[80] == (0.125, {(0, 0), (1, 1)})  # half the budget left: half the quarter
    assert kept[41][1] == {(0, 0)} and 0 < kept[41][0] < 0.01  # one measurement left
    assert kept[40] == (0.0, {(0, 0)})  # budget spent: plain TPE
    steady = ScreenedTPESearch(space, seed=0, budget=40, corner_fade=False)
    steady.tell([MeasureResult(steady.ops.config(p), (t,)) for p, t in times.items()])
    assert steady.proposer.corner_share(steady) == 0.25 and _good_corners(steady) == {(0, 0), (1, 1)}


def test_a_space_with_too_many_switches_has_no_corners():
    space = Space({f"s{i}": [0, 1] for i in range(7)} | {"x": [1, 2, 3]})
    assert create_strategy("screened_tpe", space, seed=0, corner_bests=True).proposer.corners == []
    assert len(create_strategy("screened_tpe", Space({f"s{i}": [0, 1] for i in range(6)}), seed=0,
                               corner_bests=True).proposer.corners) == 6


def test_corner_bests_on_a_replayed_space_with_switches(shared_datasets):
    import os

    from tensortune.bench.replay import replay_run

    path = os.path.join(shared_datasets, "kernel_tuner", "convolution_milo-A100.json.gz")
    runs = [replay_run(path, "screened_tpe", 30, seed) for seed in (0, 0, 1)]  # corners kept, fading
    assert all(r.trials == 30 and 0 < r.score <= 1 for r in runs)
    same = ("score", "failures", "simulated_seconds")
    assert [getattr(runs[0], f) for f in same] == [getattr(runs[1], f) for f in same]  # seeded
