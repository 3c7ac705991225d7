import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensortune.space import (Boolean, Categorical, Config, Constraint, Coupled, IntRange, Ordinal, PowerOfTwo,
                              Space, SpaceError)


def tiled_space():
    return Space(
        {
            "BLOCK_M": [16, 32, 64, 128],
            "BLOCK_N": [16, 32, 64, 128],
            "BLOCK_K": [16, 32, 64],
            "order": ["ijk", "ikj", "kij"],
            "unroll": Boolean("unroll"),
            "BLOCK_A, BLOCK_B": [(128, 64), (64, 128)],
        },
        constraints=["BLOCK_M * BLOCK_K <= 2048", lambda BLOCK_N, BLOCK_K: BLOCK_N >= BLOCK_K],
    )


def brute_force_size(space):
    import itertools
    count = 0
    for point in itertools.product(*[range(len(p)) for p in space.params]):
        cfg = space.to_config(point)
        if all(c(cfg) for c in space.constraints):
            count += 1
    return count


def test_size_matches_brute_force_and_iteration():
    s = tiled_space()
    assert s.cartesian_size == 4 * 4 * 3 * 3 * 2 * 2
    assert s.size == brute_force_size(s) == len(list(s)) == len(set(s))
    assert s.size_is_exact


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_samples_are_valid_and_encodings_round_trip(seed):
    s = tiled_space()
    for cfg in s.sample(5, seed=seed):
        assert s.is_valid(cfg)
        assert s.decode(s.encode(cfg)) == cfg
        assert Config.from_json(cfg.to_json()) == cfg
        assert hash(Config.from_json(cfg.to_json())) == hash(cfg)
        for nb in s.neighbours(cfg):
            assert s.is_valid(nb) and nb != cfg


@settings(max_examples=30, deadline=None)
@given(values=st.lists(st.integers(1, 64), min_size=2, max_size=6, unique=True),
       limit=st.integers(2, 128))
def test_sampling_respects_random_constraints(values, limit):
    try:
        s = Space({"a": values, "b": values}, constraints=[f"a + b <= {limit}"])
    except SpaceError:
        assert min(values) * 2 > limit  # only empty spaces may be refused
        return
    valid = set(s)
    assert all(c["a"] + c["b"] <= limit for c in valid)
    assert set(s.sample(20, seed=1)) <= valid


def test_sampling_is_uniform_over_valid_configs():
    s = Space({"a": list(range(8)), "b": list(range(8))}, constraints=["a <= b"])
    counts = {}
    for cfg in s.sample(36000, seed=0):
        counts[cfg] = counts.get(cfg, 0) + 1
    assert len(counts) == s.size == 36
    freq = np.array(list(counts.values())) / 36000
    assert np.all(np.abs(freq - 1 / 36) < 0.006)


def test_astronomical_space_with_tight_constraints():
    params = {f"p{i}": list(range(1, 17)) for i in range(10)}  # 16^10 ~ 1.1e12 points
    s = Space(params, constraints=["p0 * p1 <= 4", "p2 + p3 + p4 == 5", "p5 == p6 and p7 > 15"])
    assert s.cartesian_size == 16**10
    samples = s.sample(200, seed=3)
    assert all(s.is_valid(c) for c in samples)
    assert len(set(samples)) > 150
    first = next(iter(s))
    assert s.is_valid(first)


def test_huge_single_group_still_samples_validly():
    s = Space({"x": IntRange("x", 0, 20000), "y": IntRange("y", 0, 20000)}, constraints=["x + y == 20000"])
    assert s.cartesian_size > 4 * 10**8  # one group, too large to enumerate
    samples = s.sample(5, seed=0)
    assert all(cfg["x"] + cfg["y"] == 20000 for cfg in samples)
    assert len({cfg["x"] for cfg in samples}) > 1


def test_table_constraint_is_walked_row_by_row_however_large_the_product():
    params = {f"p{i}": list(range(40)) for i in range(6)}  # 40^6 = 4.1e9 points
    rng = np.random.default_rng(0)
    rows = {tuple(int(v) for v in rng.integers(0, 40, 6)) for _ in range(3000)}
    s = Space(params, constraints=[Constraint.allowed(list(params), rows), "p0 != p1"])
    valid = {r for r in rows if r[0] != r[1]}
    assert s.size_is_exact and s.size == len(valid)
    assert {tuple(c.values()) for c in s} == valid
    samples = s.sample(500, seed=1)
    assert all(tuple(c.values()) in valid for c in samples) and len(set(samples)) > 400
    assert s.is_valid(dict(zip(params, next(iter(valid)))))
    assert not s.is_valid(dict(zip(params, (39,) * 6))) or (39,) * 6 in valid


