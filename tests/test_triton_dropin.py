"""@tensortune.autotune as a drop-in for triton.autotune, under TRITON_INTERPRET=1: checking
without a reference (consensus, only the elements written), every argument type Triton takes,
keyword launches that stay isolated, user exceptions, and what Triton's users read back.
(Triton's own autotuner tests run against it in test_triton_upstream_autotuner.py.)"""

from __future__ import annotations

import warnings

import pytest

from test_triton_kernels import (causal_scale_kernel, chunked_causal_kernel, desc_scale_kernel, interpret,  # noqa: F401
                                 matmul_args, matmul_grid, matmul_kernel, scale_heuristic_kernel,
                                 scale_inplace_kernel, set_block_shape, torch, triton, widen_kernel)

import tensortune as tt  # noqa: E402
from tensortune.db import Database  # noqa: E402
from tensortune.frontends.triton.tuning import WeakCheck  # noqa: E402
from tensortune.measure import ErrorKind  # noqa: E402
from tensortune.measure.cuda_timer import CudaTimer  # noqa: E402


class FakeTimer:
    """Runs the candidate once; its 'time' comes from `cost(config)`."""

    def __init__(self, cost):
        self.cost = cost

    def time(self, fn):
        fn()
        return (self.cost(fn.config),)


def settings(tmp_path, db="t.db"):
    return tt.Settings(db_path=tmp_path / db, progress=False)


def host_timer():
    return CudaTimer(clock="host", budget_seconds=0.0, warmup_seconds=0.0, min_repeats=1, estimate_repeats=1)


def buggy_first_matmul_configs():
    bug = triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "BUG": 1})  # wrong, and listed first
    return [bug] + [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": 16}) for m, n in ((16, 16), (32, 16),
                                                                                             (16, 32))]


def wrong_results(tuning):
    return {r.config.get("BUG") or 0: r for r in tuning.result.history if r.error is ErrorKind.WRONG_RESULT}


@pytest.mark.parametrize("isolate", [False, True])
def test_a_wrong_first_configuration_cannot_become_the_reference(tmp_path, isolate):
    timer = host_timer() if isolate else FakeTimer(lambda c: 0.1 if c.get("BUG") else 1.0)  # the bug is fastest
    k = tt.autotune(configs=buggy_first_matmul_configs(), key=["M"], timer=timer, isolate=isolate,
                    settings=settings(tmp_path))(matmul_kernel)
    args = matmul_args(20, 24, 40)
    k[matmul_grid(20, 24)](*args)
    torch.testing.assert_close(args[2], args[0] @ args[1], rtol=1e-4, atol=1e-4)
    (tuning,) = k.tunings.values()
    assert set(wrong_results(tuning)) == {1}  # the buggy one, and only it
    assert "BUG" not in k.best_config.kwargs
    assert tuning.check.startswith("consensus: 2 of 3 configurations agreed")  # the buggy one was outvoted
    assert Database(tmp_path / "t.db").records  # everything measured is recorded


@pytest.mark.parametrize("isolate", [False, True])
def test_outputs_left_unwritten_by_design_are_not_compared(tmp_path, isolate):
    n = 40
    configs = [triton.Config({"BLOCK": b}) for b in (8, 16, 32)] + [triton.Config({"BLOCK": 16, "BUG": 1})]
    k = tt.autotune(configs=configs, key=["n"], timer=host_timer(), isolate=isolate,
                    settings=settings(tmp_path))(causal_scale_kernel)
    x = torch.randn(n, n)
    y = torch.full((n, n), 7.0)
    k[lambda m: (triton.cdiv(n, m["BLOCK"]), triton.cdiv(n, m["BLOCK"]))](x, y, n)
    lower = torch.ones(n, n).tril().bool()
    torch.testing.assert_close(y[lower], 2 * x[lower])
    (tuning,) = k.tunings.values()
    wrong = [r for r in tuning.result.history if not r.ok]
    assert [r.config.get("BUG") for r in wrong] == [1]  # every right configuration passed, whatever it left
    assert "consensus" in tuning.check


def test_tiles_of_other_shapes_across_a_causal_boundary_agree(tmp_path):
    n = 64
    configs = [triton.Config({"BM": m, "BN": b}) for m, b in ((16, 64), (32, 32), (64, 16), (16, 16))]
    configs.append(triton.Config({"BM": 32, "BN": 32, "BUG": 1}))
    k = tt.autotune(configs=configs, key=["n"], timer=host_timer(), settings=settings(tmp_path))(
        chunked_causal_kernel)
    x, y = torch.randn(n, n), torch.empty(n, n)
    k[lambda m: (triton.cdiv(n, m["BM"]), triton.cdiv(n, m["BN"]))](x, y, n)
    lower = torch.ones(n, n).tril().bool()
    torch.testing.assert_close(y[lower], 2 * x[lower])
    (tuning,) = k.tunings.values()
    assert [r.config.get("BUG") for r in tuning.result.history if not r.ok] == [1]
    assert tuning.check.startswith("consensus")


