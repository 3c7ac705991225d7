"""@tensortune.autotune under TRITON_INTERPRET=1: results, failures, bucketing, never-tune,
and triton.autotune's own arguments. Timing is faked where the winner matters."""

from __future__ import annotations

import pytest

from test_triton_kernels import (interpret, matmul_args, matmul_grid, matmul_kernel,  # noqa: E402,F401
                                 scale_inplace_kernel, softmax_kernel, sum_atomic_kernel, torch, triton)

import tensortune as tt  # noqa: E402
from tensortune.db import Database  # noqa: E402
from tensortune.frontends.triton import TuningFailed  # noqa: E402
from tensortune.measure import ErrorKind  # noqa: E402


class FakeTimer:
    """Runs the candidate once; its 'time' comes from `cost(config)`."""

    def __init__(self, cost):
        self.cost = cost
        self.calls = []

    def time(self, fn):
        fn()
        self.calls.append(fn.config)
        return (self.cost(fn.config),)


def settings(tmp_path, never_tune=False, db="t.db"):
    return tt.Settings(db_path=tmp_path / db, never_tune=never_tune, progress=False)


def launch_softmax(kernel, rows=6, cols=40):
    """Launch a tuned softmax kernel on random rows and check it against torch's."""
    x = torch.randn(rows, cols)
    y = torch.empty_like(x)
    kernel[(rows,)](x, y, cols, x.stride(0))
    torch.testing.assert_close(y, torch.softmax(x, dim=1))


def matmul_configs(blocks=((16, 16), (32, 16), (16, 32), (32, 32))):
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": 16}, num_warps=4) for m, n in blocks]


def area(c):  # the fake cost: bigger tiles are faster
    return 1e-3 / (c["BLOCK_M"] * c["BLOCK_N"] * c.get("BLOCK_K", 1))


def matmul_reference(a, b, c, *rest):
    c.copy_(a @ b)


def test_matmul_tunes_each_config_once_and_computes_the_product(tmp_path):
    timer = FakeTimer(area)
    k = tt.autotune(configs=matmul_configs(), key=["M", "N", "K"], timer=timer,
                    settings=settings(tmp_path))(matmul_kernel)
    args = matmul_args(20, 24, 40)
    k[matmul_grid(20, 24)](*args)
    torch.testing.assert_close(args[2], args[0] @ args[1], rtol=1e-4, atol=1e-4)
    assert k.decision.config == {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "num_warps": 4, "num_stages": 3}
    assert k.best_config is k.configs[3]  # the listed triton.Config itself, as triton.autotune gives
    measured = {c.digest for c in timer.calls}
    assert len(measured) == 4
    (decision,) = k.decisions().values()
    assert decision.source == "tuned" and decision.key.as_dict()["M"] == 20
    calls = len(timer.calls)
    args2 = matmul_args(20, 24, 40, seed=1)
    k[matmul_grid(20, 24)](*args2)  # same key: dispatched, nothing measured
    assert len(timer.calls) == calls
    torch.testing.assert_close(args2[2], args2[0] @ args2[1], rtol=1e-4, atol=1e-4)
    db = Database(tmp_path / "t.db")
    recs = [r for r in db.all_records()]
    assert {r.config.digest for r in recs if not r.extra.get("final")} == measured
    (final,) = [r for r in recs if r.extra.get("final")]
    assert final.config == k.decision.config and final.extra["trials"] == 4