def test_table_constraint_over_some_parameters_and_a_coupled_one():
    s = Space({"A, B": [(1, 2), (3, 4), (5, 6)], "C": [1, 2, 3], "D": [0, 1]},
              constraints=[Constraint.allowed(["A", "B", "C"], [(1, 2, 3), (5, 6, 1), (7, 8, 1)]), "C + D < 4"])
    assert sorted((c["A"], c["C"], c["D"]) for c in s) == [(1, 3, 0), (5, 1, 0), (5, 1, 1)]  # (7, 8) is no choice
    split = Space({"A, B": [(1, 2), (3, 4)], "C": [1, 2]},  # the table splits A, B: checked as a predicate
                  constraints=[Constraint.allowed(["A", "C"], [(3, 2)])])
    assert [c.as_dict() for c in split] == [{"A": 3, "B": 4, "C": 2}]


@pytest.mark.parametrize("names, rows, message", [
    (["a", "a"], [(1, 1)], "distinct names"),
    (["a", "b"], [(1,)], "has 1 values for the 2 names"),
    (["a"], [([1],)], "cannot be hashed"),
    (["a"], [], "has no rows"),
])
def test_bad_table_constraints_are_named(names, rows, message):
    with pytest.raises(SpaceError, match=message):
        Constraint.allowed(names, rows)


def test_table_with_no_row_in_the_space_is_refused():
    with pytest.raises(SpaceError, match="no valid configuration"):
        Space({"a": [1, 2]}, constraints=[Constraint.allowed(["a"], [(3,)])])


def test_sparse_huge_group_samples_uniformly_by_rejection():
    # 1% of 10^8 points valid, checkable only once every parameter is assigned
    weights = [1, 3, 7, 11, 13, 17, 19, 23]
    rule = " + ".join(f"{w} * p{i}" for i, w in enumerate(weights))
    s = Space({f"p{i}": list(range(10)) for i in range(8)}, constraints=[f"({rule}) % 97 == 7"])
    assert not s.size_is_exact and abs(s.size - 10**8 / 97) < 10**8 / 97 * 0.2
    samples = s.sample(300, seed=0)
    assert all(sum(w * v for w, v in zip(weights, c.values())) % 97 == 7 for c in samples)
    assert len(set(samples)) == 300


def test_parameter_kinds():
    assert PowerOfTwo("b", 10, 300).values == (16, 32, 64, 128, 256)
    assert Ordinal("o", [1, 2, 3]).neighbour_indices(0) == [1]
    assert Categorical("c", ["a", "b", "c"]).neighbour_indices(1) == [0, 2]
    assert list(IntRange("r", 2, 10, 4).values) == [2, 6, 10]
    c = Coupled("A, B", [(1, 2), (3, 4)])
    assert c.assignment(1) == {"A": 3, "B": 4}


@pytest.mark.parametrize(
    "params, constraints, message",
    [
        ({"a": [1, 2]}, ["b > 1"], "unknown parameter(s) ['b']"),
        ({"a": []}, [], "has no values"),
        ({"a": [1, 2]}, ["a > 5"], "no valid configuration"),
        ({"a": [1, 2], "b": [1]}, ["a + b > 10"], "'a + b > 10'"),
        ({"a": [1, 2]}, ["a >"], "not a valid Python expression"),
        ({"a": [1, 2]}, [lambda zzz, a: True], "unknown parameter(s) ['zzz']"),
        ({"A, B": [(1,)]}, [], "has 1 entries for 2 names"),
        ({"1x": [1]}, [], "not a valid identifier"),
        ({"class": [1, 2]}, [], "'class' is a Python keyword"),
        ({"x, if": [(1, 2)]}, [], "'if' is a Python keyword"),
        ({"a": 5}, [], "values must be a list of choices, got 5"),
        ({"a": None}, [], "values must be a list of choices, got None"),
        ({"order": "ijk"}, [], "values must be a list of choices, got 'ijk'"),
        ({1: [1, 2]}, [], "parameter name 1 is not a string"),
        ({"A, B": [1, 2]}, [], "value 1 is not a tuple"),
        ({"a": [1, 2]}, ["False"], "['False'] reject every"),
        ({"a": [frozenset({"x", "y"}), frozenset({"z"})]}, [], "a set has no fixed order"),
        ({"a": [object()]}, [], "value <object object"),
        ({"a": [[1, 2], (1, 2)]}, [], "duplicate values"),
    ],
)
def test_invalid_spaces_name_the_culprit(params, constraints, message):
    with pytest.raises(SpaceError) as err:
        Space(params, constraints)
    assert message in str(err.value)