def write_the_lower_triangle(x, y, n):
    """A reference that writes only what every configuration must: the lower triangle."""
    lower = torch.ones(n, n, dtype=torch.bool).tril()
    y[lower] = 2 * x[lower]


def test_only_the_elements_the_reference_wrote_are_compared(tmp_path):
    n = 40
    configs = [triton.Config({"BLOCK": b}) for b in (8, 16, 32)] + [triton.Config({"BLOCK": 8, "BUG": 1})]
    k = tt.autotune(configs=configs, key=["n"], timer=host_timer(), reference=write_the_lower_triangle,
                    settings=settings(tmp_path))(causal_scale_kernel)
    k[lambda m: (triton.cdiv(n, m["BLOCK"]), triton.cdiv(n, m["BLOCK"]))](torch.randn(n, n), torch.empty(n, n), n)
    (tuning,) = k.tunings.values()
    assert [r.config.get("BUG") for r in tuning.result.history if not r.ok] == [1]
    assert tuning.check == "against the reference function"


def test_an_output_a_configuration_leaves_unwritten_is_wrong_without_a_reference(tmp_path):
    configs = [triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 512}), triton.Config({"BLOCK": 1024})]
    k = tt.autotune(configs=configs, key=["n"], timer=FakeTimer(lambda c: 1.0 / c["BLOCK"] ** -1),
                    settings=settings(tmp_path))(widen_kernel)
    x, y = torch.randn(300), torch.empty(300)
    k[(1,)](x, y, 300)  # one program: BLOCK 64 leaves most of y unwritten (and would be the fastest)
    (tuning,) = k.tunings.values()
    bad = {r.config["BLOCK"]: r.message for r in tuning.result.history if not r.ok}
    assert list(bad) == [64] and "236 of 300 elements the reference wrote were left unwritten" in bad[64]
    torch.testing.assert_close(y, 2 * x)


def test_a_check_that_compared_nothing_says_so(tmp_path):
    configs = [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 24}),  # arange of 24: raises
               triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16})]
    k = tt.autotune(configs=configs, key=["M"], timer=host_timer(), settings=settings(tmp_path))(matmul_kernel)
    args = matmul_args(20, 24, 40)
    with pytest.warns(WeakCheck, match="only one configuration ran"):
        k[matmul_grid(20, 24)](*args)
    (tuning,) = k.tunings.values()
    assert tuning.check.startswith("weak") and tuning.final.extra["check"] == tuning.check


def test_keyword_launches_are_measured_in_the_isolated_worker(tmp_path):
    k = tt.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 32)], key=["n"], isolate=True,
                    timer=host_timer(), settings=settings(tmp_path))(scale_inplace_kernel)
    x = torch.randn(100)
    want = x * 2
    k[lambda m: (triton.cdiv(100, m["BLOCK"]),)](x_ptr=x, n=100, factor=2.0)
    torch.testing.assert_close(x, want)
    (tuning,) = k.tunings.values()
    assert all(r.extra.get("device") == "cpu" for r in tuning.result.history)  # measured in the worker
    k[lambda m: (triton.cdiv(100, m["BLOCK"]),)](x, 100, factor=2.0)  # same key, however passed
    assert len(k.tunings) == 1 and len(k.cache) == 1


def test_tensor_descriptors_with_a_config_pre_hook(tmp_path):
    from triton.tools.tensor_descriptor import TensorDescriptor

    configs = [triton.Config({"BLOCK_M": m, "WIDTH": 16}, pre_hook=set_block_shape) for m in (8, 16, 32)]
    k = tt.autotune(configs=configs, key=["factor"], timer=host_timer(),
                    settings=settings(tmp_path))(desc_scale_kernel)
    x, y = torch.randn(64, 16), torch.empty(64, 16)
    dummy = [1, 1]  # the tutorials' placeholder: the pre_hook sets the real block shape
    x_desc, y_desc = TensorDescriptor(x, [64, 16], [16, 1], dummy), TensorDescriptor(y, [64, 16], [16, 1], dummy)
    k[lambda m: (triton.cdiv(64, m["BLOCK_M"]),)](x_desc, y_desc, 3.0)
    torch.testing.assert_close(y, 3 * x)
    (tuning,) = k.tunings.values()
    assert all(r.ok for r in tuning.result.history) and len(tuning.result.history) == 3
    assert x_desc.block_shape == [k.best_config.kwargs["BLOCK_M"], 16]  # set on the caller's, at launch


def test_reinterpreted_tensors(tmp_path):
    bits = torch.randn(200).to(torch.float8_e4m3fn).view(torch.uint8)
    before = bits.clone()
    k = tt.autotune(configs=[triton.Config({"BLOCK": b}) for b in (64, 128)], key=["n"], timer=host_timer(),
                    settings=settings(tmp_path))(widen_kernel)
    y = torch.empty(200)
    grid = lambda m: (triton.cdiv(200, m["BLOCK"]),)  # noqa: E731
    k[grid](triton.reinterpret(bits, triton.language.float8e4nv), y, 200)
    torch.testing.assert_close(y, bits.view(torch.float8_e4m3fn).float() * 2)
    assert torch.equal(bits, before)


