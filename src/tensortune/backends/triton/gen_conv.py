"""Depthwise and grouped convolution kernels: channels and pixels in blocks, the window unrolled.

One program computes a BLOCK_P x BLOCK_C tile: BLOCK_P flattened pixels (batch, rows,
columns in the output's order) of BLOCK_C channels. For each of a group's input
channels (a loop) it steps every window position (unrolled with `tl.static_range`),
loads the data tile at that offset (padding as load masks) and the BLOCK_C weights of
that position, and accumulates their product in float32 on the CUDA cores (a
depthwise window has too little reuse for tensor cores). The fused epilogue (bias,
activation, residual, cast) is applied to the accumulator before the one store.
Neighbouring window positions read the same lines, which stay in L1.

The configuration decides BLOCK_P, BLOCK_C, num_warps and num_stages (the group loop's
pipelining). An NCHW layout wants many pixels and few channels per program (loads along
image rows), NHWC the reverse (loads along channels); the sketch seeds both.

Example:
    >>> from tensortune.te import workloads
    >>> from tensortune.backends.triton.patterns import analyze
    >>> plan = analyze(workloads.depthwise_conv2d_nchw(1, 4, 8, 8, 3, 3, 1, 1, "float16").output)
    >>> src = generate_grouped_conv(plan, {"BLOCK_P": 64, "BLOCK_C": 2}, GenOptions())
    >>> "tl.static_range(9)" in src.text, src.kernels
    (True, ('tt_grouped_conv',))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...te.expr import TensorRead
from .exprgen import TL_TYPES, Emitter
from .patterns import ACC
from .patterns_conv import GroupedConvPlan
from .source import (CodegenError, GenOptions, KernelSource, cdiv, decompose, indent, kernel_args, module_text,
                     names_of, ranges_of, shapes_of)

DEFAULTS = {"BLOCK_P": 64, "BLOCK_C": 4, "num_warps": 4, "num_stages": 1}


def _config(config: Mapping[str, Any]) -> dict[str, Any]:
    unknown = set(config) - set(DEFAULTS)
    if unknown:
        raise CodegenError(f"unknown grouped_conv parameter(s) {sorted(unknown)}; known: {sorted(DEFAULTS)}")
    c = {**DEFAULTS, **config}
    for name, low in (("BLOCK_P", 1), ("BLOCK_C", 1)):
        v = c[name]
        if not isinstance(v, int) or isinstance(v, bool) or v < low or v & (v - 1):
            raise CodegenError(f"{name}={v!r} must be a power of two of at least {low}")
    if c["BLOCK_P"] * c["BLOCK_C"] < 16:
        raise CodegenError(f"BLOCK_P * BLOCK_C = {c['BLOCK_P'] * c['BLOCK_C']}: a tile needs at least 16 elements")
    return c


def generate_grouped_conv(plan: GroupedConvPlan, config: Mapping[str, Any], options: GenOptions) -> KernelSource:
    c = _config(config)
    bp, bc = c["BLOCK_P"], c["BLOCK_C"]
    n_pix, n_ch, n_group, n_win = plan.sizes
    args = kernel_args(plan, options)
    pointers = {a.name: a.pointer for a in args}
    storage = {a.name: a.dtype for a in args}
    out = args[-1]
    grid_c = cdiv(n_ch, bc)
    if grid_c > 65535:
        raise CodegenError(f"{grid_c} channel blocks exceed the launch grid's second dimension; raise BLOCK_C")
    even_p, even_c = n_pix % bp == 0, n_ch % bc == 0
    ranges = {**ranges_of(plan.pixels), **ranges_of(plan.channels), **ranges_of(plan.window),
              **ranges_of(plan.group)}
    shapes = {**shapes_of(plan.pixels, "p"), **shapes_of(plan.channels, "c"), **shapes_of(plan.window, "ko"),
              **shapes_of(plan.group, "ko")}
    names = {**names_of(plan.pixels), **names_of(plan.channels), **names_of(plan.window), **names_of(plan.group)}
    body = ["pid_p = tl.program_id(0)",
            "pid_c = tl.program_id(1)",
            f"rp = pid_p * {bp} + tl.arange(0, {bp})",
            f"rc = pid_c * {bc} + tl.arange(0, {bc})",
            f"rp_in = {'rp' if even_p else f'rp % {n_pix}'}",
            f"rc_in = {'rc' if even_c else f'rc % {n_ch}'}"]
    body += decompose("rp_in", plan.pixels, "[:, None]")
    body += decompose("rc_in", plan.channels, "[None, :]")
    body += [f"acc = tl.zeros(({bp}, {bc}), dtype=tl.float32)"]

    em = Emitter(names, pointers, ranges=ranges, storage=storage, shapes=shapes, prefix="t")
    d = em.value(plan.data)
    w = em.value(plan.weight)
    step = em.lines + [f"acc += {d} * {w}"]
    window = [f"for wi in tl.static_range({n_win}):", *indent(decompose("wi", plan.window) + step, 1)]
    if plan.group:
        body += [f"for gi in range({n_group}):", *indent(decompose("gi", plan.group) + window, 1)]
    else:
        body += window

    ee = Emitter({**names_of(plan.pixels), **names_of(plan.channels)}, pointers, ranges=ranges, known={ACC: "acc"},
                 storage=storage, shapes=shapes, prefix="e")
    val = ee.value(plan.epilogue)
    val = ee.emit(f"tl.broadcast_to({val}, ({bp}, {bc}))")
    off = ee.offset(TensorRead(plan.output, plan.out_index))
    masks = [m for m, even in ((f"(rp < {n_pix})[:, None]", even_p), (f"(rc < {n_ch})[None, :]", even_c))
             if not even]
    mask = f", mask={' & '.join(masks)}" if masks else ""
    body += ee.lines + [f"tl.store({out.pointer} + ({off}), {val}.to({TL_TYPES[out.dtype]}){mask})"]

    params = ", ".join(a.pointer for a in args)
    kernel = "@triton.jit\n" + f"def tt_grouped_conv({params}):\n" + "\n".join(indent(body, 1))
    opts = f"num_warps={c['num_warps']}, num_stages={c['num_stages']}"
    launch = [f"tt_grouped_conv[({cdiv(n_pix, bp)}, {grid_c})]({params}, {opts})"]
    pre = [f"return [tt_grouped_conv.warmup({params}, grid=(1,), {opts})]"]
    text = module_text(plan, c, [kernel], launch, pre, args)
    return KernelSource(text, tuple(a.name for a in args), tuple(a.dtype for a in args), ("tt_grouped_conv",), c)