def test_config_validation_errors():
    s = tiled_space()
    with pytest.raises(SpaceError, match="unknown parameter"):
        s.config(nope=1)
    good = s.sample(1, seed=0)[0]
    with pytest.raises(SpaceError, match="not a choice"):
        s.config(good.replace(BLOCK_M=3))
    with pytest.raises(SpaceError, match="violates constraint"):
        s.config(good.replace(BLOCK_M=128, BLOCK_K=64))


def test_config_is_immutable_hashable_and_stable():
    c = Config({"b": 2, "a": np.int64(1)})
    assert c.to_json() == '{"a":1,"b":2}'
    assert json.loads(c.to_json()) == {"a": 1, "b": 2}
    with pytest.raises(TypeError):
        c["a"] = 3  # type: ignore[index]
    assert {c: 1}[Config(a=1, b=2)] == 1
    assert c.digest == Config(a=1, b=2).digest


def test_callable_constraint_over_whole_config():
    s = Space({"a": [1, 2, 3]}, constraints=[lambda cfg: cfg["a"] != 2])
    assert [c["a"] for c in s] == [1, 3]


@pytest.mark.parametrize("values", [[[1, 2], [3, 4]], [{"x": [1, 2]}, {"x": [3]}], [np.int64(1), np.int64(2)]])
def test_values_are_found_again_as_configurations_and_records_give_them_back(values, tmp_path):
    from tensortune.db import Database, Target, Workload
    from tensortune.measure import MeasureResult

    s = Space({"a": values, "b": [1, 2]})
    cfg = s.sample(1, seed=0)[0]
    assert cfg in s and s.neighbours(cfg)
    db = Database(tmp_path / "t.db")
    w, t = Workload.make("k"), Target.make("cpu", "x")
    for c in s:
        db.add(w, t, MeasureResult(c, (1e-3,)))
    stored = [r.config for r in Database(tmp_path / "t.db").records(w, t)]
    assert all(c in s for c in stored)
    assert {s.to_point(c) for c in stored} == {s.to_point(c) for c in s}


@pytest.mark.parametrize("text, refused", [
    ("().__class__.__bases__[0].__subclasses__()", "a call of ().__class__"),
    ("a.__class__ is int", "attribute access (.__class__)"),
    ("__import__('os').system('touch /tmp/x') == 0", "a call of __import__"),
    ("open('/etc/passwd') is None", "a call of open"),
    ("[a for a in (1, 2)] == [1]", "a comprehension"),
    ("(lambda: a)() == 1", "lambda"),
    ("max(a, default=1) > 0", "keyword arguments"),
    ("f'{a}' == '1'", "f-strings"),
    ("(x := a) > 0", "assignment (:=)"),
    ("min > 0", "the function min without calling it"),
    ("{'k': a}['k'] == 1", "dict literals"),
])
def test_constraint_strings_are_parsed_into_allowed_nodes_never_evaluated(text, refused):
    with pytest.raises(SpaceError, match="constraints do not allow") as err:
        Space({"a": [1, 2, 3]}, constraints=[text])
    assert refused in str(err.value)


def test_constraint_expressions_compute_what_python_would_and_refuse_huge_values():
    cases = ["a * b <= 6", "a % 2 == 0 or b in (1, 3)", "not (a == 3 and b == 2)", "1 < a <= b < 4",
             "max(a, b) - min(a, b) == 1", "(a if b > 1 else 0) >= 2", "[a, b][1] == 2", "a ** 2 + (b << 1) > 9",
             "-a + ~b < -4", "abs(a - b) // 1 != 0 and sqrt(a) < 2 and log2(b) >= 0 and 'x' * a != 'xx'",
             "sum((a, b)) == 4 and len([a]) == 1 and all([a, b]) and any((a > 2, b > 2))", "a / b == 1.0"]
    for text in cases:
        s = Space({"a": [1, 2, 3], "b": [1, 2, 3]}, constraints=[text])
        expected = [(a, b) for a in (1, 2, 3) for b in (1, 2, 3)
                    if eval(text, {"sqrt": __import__("math").sqrt, "log2": __import__("math").log2},  # noqa: S307
                            {"a": a, "b": b})]
        assert sorted((c["a"], c["b"]) for c in s) == expected, text
    for text, message in (("2 ** (a * 10000) > 1", "bits"), ("'x' * (a * 10**9) == ''", "longer"),
                          ("(1 << (a * 100000)) > 0", "bits")):
        with pytest.raises(SpaceError, match=message):
            Space({"a": [1, 2]}, constraints=[text])