def test_threads_launching_interpreted_kernels_at_once_do_not_break_each_other(tmp_path):
    """Triton's interpreter patches triton.language while a launch runs: launches from
    several threads (keys tuned at once) run one at a time, each right."""
    import threading

    k = tt.autotune(configs=[triton.Config({"BLOCK": 64})], key=["n_cols"], timer=FakeTimer(lambda c: 1.0),
                    settings=settings(tmp_path))(softmax_kernel)
    launch_softmax(k)  # decided once; the threads launch the decision
    errors = []

    def launch_many():
        for _ in range(10):
            try:
                launch_softmax(k)
            except Exception as exc:  # noqa: BLE001 - collected, asserted below
                errors.append(repr(exc)[:200])

    threads = [threading.Thread(target=launch_many) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_softmax_space_form_with_reference_and_budget(tmp_path):
    space = tt.Space({"BLOCK": [16, 32, 64, 128], "num_warps": [1, 2, 4]})
    timer = FakeTimer(lambda c: 1.0 / c["BLOCK"] + c["num_warps"] * 1e-3)

    def reference(x, y, n_cols, stride):
        y[:, :n_cols] = torch.softmax(x[:, :n_cols], dim=1)

    k = tt.autotune(space=space, key=["n_cols"], budget=8, strategy="random", reference=reference,
                    timer=timer, settings=settings(tmp_path))(softmax_kernel)
    launch_softmax(k)
    (tuning,) = k.tunings.values()
    assert tuning.result.trials == 8
    # blocks narrower than a row leave columns unwritten: wrong results, recorded and skipped
    bad = [r for r in tuning.result.history if not r.ok]
    assert bad and all(r.error is ErrorKind.WRONG_RESULT and r.config["BLOCK"] < 40 for r in bad)
    assert "'y_ptr'" in bad[0].message
    assert k.best_config.kwargs["BLOCK"] >= 64


def test_in_place_kernel_changes_the_callers_tensor_exactly_once(tmp_path):
    configs = [triton.Config({"BLOCK": b}) for b in (16, 32, 64)]
    for i, extra in enumerate(({}, {"restore_value": ["x_ptr"]})):
        timer = FakeTimer(lambda c: 1.0 / c["BLOCK"])
        k = tt.autotune(configs=configs, key=["n"], timer=timer, settings=settings(tmp_path / str(i)), **extra)(
            scale_inplace_kernel)
        x = torch.randn(100)
        want = x * 3
        k[lambda m: (triton.cdiv(100, m["BLOCK"]),)](x, 100, 3.0)
        torch.testing.assert_close(x, want)
        assert len(timer.calls) >= 3


def test_failing_and_wrong_configs_are_recorded_and_skipped(tmp_path):
    configs = matmul_configs() + [
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 24}),  # arange of 24: raises
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "BUG": 1}),  # wrong result
    ]
    timer = FakeTimer(area)  # the bad ones would be the fastest
    k = tt.autotune(configs=configs, key=["M"], timer=timer, reference=lambda a, b, c, *rest: c.copy_(a @ b),
                    settings=settings(tmp_path))(matmul_kernel)
    args = matmul_args(20, 24, 40)
    k[matmul_grid(20, 24)](*args)
    torch.testing.assert_close(args[2], args[0] @ args[1], rtol=1e-4, atol=1e-4)
    assert k.best_config.kwargs["BLOCK_M"] == 32 and k.best_config.kwargs["BLOCK_N"] == 32
    errors = {r.config.get("BLOCK_K"): r.error for r in Database(tmp_path / "t.db").all_records() if not r.ok}
    assert errors == {24: ErrorKind.RUNTIME_ERROR, 32: ErrorKind.WRONG_RESULT}


def test_when_every_config_fails_the_error_names_them(tmp_path):
    configs = [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 24}),
               triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 40})]
    k = tt.autotune(configs=configs, key=["M"], timer=FakeTimer(area), settings=settings(tmp_path))(matmul_kernel)
    with pytest.raises(TuningFailed, match=r"(?s)every configuration .* failed.*BLOCK_K\":24.*runtime_error"):
        k[matmul_grid(20, 24)](*matmul_args(20, 24, 40))


def test_shapes_in_one_bucket_share_a_tuning(tmp_path):
    timer = FakeTimer(lambda c: 1.0 / c["BLOCK"])
    k = tt.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 32)], key=["n"], bucket="pow2",
                    timer=timer, settings=settings(tmp_path))(scale_inplace_kernel)

    def launch(n):
        x = torch.randn(n)
        want = x * 2
        k[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, n, 2.0)
        torch.testing.assert_close(x, want)

    launch(100)
    first = len(timer.calls)
    launch(120)  # bucket 128 again
    assert len(timer.calls) == first and len(k.decisions()) == 1
    launch(200)  # bucket 256: tuned
    assert len(timer.calls) > first
    assert sorted(key.as_dict()["n"] for key in k.decisions()) == [128, 256]


