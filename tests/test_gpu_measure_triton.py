"""Triton on the CPU: a real kernel measured in an isolated worker under TRITON_INTERPRET=1,
real ahead-of-time compilation for an H100 (sm_90) with Triton's bundled assembler, and the
compile pool's adaptive timeout and crash handling."""

from __future__ import annotations

import ctypes
import time

import pytest

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from tensortune.measure import BuildResult, ErrorKind  # noqa: E402
from tensortune.measure.cuda_timer import CudaTimer  # noqa: E402
from tensortune.measure.gpu import GpuRunner, GpuTask, TensorArg  # noqa: E402
from tensortune.measure.triton_compile import (  # noqa: E402
    AdaptiveTimeout, ParallelCompiler, kernel_reference, precompile)
from tensortune.space import Config  # noqa: E402

N = 300


@triton.jit
def scale_kernel(x, out, n, alpha, BLOCK: tl.constexpr, SKIP_TAIL: tl.constexpr = 0, UNUSED: tl.constexpr = 0):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n - SKIP_TAIL  # SKIP_TAIL > 0 is a bug: the last elements are never written
    tl.store(out + offs, tl.load(x + offs, mask=mask) * alpha, mask=mask)


def launch_scale(config, x, out, n, alpha):
    scale_kernel[(triton.cdiv(n, config["BLOCK"]),)](x, out, n, alpha, **config)


def reference_scale(x, out, n, alpha):
    return x * alpha


def test_triton_kernel_in_an_isolated_interpreter_worker():
    task = GpuTask(launch_scale, (TensorArg((N,)), TensorArg((N,), output=True), N, 1.5),
                   reference=reference_scale, device="cpu",
                   timer=CudaTimer(clock="host", budget_seconds=0, warmup_seconds=0, min_repeats=2))
    builds = [BuildResult(Config(BLOCK=b)) for b in (64, 128)] + [BuildResult(Config(BLOCK=128, SKIP_TAIL=1))]
    with GpuRunner(task, timeout=60, env={"TRITON_INTERPRET": "1"}) as runner:
        results = {r.config: r for r in runner.run(builds)}
    assert results[Config(BLOCK=64)].ok and results[Config(BLOCK=128)].ok
    bad = results[Config(BLOCK=128, SKIP_TAIL=1)]
    assert bad.error is ErrorKind.WRONG_RESULT and "1 of 300 elements are NaN" in bad.message


