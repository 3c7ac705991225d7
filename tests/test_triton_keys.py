"""Tuning keys and bucketing policies (no kernel launches)."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("triton")

from tensortune.frontends.triton.keys import KeyMaker, TuningKey, pow2, round_up  # noqa: E402


def test_pow2_and_round_policies():
    assert [pow2(v) for v in (1, 2, 3, 700, 1024, 1025)] == [1, 2, 4, 1024, 1024, 2048]
    # two buckets per power of two, as tilus rounds: the midpoint and the next power
    assert [round_up(v) for v in (700, 768, 769, 1000, 1024, 1536, 1537)] == [768, 768, 1024, 1024, 1024, 1536, 2048]
    assert pow2("fp16") == "fp16" and round_up(True) is True  # only integers are bucketed


class _T:
    def __init__(self, dtype):
        self.dtype = dtype


def test_raw_key_positional_and_keyword_give_the_same_tuning_key():
    maker = KeyMaker(["x", "y", "n", "m"], ["n", "m"], bucket={"n": "pow2"})
    a = maker.tuning_key(maker.raw((_T("torch.float16"), _T("torch.float32"), 700, 5), {}))
    b = maker.tuning_key(maker.raw((_T("torch.float16"),), {"y": _T("torch.float32"), "n": 1000, "m": 5}))
    assert a == b
    assert a.as_dict() == {"n": 1024, "m": 5, "dtypes": ["float16", "float32"]}


def test_key_names_must_be_arguments():
    with pytest.raises(ValueError, match="not arguments of the kernel"):
        KeyMaker(["x", "n"], ["N"])
    with pytest.raises(ValueError, match="not in key"):
        KeyMaker(["x", "n"], ["n"], bucket={"m": "pow2"})
    with pytest.raises(ValueError, match="unknown bucketing policy"):
        KeyMaker(["x", "n"], ["n"], bucket="log")
    with pytest.raises(TypeError, match="were not passed"):
        KeyMaker(["x", "n"], ["n"]).raw((1,), {})


def test_distance_between_keys():
    k = TuningKey(("M", "N"), (1024, 64), ("float16",))
    assert k.distance(TuningKey(("M", "N"), (2048, 64), ("float16",))) == 1.0
    assert k.distance(TuningKey(("M", "N"), (4096, 32), ("float16",))) == 3.0
    assert math.isinf(k.distance(TuningKey(("M", "N"), (1024, 64), ("float32",))))
    assert TuningKey.from_dict(("M", "N"), k.as_dict()) == k
