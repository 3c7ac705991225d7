"""Matrix-vector contraction kernels: a few rows times a weight matrix, read once at full width.

A contraction with at most `GEMV_MAX_ROWS` rows on its M side (a decode step's `x[1, K] @
W^T`) is bound by reading the N x K factor, not by arithmetic; `tl.dot` would pad the rows
to 16 and load K in short steps. With `GEMV: True` the contraction is generated instead as
a matrix-vector product: each program owns BLOCK_N outputs (BLOCK_N rows of the N-side
factor), walks K in BLOCK_K-wide steps loading a [BLOCK_N, BLOCK_K] tile of that factor
(contiguous along K when it is stored so, as a linear layer's weight is: wide vector
loads), multiplies it by each row's [1, BLOCK_K] slice of the M-side factor (prologues
such as a norm's scaling computed on the slice), and accumulates in float32 registers
element by element, one accumulator tile per row; the tiles are summed along K once, after
the loop. SPLIT_K programs share one block of outputs when the blocks alone cannot fill
the GPU: each stores its float32 partial sums and bumps the block's arrival counter, and
the last to arrive adds the partials in their fixed order, resets the counter and applies
the epilogue (as `wave.py`'s tail tiles do), so the kernel is one launch and its result
does not depend on which program finishes last. The fused epilogue (bias, activation,
residual, cast) is the contraction's own, applied to a [rows, BLOCK_N] tile.

Each step needs each row's [BLOCK_K] slice of the M-side factor in the weight tile's
register layout. With VECTOR_TILE (the default) the slice is loaded at the tile's shape:
every tile row reads the same addresses, which after the first come from L1, and no
layout is converted. Without it the slice is loaded once as a vector and broadcast over
the tile's rows, which Triton does through shared memory, with barriers, every step.

Knobs: BLOCK_N, BLOCK_K, SPLIT_K, VECTOR_TILE, num_warps, num_stages (BLOCK_M, GROUP_M
are unused; the knobs of the tiled kernel must keep their defaults).

Example:
    >>> from tensortune.te import workloads
    >>> from tensortune.backends.triton.patterns import analyze
    >>> plan = analyze(workloads.matmul(1, 64, 256, "float16", "NT").output)
    >>> src = generate_gemv(plan, {"GEMV": True, "BLOCK_N": 16, "BLOCK_K": 128}, GenOptions())
    >>> "tl.dot" in src.text, "tl.sum(acc0, axis=1)" in src.text
    (False, True)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .exprgen import Emitter
from .patterns import ContractionPlan
from .source import CodegenError, GenOptions, KernelSource, cdiv, decompose, indent, kernel_args, module_text, \
    names_of, ranges_of, shapes_of
from .wave import WAVE_HELPER

GEMV_MAX_ROWS = 8

# the tiled kernel's knobs, which a matrix-vector configuration leaves at these values
TILED_ONLY = {"PERSISTENT": False, "TMA": False, "TMA_STORE": False, "EPILOGUE_SPLIT": 1, "RELAYOUT": False,
              "TAIL_SPLIT": 1, "STREAM_K": 0, "SK_PER_SM": 1}
# knobs a matrix-vector configuration takes but does not use (the sketch pins them too)
UNUSED = {"BLOCK_M": 16, "GROUP_M": 1}
# the matrix-vector kernel's own knobs, with the values a tiled configuration has
GEMV_ONLY = {"GEMV": False, "VECTOR_TILE": False}


def tiled_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A tiled-kernel configuration without the matrix-vector knobs (which must be off)."""
    on = sorted(k for k, off in GEMV_ONLY.items() if k in config and config[k] != off)
    if on:
        raise CodegenError(f"{', '.join(on)} apply to GEMV configurations only")
    return {k: v for k, v in config.items() if k not in GEMV_ONLY}


def gemv_applies(plan: ContractionPlan) -> bool:
    """Whether the contraction can be generated as a matrix-vector product: a few rows, no
    convolution window."""
    _, m, _, _ = plan.sizes
    return m <= GEMV_MAX_ROWS and not plan.window