def test_new_key_answers_with_the_nearest_tuned_key_then_tunes_later(tmp_path):
    configs = [triton.Config({"BLOCK": b}) for b in (16, 32, 64)]
    timer = FakeTimer(lambda c: abs(c["BLOCK"] - 32) + 1.0)
    make = tt.autotune(configs=configs, key=["n"], on_new_key="nearest", timer=timer, settings=settings(tmp_path))
    k = make(scale_inplace_kernel)
    grid = lambda m: (triton.cdiv(500, m["BLOCK"]),)  # noqa: E731
    k[grid](torch.randn(100), 100, 2.0)  # nothing near yet: tuned now
    assert k.best_config.kwargs["BLOCK"] == 32
    calls = len(timer.calls)
    x = torch.randn(500)
    want = x * 2
    k[grid](x, 500, 2.0)
    torch.testing.assert_close(x, want)
    assert len(timer.calls) == calls and list(k.pending)[0].as_dict()["n"] == 500
    assert {d.source for d in k.decisions().values()} == {"tuned", "nearest"}
    (done,) = k.tune_pending()
    assert done.source == "tuned" and len(timer.calls) > calls and not k.pending


def test_never_tune_uses_records_nearest_or_the_first_config(tmp_path):
    configs = [triton.Config({"BLOCK": b}) for b in (16, 32, 64)]
    grid = lambda m: (triton.cdiv(256, m["BLOCK"]),)  # noqa: E731
    timer = FakeTimer(lambda c: 1.0 / c["BLOCK"])
    prod = tt.autotune(configs=configs, key=["n"], timer=timer, settings=settings(tmp_path, never_tune=True))
    k = prod(scale_inplace_kernel)
    x = torch.randn(100)
    want = x * 2
    k[grid](x, 100, 2.0)
    torch.testing.assert_close(x, want)
    assert not timer.calls and k.best_config.kwargs["BLOCK"] == 16  # nothing recorded: the first config
    tuner = tt.autotune(configs=configs, key=["n"], timer=timer, settings=settings(tmp_path))(scale_inplace_kernel)
    tuner[grid](torch.randn(100), 100, 2.0)
    assert tuner.best_config.kwargs["BLOCK"] == 64
    calls = len(timer.calls)
    k2 = prod(scale_inplace_kernel)
    k2[grid](torch.randn(100), 100, 2.0)
    k2[grid](torch.randn(256), 256, 2.0)
    assert len(timer.calls) == calls
    assert sorted((key.as_dict()["n"], d.source) for key, d in k2.decisions().items()) == [
        (100, "recorded"), (256, "nearest")]


def test_triton_autotune_arguments_are_honoured(tmp_path):
    seen = {"early": 0, "model": 0, "pre": 0, "post": 0, "config_pre": 0}

    def early_config_prune(configs, named_args, **kwargs):
        seen["early"] += 1
        assert named_args["n"] == 100
        return [c for c in configs if c.kwargs["BLOCK"] <= 64]

    def perf_model(**kw):
        seen["model"] += 1
        return abs(kw["BLOCK"] - 32)

    def config_pre_hook(nargs):
        seen["config_pre"] += 1

    def do_bench(fn, quantiles):  # Triton's signature: milliseconds at the quantiles
        fn()
        return [1.0, 0.9, 1.1]

    configs = [triton.Config({"BLOCK": b}, pre_hook=config_pre_hook if b == 32 else None) for b in (16, 32, 64, 128)]
    k = tt.autotune(configs, ["n"], prune_configs_by={"early_config_prune": early_config_prune,
                                                      "perf_model": perf_model, "top_k": 2},
                    do_bench=do_bench, settings=settings(tmp_path))(scale_inplace_kernel)
    x = torch.randn(100)
    want = x * 2
    k[lambda m: (triton.cdiv(100, m["BLOCK"]),)](x, 100, 2.0)
    torch.testing.assert_close(x, want)
    (tuning,) = k.tunings.values()
    assert sorted(r.config["BLOCK"] for r in tuning.result.history) == [16, 32]  # pruned to the top 2
    assert seen["early"] == 1 and seen["model"] == 3 and seen["config_pre"] >= 1

    def pre_hook(nargs, reset_only=False):
        seen["pre"] += 1

    def post_hook(nargs, exception):
        seen["post"] += 1

    k = tt.autotune(configs[:2], ["n"], pre_hook=pre_hook, post_hook=post_hook, timer=FakeTimer(lambda c: 1.0),
                    settings=settings(tmp_path / "hooks"))(scale_inplace_kernel)
    k[(8,)](torch.randn(100), 100, 2.0)
    assert seen["pre"] >= 2 and seen["post"] >= 2

    with pytest.raises(ValueError, match="not arguments of the kernel"):
        tt.autotune(configs, key=["N"])(scale_inplace_kernel)
    with pytest.raises(ValueError, match="reset_to_zero names"):
        tt.autotune(configs, key=["n"], reset_to_zero=["out"])(scale_inplace_kernel)
    with pytest.raises(ValueError, match="conflicting meta-parameters: BLOCK"):
        k2 = tt.autotune(configs, key=["n"], settings=settings(tmp_path))(scale_inplace_kernel)
        k2[(8,)](torch.randn(100), 100, 2.0, BLOCK=16)


