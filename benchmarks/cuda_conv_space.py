"""Measure a CUDA C convolution's tuning space exhaustively on the GPU, as a Kernel Tuner cache.

convolution_milo-A100 is the space where our default search falls short of 0.90 at 100
measurements (docs/benchmarks/strategies.md, "Where it falls short"). This script measures
a space of the same kind on our own hardware, which no setting was chosen on: our own 2D
convolution kernel (benchmarks/kernels/convolution_tiled.cu, a 4096x4096 fp32 image, a
15x15 filter in constant memory) over the parameters and constraints of Kernel Tuner's
convolution_milo space (../shared/datasets/kernel_tuner/T1_convolution_milo.json), with
the same parameter names, so the replays can be compared and a model trained on the A100
or A4000 spaces can be tried on this one.

Every configuration the constraints allow is compiled with nvcc for the device (in
parallel; one that does not compile, e.g. needs more than 48 KB of static shared memory,
is a `CompilationFailedConfig`), run once on fresh random inputs into an output filled
with NaN and checked against torch's convolution in fp32 (TF32 off; a wrong result or a
crash is a `RuntimeFailedConfig`), then timed with CUDA events and a cold L2 in one pass
over all of them in random order. The cache records the median of the runs as `time`
(ms), the runs (`times`, at most 32), `compile_time` and `benchmark_time` (ms).

With `--image N --filter F` it measures the same kernel and parameters on another problem
(an N x N output, an F x F filter; the constraint on the shared window follows F), a
space of the same family with another landscape: cuda_convolution_N_fF-H100.json.gz.

Usage (CUDA machine):  python benchmarks/cuda_conv_space.py --out $OUT [--limit 40] [--image 8192 --filter 3]
Then:                  tensortune bench strategies --dataset OUT/cuda_convolution-H100.json.gz
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

KERNEL = Path(__file__).resolve().parent / "kernels" / "convolution_tiled.cu"
IMAGE = 4096  # convolution_milo's problem; --image and --filter measure others
FILTER = 15
KEEP_RUNS = 32


def grid(filter_size: int = FILTER) -> dict[str, list[int]]:
    """The parameters and their values: convolution_milo's, with the filter size fixed."""
    return {"block_size_x": list(range(16, 257, 16)), "block_size_y": [1, 2, 4, 8, 16], "tile_size_x": [1, 2, 3, 4],
            "tile_size_y": [1, 2, 3, 4], "read_only": [0, 1], "use_padding": [0, 1], "use_shmem": [0, 1],
            "use_cmem": [1], "filter_height": [filter_size], "filter_width": [filter_size]}


GRID = grid()


def allowed(c: dict) -> bool:
    """convolution_milo's constraints (T1_convolution_milo.json)."""
    window = (c["block_size_x"] * c["tile_size_x"] + c["filter_width"] - 1) * \
             (c["block_size_y"] * c["tile_size_y"] + c["filter_height"] - 1)
    return ((c["use_padding"] == 0 or c["block_size_x"] % 32 != 0)
            and c["block_size_x"] * c["block_size_y"] <= 1024
            and (c["use_padding"] == 0 or c["use_shmem"] != 0)
            and (c["use_shmem"] == 0 or window < 12 * 1024))


def configurations(filter_size: int = FILTER) -> list[dict]:
    g = grid(filter_size)
    return [c for values in itertools.product(*g.values()) if allowed(c := dict(zip(g, values)))]


def key_of(c: dict) -> str:
    return ",".join(str(c[n]) for n in GRID)