def _config(config: Mapping[str, Any]) -> dict[str, Any]:
    c = {"GEMV": True, "VECTOR_TILE": True, **UNUSED, "BLOCK_N": 16, "BLOCK_K": 256, "SPLIT_K": 1, **TILED_ONLY,
         "num_warps": 4, "num_stages": 2}
    unknown = set(config) - set(c)
    if unknown:
        raise CodegenError(f"unknown matrix-vector parameter(s) {sorted(unknown)}; known: {sorted(c)}")
    c.update(config)
    for name in ("BLOCK_N", "BLOCK_K"):
        v = c[name]
        if not isinstance(v, int) or v < 1 or v & (v - 1):
            raise CodegenError(f"{name}={v!r}: a matrix-vector block is a power of two")
    if not isinstance(c["SPLIT_K"], int) or c["SPLIT_K"] < 1:
        raise CodegenError(f"SPLIT_K={c['SPLIT_K']!r} must be a positive integer")
    clash = sorted(k for k, v in TILED_ONLY.items() if c[k] != v)
    if clash:
        raise CodegenError(f"GEMV is not combined with {', '.join(f'{k}={c[k]!r}' for k in clash)}")
    return c


def generate_gemv(plan: ContractionPlan, config: Mapping[str, Any], options: GenOptions) -> KernelSource:
    """The matrix-vector module of a contraction with at most `GEMV_MAX_ROWS` rows."""
    c = _config(config)
    nb, m, n, _ = plan.sizes
    if not gemv_applies(plan):
        raise CodegenError(f"GEMV needs a contraction of at most {GEMV_MAX_ROWS} rows without a convolution "
                           f"window; this one has {m} rows" + (" and a window" if plan.window else ""))
    if nb > 65535:
        raise CodegenError(f"{nb} batch entries exceed the launch grid's second dimension")
    bn, bk, split = c["BLOCK_N"], c["BLOCK_K"], c["SPLIT_K"]
    k_inner = math.prod(a.extent for a in plan.k)
    iters = cdiv(k_inner, bk)
    if split > iters:
        raise CodegenError(f"SPLIT_K={split} exceeds the {iters} BLOCK_K steps of K={k_inner}")
    chunk = cdiv(iters, split)
    rows = 1 << (m - 1).bit_length()  # the rows padded to a power of two for the epilogue tile
    even_n, even_k = n % bn == 0, k_inner % bk == 0
    grid_n = cdiv(n, bn)

    args = kernel_args(plan, options)
    pointers = {a.name: a.pointer for a in args}
    storage = {a.name: a.dtype for a in args}
    out_arg = args[-1]
    axes = plan.batch + plan.m + plan.n + plan.k
    ranges = ranges_of(axes)
    # the loop's tile is [BLOCK_N, BLOCK_K]: N along dimension 0, K along 1, each row's M index a scalar
    shapes = {**shapes_of(plan.batch, "b"), **shapes_of(plan.m, "b"), **shapes_of(plan.n, "n"),
              **shapes_of(plan.k, "k")}

    body = ["pid_n = tl.program_id(0)", "pid_b = tl.program_id(1)"]
    body += ["pid_k = tl.program_id(2)"] if split > 1 else []
    body += decompose("pid_b", plan.batch)
    body += [f"rn = pid_n * {bn} + tl.arange(0, {bn})", f"rn_in = {'rn' if even_n else f'rn % {n}'}"]
    body += decompose("rn_in", plan.n, "[:, None]", "_w")
    for r in range(m):
        body += decompose(str(r), plan.m, "", f"_r{r}")
    body += [f"acc{r} = tl.zeros(({bn}, {bk}), dtype=tl.float32)" for r in range(m)]

    loop = [f"rk = it * {bk} + tl.arange(0, {bk})"]
    masks_w: dict[Any, str] = {}
    masks_a: dict[Any, str] = {}
    if not even_k:
        loop += [f"k_ok = rk < {k_inner}", "k_ok_w = k_ok[None, :]"]
        masks_w = {a.var: "k_ok_w" for a in plan.k}
        masks_a = {a.var: "k_ok" for a in plan.k}
    loop += decompose("rk", plan.k, "[None, :]", "_w")
    ew = Emitter({**names_of(plan.batch), **names_of(plan.k, "_w"), **names_of(plan.n, "_w")}, pointers,
                 masks=masks_w, ranges=ranges, storage=storage, shapes=shapes, prefix="tw")
    w = ew.value(plan.factor_b)
    loop += ew.lines + [f"w = tl.broadcast_to({w}, ({bn}, {bk}))"]
    if not even_k:
        loop += ["w = tl.where(k_ok_w, w, 0.0)"]
    # each row's slice of the other factor: loaded at the weight tile's shape (every tile row reads the
    # same addresses, from L1, in the weight's layout) or once as a vector along K, broadcast over
    # the tile's rows (its layout converted through shared memory every step)
    tile = bool(c["VECTOR_TILE"])
    loop += decompose("rk", plan.k, "[None, :] + rn_in[:, None] * 0" if tile else "", "_a")
    for r in range(m):
        ea = Emitter({**names_of(plan.batch), **names_of(plan.k, "_a"), **names_of(plan.m, f"_r{r}")}, pointers,
                     masks=masks_w if tile else masks_a, ranges=ranges, storage=storage, shapes=shapes,
                     prefix=f"ta{r}_")
        a = ea.value(plan.factor_a)
        shape = f"({bn}, {bk})" if tile else f"({bk},)"
        loop += ea.lines + [f"x{r} = tl.zeros({shape}, dtype=tl.float32) + {a}"]
        if not even_k:
            loop += [f"x{r} = tl.where({'k_ok_w' if tile else 'k_ok'}, x{r}, 0.0)"]
        loop += [f"acc{r} += w * x{r}" + ("" if tile else "[None, :]")]
    k_lo, k_hi = ("0", str(iters)) if split == 1 else (
        f"pid_k * {chunk}", f"pid_k * {chunk} + {chunk}" if iters % chunk == 0
        else f"tl.minimum(pid_k * {chunk} + {chunk}, {iters})")
    body += [f"for it in range({k_lo}, {k_hi}):", *indent(loop, 1)]

    # the rows' sums as one [rows, BLOCK_N] tile, the accumulator of the contraction's epilogue
    if rows == 1:
        body += ["acc = tl.sum(acc0, axis=1)[None, :]"]
    else:
        body += [f"row = tl.arange(0, {rows})[:, None]", f"acc = tl.zeros(({rows}, {bn}), dtype=tl.float32)"]
        body += [f"acc = tl.where(row == {r}, tl.sum(acc{r}, axis=1)[None, :], acc)" for r in range(m)]
    body += [f"rm = tl.arange(0, {rows})", f"rm_in = {'rm' if rows == m else f'rm % {m}'}"]
    body += decompose("rm_in", plan.m, "[:, None]")
    body += decompose("rn_in", plan.n, "[None, :]")

    from .gen_contraction import _epilogue

    epilogue_shapes = {**shapes_of(plan.batch, "b"), **shapes_of(plan.m, "m"), **shapes_of(plan.n, "n")}
    epilogue = _epilogue(plan, pointers, storage, ranges, epilogue_shapes, out_arg, rows, bn, m, n, rows == m,
                         even_n, 1, False)
    if split == 1:
        body += epilogue
    else:
        size = rows * bn
        body += [f"block = pid_b * {grid_n} + pid_n",
                 f"loc = tl.arange(0, {rows})[:, None] * {bn} + tl.arange(0, {bn})[None, :]",
                 f"tl.store(p_ws + (block * {split} + pid_k) * {size} + loc, acc)",
                 "arrived = tl.atomic_add(p_cnt + block, 1, sem=\"acq_rel\")",
                 f"if arrived == {split - 1}:",
                 f"    acc = tl.load(p_ws + block * {split * size} + loc, cache_modifier=\".cg\")",
                 f"    for s in tl.static_range(1, {split}):",
                 f"        acc += tl.load(p_ws + (block * {split} + s) * {size} + loc, cache_modifier=\".cg\")",
                 "    tl.atomic_xchg(p_cnt + block, 0)",
                 *indent(epilogue, 1)]

    params = ", ".join([a.pointer for a in args] + (["p_ws", "p_cnt"] if split > 1 else []))
    kernel = "@triton.jit\n" + f"def tt_gemv({params}):\n" + "\n".join(indent(body, 1))
    opts = f"num_warps={c['num_warps']}, num_stages={c['num_stages']}"
    call_args = ", ".join(a.pointer for a in args)
    out = out_arg.pointer
    if split == 1:
        launch = [f"tt_gemv[({grid_n}, {nb}, 1)]({call_args}, {opts})"]
        pre = [f"return [tt_gemv.warmup({call_args}, grid=(1,), {opts})]"]
    else:
        blocks = nb * grid_n
        launch = [f"ws = torch.empty({blocks * split * rows * bn}, dtype=torch.float32, device={out}.device)",
                  f"tt_gemv[({grid_n}, {nb}, {split})]({call_args}, ws, _tail_counters({out}, {blocks}), {opts})"]
        pre = [f"return [tt_gemv.warmup({call_args}, torch.float32, torch.int32, grid=(1,), {opts})]"]
    text = module_text(plan, c, [kernel], launch, pre, args, WAVE_HELPER if split > 1 else [])
    return KernelSource(text, tuple(a.name for a in args), tuple(a.dtype for a in args), ("tt_gemv",), c)