def test_reset_to_zero_keeps_an_accumulating_kernel_correct(tmp_path):
    configs = [triton.Config({"BLOCK": b}) for b in (16, 32, 64)]
    k = tt.autotune(configs, key=["n"], reset_to_zero=["out_ptr"], timer=FakeTimer(lambda c: 1.0 / c["BLOCK"]),
                    settings=settings(tmp_path))(sum_atomic_kernel)
    x = torch.randn(200)
    out = torch.zeros(1)
    k[lambda m: (triton.cdiv(200, m["BLOCK"]),)](x, out, 200)
    torch.testing.assert_close(out[0], x.sum(), rtol=1e-5, atol=1e-5)


def test_a_single_config_is_launched_without_tuning(tmp_path):
    timer = FakeTimer(lambda c: 1.0)
    k = tt.autotune(configs=[triton.Config({"BLOCK": 32})], key=["n"], timer=timer,
                    settings=settings(tmp_path))(scale_inplace_kernel)
    x = torch.randn(50)
    want = x * 2
    k[(2,)](x, 50, 2.0)
    torch.testing.assert_close(x, want)
    assert not timer.calls and next(iter(k.decisions().values())).source == "only"


def test_isolated_worker_measures_candidates_and_records_failures(tmp_path):
    from tensortune.measure.cuda_timer import CudaTimer

    configs = matmul_configs(((16, 16), (32, 32))) + [
        triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 24}),  # raises in the worker
        triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "BUG": 1}),  # wrong result
    ]
    k = tt.autotune(configs=configs, key=["M"], isolate=True, reference=matmul_reference,
                    timer=CudaTimer(clock="host", budget_seconds=0.0, warmup_seconds=0.0, min_repeats=1,
                                    estimate_repeats=1),
                    settings=settings(tmp_path))(matmul_kernel)
    args = matmul_args(20, 24, 40)
    k[matmul_grid(20, 24)](*args)
    torch.testing.assert_close(args[2], args[0] @ args[1], rtol=1e-4, atol=1e-4)
    (tuning,) = k.tunings.values()
    by_block_k = {(r.config["BLOCK_K"], r.config["BUG"] or 0): r for r in tuning.result.history}
    assert by_block_k[(24, 0)].error is ErrorKind.RUNTIME_ERROR
    assert by_block_k[(16, 1)].error is ErrorKind.WRONG_RESULT
    assert by_block_k[(16, 0)].ok and by_block_k[(16, 0)].extra["device"] == "cpu"  # measured in the worker
    assert k.decision.config["BUG"] is None  # a name only some configurations set is None in the others


def test_a_budgeted_search_starts_from_the_nearest_tuned_keys_best(tmp_path):
    configs = [triton.Config({"BLOCK": b}, num_warps=w) for b in (16, 32, 64, 128) for w in (1, 2, 4)]
    timer = FakeTimer(lambda c: abs(c["BLOCK"] - 64) + c["num_warps"])  # best: BLOCK 64, 1 warp
    make = tt.autotune(configs=configs, key=["n"], timer=timer, settings=settings(tmp_path))
    k = make(scale_inplace_kernel)
    k.tune(torch.randn(100), 100, 2.0, grid=(8,))  # the whole list
    assert k.best_config.kwargs["BLOCK"] == 64 and k.best_config.num_warps == 1
    timer.calls.clear()
    k2 = tt.autotune(configs=configs, key=["n"], timer=timer, budget=3, strategy="random",
                     settings=settings(tmp_path))(scale_inplace_kernel)
    k2.tune(torch.randn(1000), 1000, 2.0, grid=(8,))
    (tuning,) = k2.tunings.values()
    assert tuning.result.trials == 3 and tuning.final.extra["strategy"] == "random+seeded"
    assert timer.calls[0] == {"BLOCK": 64, "num_warps": 1, "num_stages": 3}  # measured first