def compile_one(c: dict, folder: Path, arch: str, image: int) -> tuple[Path | None, float, str]:
    """nvcc -cubin for one configuration: (cubin or None, seconds, error message)."""
    out = folder / (key_of(c).replace(",", "_") + ".cubin")
    defines = [f"-D{m}={c[p]}" for m, p in (("BLOCK_X", "block_size_x"), ("BLOCK_Y", "block_size_y"),
                                             ("TILE_X", "tile_size_x"), ("TILE_Y", "tile_size_y"),
                                             ("READ_ONLY", "read_only"), ("USE_SHMEM", "use_shmem"),
                                             ("USE_PADDING", "use_padding"), ("FILTER_H", "filter_height"),
                                             ("FILTER_W", "filter_width"))]
    start = time.perf_counter()
    proc = subprocess.run(["nvcc", "-cubin", f"-arch={arch}", "-O3", f"-DIMAGE_W={image}", f"-DIMAGE_H={image}",
                           *defines, "-o", str(out), str(KERNEL)], capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        return None, seconds, (proc.stderr.strip().splitlines() or ["nvcc failed"])[-1][:200]
    return out, seconds, ""


def measure(limit: int | None, seed: int, jobs: int, save, image: int = IMAGE, filter_size: int = FILTER) -> dict:
    import cupy
    import torch

    from tensortune.measure.cuda_timer import CudaTimer

    configs = configurations(filter_size)
    print(f"{len(configs)} configurations", file=sys.stderr, flush=True)
    if limit:
        configs = random.Random(seed).sample(configs, limit)
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}"
    folder = Path(tempfile.mkdtemp(prefix="cubins-"))
    start = time.perf_counter()
    with ThreadPoolExecutor(jobs) as pool:
        built = list(pool.map(lambda c: compile_one(c, folder, arch, image), configs))
    print(f"compiled in {time.perf_counter() - start:.0f} s with {jobs} jobs", file=sys.stderr, flush=True)

    torch.backends.cudnn.allow_tf32 = False
    gen = torch.Generator(device="cuda").manual_seed(seed)
    inputs = torch.randn(image + filter_size - 1, image + filter_size - 1, device="cuda", generator=gen)
    filt = torch.randn(filter_size, filter_size, device="cuda", generator=gen)
    expected = torch.nn.functional.conv2d(inputs[None, None], filt[None, None])[0, 0]
    output = torch.empty(image, image, device="cuda")
    image_cp, output_cp, filt_cp = cupy.from_dlpack(inputs), cupy.from_dlpack(output), cupy.from_dlpack(filt.contiguous())
    timer = CudaTimer(budget_seconds=0.02, warmup_seconds=0.005)

    entries: dict[str, dict] = {}
    runnable = []
    for c, (cubin, seconds, message) in zip(configs, built):
        entry = {**c, "compile_time": round(seconds * 1000, 3), "benchmark_time": 0.0}
        entries[key_of(c)] = entry
        if cubin is None:
            entry.update(time="CompilationFailedConfig", message=message)
            continue
        runnable.append((c, cubin))
    random.Random(seed).shuffle(runnable)
    start = time.perf_counter()
    for n, (c, cubin) in enumerate(runnable):
        entry = entries[key_of(c)]
        t0 = time.perf_counter()
        try:
            module = cupy.RawModule(path=str(cubin))
            kernel = module.get_function("convolution")
            target = module.get_global("d_filter")
            target.copy_from_device(filt_cp.data, filt_cp.nbytes)
            blocks = (-(-image // (c["block_size_x"] * c["tile_size_x"])),
                      -(-image // (c["block_size_y"] * c["tile_size_y"])), 1)
            threads = (c["block_size_x"], c["block_size_y"], 1)

            def run(kernel=kernel, blocks=blocks, threads=threads) -> None:
                kernel(blocks, threads, (output_cp, image_cp))

            output.fill_(float("nan"))  # a stale or partial output must not pass
            run()
            torch.cuda.synchronize()
            if not torch.allclose(output, expected, rtol=1e-4, atol=1e-3):
                worst = (output - expected).abs().nan_to_num(float("inf")).max().item()
                entry.update(time="RuntimeFailedConfig", message=f"wrong result (max abs error {worst:.3g})")
                continue
            runs_ms = [t * 1000 for t in timer.time(run)]
        except Exception as exc:  # noqa: BLE001 - this configuration's failure
            entry.update(time="RuntimeFailedConfig", message=f"{type(exc).__name__}: {str(exc)[:160]}")
            torch.cuda.synchronize()
            continue
        entry.update(time=statistics.median(runs_ms), times=runs_ms[:KEEP_RUNS],
                     benchmark_time=round((time.perf_counter() - t0) * 1000, 3))
        if (n + 1) % 500 == 0:
            print(f"  {n + 1}/{len(runnable)} timed, {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
            save({k: e for k, e in entries.items() if "time" in e}, partial=True)
    return entries


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--limit", type=int, default=None, help="measure a random sample of this many (a smoke test)")
    p.add_argument("--seed", type=int, default=0, help="inputs and the order of the timing pass")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="nvcc processes at once")
    p.add_argument("--image", type=int, default=IMAGE, help="output width and height (default: convolution_milo's)")
    p.add_argument("--filter", type=int, default=FILTER, help="filter width and height (default: convolution_milo's)")
    opts = p.parse_args()
    if opts.image < 1 or opts.filter < 1:
        p.error("--image and --filter must be at least 1")
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    import torch
    from triton_space import write_cache

    device = torch.cuda.get_device_name().replace(" ", "_")
    short = "H100" if "H100" in device else device.split("_")[-1]
    problem = "" if (opts.image, opts.filter) == (IMAGE, FILTER) else f"_{opts.image}_f{opts.filter}"
    path = out / f"cuda_convolution{problem}-{short}{'-sample' if opts.limit else ''}.json.gz"

    params = grid(opts.filter)

    def save(entries: dict, partial: bool = False) -> None:
        doc = {"device_name": device, "problem_size": [opts.image, opts.image],
               "kernel_name": f"tensortune convolution_tiled.cu (fp32, {opts.image}x{opts.image}, {opts.filter}x{opts.filter})",
               "tune_params_keys": list(params), "tune_params": params,
               "objective": "time", "time_is": "median of the runs, ms",
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cache": entries}
        write_cache(path.with_name(path.name.replace(".json.gz", ".partial.json.gz")) if partial else path, doc)

    start = time.perf_counter()
    entries = measure(opts.limit, opts.seed, opts.jobs, save, opts.image, opts.filter)
    ok = [e for e in entries.values() if not isinstance(e["time"], str)]
    failed = len(entries) - len(ok)
    best = min(ok, key=lambda e: e["time"]) if ok else None
    print(f"{len(entries)} configurations, {failed} failed, best {best['time']:.4f} ms "
          f"({key_of(best)}), {time.perf_counter() - start:.0f} s" if best else "nothing ran", file=sys.stderr)
    save(entries)


if __name__ == "__main__":
    main()