def test_precompile_for_sm90_without_a_gpu_dedups_identical_binaries(tmp_path, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    cache = tmp_path / "triton-cache"
    configs = [Config(BLOCK=64, num_warps=2), Config(BLOCK=64, num_warps=2, UNUSED=7),
               Config(BLOCK=128, num_warps=4), Config(BLOCK=100, num_warps=4)]  # arange needs a power of 2
    results = precompile(kernel_reference(scale_kernel), configs,
                         [TensorArg((N,)), TensorArg((N,), output=True), N, 1.5],
                         target=("cuda", 90, 32), jobs=2, env={"TRITON_CACHE_DIR": str(cache)})
    assert [r.config for r in results] == configs
    a, same, other, broken = results
    assert a.ok and same.ok and other.ok, [r.message for r in results]
    assert a.artifact.binary_digest == same.artifact.binary_digest != other.artifact.binary_digest
    assert a.artifact.kernel_hash != same.artifact.kernel_hash  # different Triton keys, one binary
    assert broken.error is ErrorKind.COMPILE_ERROR and broken.message
    assert len(list(cache.rglob("scale_kernel.cubin"))) == 3  # in Triton's cache for the launch to find


def test_precompile_is_a_no_op_under_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    results = precompile(scale_kernel, [{"BLOCK": 64}], [TensorArg((N,))], target=("cuda", 90, 32))
    assert [(r.ok, r.artifact) for r in results] == [(True, None)]


def fake_compile(config):
    if config["mode"] == "hang":
        time.sleep(3600)
    if config["mode"] == "crash":
        ctypes.string_at(0)
    if config["mode"] == "error":
        raise ValueError("no such instruction")
    time.sleep(0.02)
    return config["mode"]


def test_compile_pool_adapts_its_timeout_and_survives_hangs_and_crashes():
    timeout = AdaptiveTimeout(initial=30, minimum=0.5, factor=3, min_samples=3)
    configs = [Config(mode="ok", i=i) for i in range(3)] + [Config(mode="hang"), Config(mode="crash"),
                                                            Config(mode="error"), Config(mode="ok", i=9)]
    with ParallelCompiler(fake_compile, jobs=1, timeout=timeout) as pool:
        results = pool.build(configs)
        restarts = pool.restarts
    kinds = [r.error for r in results]
    assert kinds == [None] * 3 + [ErrorKind.TIMEOUT, ErrorKind.CRASHED, ErrorKind.RUNTIME_ERROR, None]
    limit = float(results[3].message.split("within ")[1].split(" s")[0])
    assert limit < 30 and limit == pytest.approx(max(0.5, 3 * max(r.compile_seconds for r in results[:3])), abs=0.06)
    assert results[-1].artifact == "ok" and restarts == 2


def test_adaptive_timeout_follows_the_observed_quantile():
    t = AdaptiveTimeout(initial=60, minimum=10, factor=4, min_samples=4)
    assert t.current() == 60
    for s in (1.0, 2.0, 3.0, 4.0):
        t.observe(s)
    assert t.current() == 16.0
    t.observe(100.0)
    assert t.current() == 60  # never above the initial limit


@triton.jit
def desc_copy_kernel(x_desc, y_desc, BLOCK_M: tl.constexpr, WIDTH: tl.constexpr):
    row = tl.program_id(0) * BLOCK_M
    flat = tl.reshape(x_desc.load([row, 0]), [BLOCK_M * WIDTH])  # needs the block shape the pre_hook sets
    y_desc.store([row, 0], tl.reshape(flat, [BLOCK_M, WIDTH]))


def desc_block_shape(nargs):  # as the pre_hook of Triton's fused-attention tutorial sets it
    nargs["x_desc"].block_shape = [nargs["BLOCK_M"], nargs["WIDTH"]]
    nargs["y_desc"].block_shape = [nargs["BLOCK_M"], nargs["WIDTH"]]


def test_descriptors_compile_with_the_block_shape_their_configs_pre_hook_sets(tmp_path, monkeypatch):
    import functools

    torch = pytest.importorskip("torch")
    from triton.tools.tensor_descriptor import TensorDescriptor

    from tensortune.frontends.triton.isolated import compile_args, compile_args_by_config
    from tensortune.measure.triton_compile import compile_for_launch, warm_triton

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    x = torch.empty(256, 64, dtype=torch.float16)
    placeholder = [1, 1]  # the tutorial's dummy block shape, replaced by the pre_hook at each launch
    args = (TensorDescriptor(x, [256, 64], [64, 1], placeholder), TensorDescriptor(x, [256, 64], [64, 1], placeholder))
    configs = [Config(BLOCK_M=m, WIDTH=64, num_warps=4, num_stages=3) for m in (64, 128)]
    meta_of = lambda c: dict(c)  # noqa: E731
    by_config = compile_args_by_config(args, {}, ["x_desc", "y_desc"], configs,
                                       {c: desc_block_shape for c in configs}, meta_of)
    assert args[0].block_shape == [1, 1]  # the hook ran on copies
    ref, target = kernel_reference(desc_copy_kernel), ("cuda", 90, 32)
    env = {"TRITON_CACHE_DIR": str(tmp_path / "cache")}
    fixed = functools.partial(compile_for_launch, ref, tuple(compile_args(args)), by_config, {}, target, None)
    unfixed = functools.partial(compile_for_launch, ref, tuple(compile_args(args)), {}, {}, target, None)
    with ParallelCompiler(fixed, jobs=1, env=env, warm=functools.partial(warm_triton, target)) as pool:
        assert [r.ok for r in pool.build(configs)] == [True, True], [r.message for r in pool.build(configs)]
        pool.compile_fn = unfixed  # compiled with the placeholder, as before: every configuration fails
        assert {r.error for r in pool.build(configs)} == {ErrorKind.COMPILE_ERROR}


@triton.jit
def tile_product_kernel(a, b, c, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    offs_m, offs_n, offs_k = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        x = tl.load(a + offs_m[:, None] * K + (k + offs_k)[None, :])
        y = tl.load(b + (k + offs_k)[:, None] * BN + offs_n[None, :])
        acc = tl.dot(x, y, acc)
    tl.store(c + offs_m[:, None] * BN + offs_n[None, :], acc.to(tl.float16))


def test_a_kernel_short_of_shared_memory_is_rejected_before_the_assembler_runs(tmp_path, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    cache = tmp_path / "triton-cache"
    fits = Config(BM=64, BN=64, BK=32, num_warps=4, num_stages=3)
    too_big = Config(BM=256, BN=256, BK=128, num_warps=8, num_stages=5)  # about 640 KB of shared memory
    results = precompile(kernel_reference(tile_product_kernel), [fits, too_big],
                         [TensorArg((256, 4096), "float16"), TensorArg((4096, 256), "float16"),
                          TensorArg((256, 256), "float16", output=True), 4096],
                         target=("cuda", 90, 32), jobs=2, max_shared=232448, env={"TRITON_CACHE_DIR": str(cache)})
    assert results[0].ok and results[0].artifact.shared_bytes <= 232448
    assert results[1].error is ErrorKind.OUT_OF_RESOURCES and "the device allows 232448" in results[1].message
    assert len(list(cache.rglob("tile_product_kernel.cubin"))) == 1  # no assembler run for the one rejected


def shared_memory_by_size(config):  # a fake compile: shared memory grows with the tile and the stages
    from tensortune.measure import CandidateError

    need = config["BLOCK"] * config["num_stages"] * 1024
    if need > 200_000:
        raise CandidateError(ErrorKind.OUT_OF_RESOURCES, f"needs {need} bytes of shared memory; the device allows "
                                                         "200000")
    return need


def test_configurations_larger_than_one_short_of_shared_memory_are_not_compiled():
    from tensortune.frontends.triton.isolated import CompileQueue

    configs = [Config(BLOCK=b, num_stages=s, num_warps=w) for b in (32, 64, 128) for s in (2, 3, 4) for w in (4, 8)]
    with ParallelCompiler(shared_memory_by_size, jobs=1) as pool:
        queue = CompileQueue(pool)
        results = {r.config: r for r in queue.build(configs)}
    short = {c for c, r in results.items() if not r.ok}
    assert short == {c for c in configs if c["BLOCK"] * c["num_stages"] * 1024 > 200_000}
    skipped = {c for c in short if "not compiled" in results[c].message}
    # the smallest short one of each warp count is compiled and rejected; the larger ones are not compiled
    assert {(c["BLOCK"], c["num_stages"]) for c in short - skipped} == {(64, 4), (128, 2)}
    assert skipped == {c for c in short if (c["BLOCK"], c["num_stages"]) in ((128, 3), (128, 4))}
    assert all(results[c].compile_seconds == 0.0 for c in skipped)


def test_the_compile_only_driver_asks_the_real_driver_what_compiling_does_not_need(monkeypatch):
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver

    from tensortune.measure.triton_compile import _CompileOnlyDriver

    stand_in = _CompileOnlyDriver(GPUTarget("cuda", 90, 32))
    assert stand_in.get_current_target().arch == 90 and stand_in.get_current_stream() == 0

    class RealDriver:  # what a GPU machine's driver answers a module at import (Triton's tutorials do)
        def get_active_torch_device(self):
            return "cuda:0"

    monkeypatch.setattr(driver, "_default", RealDriver())
    assert stand_in.get_active_torch_device() == "cuda:0"
    monkeypatch.setattr(driver, "_default", None)
    def no_gpu():
        raise RuntimeError("0 active drivers")

    import sys

    monkeypatch.setattr(sys.modules["triton.runtime.driver"], "_create_driver", no_gpu)
    with pytest.raises(AttributeError, match="sees no GPU driver"):
        stand_in.get_active_torch_device()