def test_contenders_include_candidates_whose_fastest_run_is_near_the_best():
    from tensortune.frontends.triton.tuning import contenders
    from tensortune.measure import MeasureResult
    from tensortune.space import Config

    steady = MeasureResult(Config(B=1), (1.00, 1.01, 1.02))
    late = MeasureResult(Config(B=2), (0.98, 1.30, 1.40))  # its median was inflated by a busy host
    slow = MeasureResult(Config(B=3), (1.20, 1.21, 1.22))
    got = contenders([steady, late, slow])
    assert [r.config["B"] for r in got] == [2, 1] and got[0].time == 0.98


def test_keys_tuned_one_after_another_share_the_warm_isolated_worker(tmp_path):
    from tensortune.frontends.triton import workers
    from tensortune.measure.cuda_timer import CudaTimer

    timer = CudaTimer(clock="host", budget_seconds=0.0, warmup_seconds=0.0, min_repeats=1, estimate_repeats=1)
    k = tt.autotune(configs=matmul_configs(((16, 16), (32, 32))), key=["M"], isolate=True,
                    reference=matmul_reference, timer=timer, settings=settings(tmp_path))(matmul_kernel)
    runners = []
    for M in (20, 40):
        args = matmul_args(M, 24, 40)
        k.tune(*args, grid=matmul_grid(M, 24))
        with workers.lease() as shared:
            runners.append(shared["runner"].inner)
    assert runners[0] is runners[1] and runners[0].restarts == 0  # one worker, started once
    for M in (20, 40):  # both keys were tuned (and checked) in the one worker
        args = matmul_args(M, 24, 40)
        k[matmul_grid(M, 24)](*args)
        torch.testing.assert_close(args[2], args[0] @ args[1], rtol=1e-4, atol=1e-4)
    assert {d.source for d in k.decisions().values()} == {"tuned"}


class RejectWideBlocks:
    """A builder that rejects BLOCK 128 as a compiler rejects a block needing too much shared memory."""

    jobs = 2

    def build(self, configs):
        from tensortune.measure import BuildResult

        return [BuildResult(c, None, ErrorKind.OUT_OF_RESOURCES, "needs 300000 bytes of shared memory")
                if c["BLOCK"] == 128 else BuildResult(c) for c in configs]


def test_compile_time_rejections_do_not_use_up_the_budget(tmp_path):
    space = tt.Space({"BLOCK": [64, 128], "num_warps": [1, 2, 4, 8]})
    timer = FakeTimer(lambda c: 1.0 / c["BLOCK"] + c["num_warps"] * 1e-3)
    k = tt.autotune(space=space, key=["n_cols"], budget=4, strategy="random", builder=RejectWideBlocks(),
                    timer=timer, settings=settings(tmp_path))(softmax_kernel)
    launch_softmax(k, rows=3)
    (tuning,) = k.tunings.values()
    history = tuning.result.history
    rejected = [r for r in history if r.rejected_by_build]
    assert len(history) - len(rejected) == 4  # all four BLOCK 64 configurations were measured
    assert len(timer.calls) >= 4 and all(c["BLOCK"] == 64 for c in timer.calls)
    # a budget that says so counts rejections as measurements
    k2 = tt.autotune(space=space, key=["n_cols"], budget=tt.Budget(trials=4, free_rejections=0),
                     strategy="random", builder=RejectWideBlocks(), timer=FakeTimer(lambda c: 1.0),
                     settings=settings(tmp_path, db="u.db"))(softmax_kernel)
    launch_softmax(k2, rows=3)
    (tuning2,) = k2.tunings.values()
    assert len(tuning2.result.history) == 4