def test_user_code_exceptions_are_raised_as_they_are(tmp_path):
    configs = [triton.Config({"BLOCK": b}) for b in (16, 32)]
    grid = lambda m: (triton.cdiv(100, m["BLOCK"]),)  # noqa: E731

    class HookFailed(Exception):
        pass

    def pre_hook(nargs, reset_only=False):
        raise HookFailed("the user's hook")

    k = tt.autotune(configs, key=["n"], pre_hook=pre_hook, settings=settings(tmp_path))(scale_inplace_kernel)
    with pytest.raises(HookFailed, match="the user's hook"):
        k[grid](torch.randn(100), 100, 2.0)

    def do_bench(fn, quantiles):
        raise KeyError("the user's do_bench")

    k = tt.autotune(configs, key=["n"], do_bench=do_bench, settings=settings(tmp_path, "u.db"))(
        scale_inplace_kernel)
    with pytest.raises(KeyError, match="the user's do_bench"):
        k[grid](torch.randn(100), 100, 2.0)


def test_what_triton_users_read_back(tmp_path, monkeypatch):
    from triton import knobs

    told = []
    monkeypatch.setattr(knobs.autotuning, "listener", lambda **kw: told.append(kw))
    configs = [triton.Config({"BLOCK": b}) for b in (16, 32, 64)]
    make = tt.autotune(configs=configs, key=["n"], timer=FakeTimer(lambda c: 1.0 / c["BLOCK"]),
                       settings=settings(tmp_path))
    k = make(scale_inplace_kernel)
    k[lambda m: (triton.cdiv(100, m["BLOCK"]),)](torch.randn(100), 100, 2.0)
    assert k.best_config is configs[2] and k.cache == {(100, "torch.float32"): configs[2]}
    assert set(k.configs_timings) == set(configs) and k.configs_timings[configs[2]][0] == pytest.approx(1e3 / 64)
    assert k.bench_time > 0
    assert told[0]["cache_hit"] is False and told[0]["best_config"] is configs[2]
    k2 = make(scale_inplace_kernel)  # another process, as it were: the records answer
    k2[lambda m: (triton.cdiv(100, m["BLOCK"]),)](torch.randn(100), 100, 2.0)
    assert told[1]["cache_hit"] is True and told[1]["duration"] is None and k2.best_config is configs[2]


def test_pruning_everything_raises_tritons_error(tmp_path):
    from triton.runtime.errors import AutotunerError

    k = tt.autotune([triton.Config({"BLOCK": b}) for b in (16, 32)], key=["n"],
                    prune_configs_by={"early_config_prune": lambda configs, nargs, **kw: []},
                    settings=settings(tmp_path))(scale_inplace_kernel)
    with pytest.raises(AutotunerError, match="No valid autotuner configs after pruning"):
        k[(4,)](torch.randn(100), 100, 2.0)


def test_no_warning_when_the_check_is_strong(tmp_path):
    k = tt.autotune([triton.Config({"BLOCK": b}) for b in (16, 32, 64)], key=["n"], timer=host_timer(),
                    settings=settings(tmp_path))(scale_inplace_kernel)
    with warnings.catch_warnings():
        warnings.simplefilter("error", WeakCheck)
        k[lambda m: (triton.cdiv(100, m["BLOCK"]),)](torch.randn(100), 100, 2.0)


@pytest.mark.parametrize("isolate", [False, True])
def test_heuristics_under_the_autotuner_run_at_every_launch(tmp_path, isolate):
    k = tt.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 32, 64)], key=["n"], isolate=isolate,
                    timer=host_timer(), settings=settings(tmp_path))(scale_heuristic_kernel)
    for n in (96, 100):  # EVEN for every block, then for none
        x = torch.randn(n)
        want = x * 2
        k[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, n, 2.0)
        torch.testing.assert_close(x, want)
    assert all(r.ok for t in k.tunings.values() for r in t.result.history)


def test_an_accumulating_kernel_with_reset_to_zero_in_the_isolated_worker(tmp_path):
    from test_triton_kernels import sum_atomic_kernel

    k = tt.autotune([triton.Config({"BLOCK": b}) for b in (16, 32, 64)], key=["n"], reset_to_zero=["out_ptr"],
                    isolate=True, timer=host_timer(), settings=settings(tmp_path))(sum_atomic_kernel)
    x, out = torch.randn(200), torch.zeros(1)
    k[lambda m: (triton.cdiv(200, m["BLOCK"]),)](x, out, 200)
    torch.testing.assert_close(out[0], x.sum(), rtol=1e-5, atol=1e-5)
    (tuning,) = k.tunings.values()
    assert all(r.ok and r.extra.get("device") == "cpu" for r in tuning.result.history)
    assert tuning.check.startswith("consensus")
