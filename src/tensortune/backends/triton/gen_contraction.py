"""Block-tiled contraction kernels: `tl.dot` over K with float32 accumulation, fused epilogue.

One program computes a BLOCK_M x BLOCK_N tile of the flattened (M, N) product for one
batch index: the factor expressions are evaluated on BLOCK_M x BLOCK_K and BLOCK_K x
BLOCK_N tiles (a padded convolution's input becomes an implicit-GEMM gather with its
padding as load masks), multiplied with `tl.dot` into a float32 accumulator, and the
epilogue (bias, activation, residual, scaling, cast) is applied before the one store.

The configuration decides BLOCK_M/N/K, GROUP_M (tiles launched in groups of GROUP_M
rows, so neighbouring programs share B's columns in L2), SPLIT_K (programs split K and
write float32 partial sums that a second kernel adds up and finishes with the epilogue:
for tall-skinny products with too few tiles to fill the GPU), PERSISTENT (one program
per SM looping over tiles), TMA (operand tiles loaded by Hopper's tensor memory
accelerator through device-side tensor descriptors, when both factors are plain
row-major reads; TMA_STORE also stores the output tile through one), EPILOGUE_SPLIT (the
epilogue applied to two column halves of the accumulator, fewer live registers),
TAIL_SPLIT (the last wave's tiles split along K, `wave.py`), STREAM_K with SK_PER_SM (a
persistent kernel whose last tiles' K steps are shared out evenly over all its programs,
`streamk.py`), num_warps and num_stages. GEMV (a contraction of at most 8 rows) generates
the matrix-vector kernel of `gen_gemv.py` instead.

Example:
    >>> from tensortune.te import workloads
    >>> from tensortune.backends.triton.patterns import analyze
    >>> plan = analyze(workloads.matmul(64, 64, 32, "float16").output)
    >>> src = generate_contraction(plan, {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}, GenOptions())
    >>> "tl.dot" in src.text, src.kernels
    (True, ('tt_contraction',))
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ...te.dtype import is_float
from ...te.expr import Cast, Const, Expr, Select, TensorRead
from ...te.tensor import Tensor
from .exprgen import TL_TYPES, Emitter
from .gen_gemv import generate_gemv, tiled_config
from .patterns import ACC, ContractionPlan
from .relayout import relayout, relayout_kernel, relayout_targets
from . import streamk
from .wave import WAVE_HELPER, fixup_lines, tail_prologue
from .source import (ALLOCATOR_HELPER, NUM_SMS_HELPER, CodegenError, GenOptions, KernelSource, cdiv, decompose,
                     indent, kernel_args, module_text, names_of, ranges_of, shapes_of)

SPLITK_BLOCK = 1024


def underlying_type(e: Expr, options: GenOptions, storage: Mapping[str, str]) -> str:
    """The type a factor can be fed to tl.dot in without computing: its read's storage."""
    x = e
    while isinstance(x, Cast) and is_float(x.dtype):
        x = x.value
    if isinstance(x, Select) and isinstance(x.other, Const) and float(x.other.value) == 0.0:
        x = x.then
        while isinstance(x, Cast) and is_float(x.dtype):
            x = x.value
    if isinstance(x, TensorRead):
        return storage[x.tensor.name]
    return options.stored(e.dtype) if e.dtype in ("float16", "bfloat16") else "float32"


def dot_type(plan: ContractionPlan, options: GenOptions) -> str:
    storage = {a.name: a.dtype for a in kernel_args(plan, options)}
    ta, tb = underlying_type(plan.factor_a, options, storage), underlying_type(plan.factor_b, options, storage)
    return ta if ta == tb and ta in ("float16", "bfloat16", "float32") else "float32"


def _plain(e: Expr) -> Expr:
    while isinstance(e, Cast) and is_float(e.dtype):
        e = e.value
    return e


def tma_operands(plan: ContractionPlan, options: GenOptions) -> tuple[TensorRead, TensorRead] | None:
    """The two reads a TMA variant loads through tensor descriptors, when it applies: no
    batch, one M, N and K axis, both factors plain reads `A[m, k]` and `B[k, n]` stored in
    the dot's type, rows aligned to 16 bytes."""
    if plan.batch or plan.window or len(plan.m) != 1 or len(plan.n) != 1 or len(plan.k) != 1:
        return None
    a, b = _plain(plan.factor_a), _plain(plan.factor_b)
    m, n, k = plan.m[0].var, plan.n[0].var, plan.k[0].var
    if not (isinstance(a, TensorRead) and isinstance(b, TensorRead)):
        return None
    if a.indices != (m, k) or b.indices != (k, n):
        return None
    storage = {x.name: x.dtype for x in kernel_args(plan, options)}
    dtype = dot_type(plan, options)
    if options.interpret and dtype == "bfloat16":
        return None
    if storage[a.tensor.name] != dtype or storage[b.tensor.name] != dtype:
        return None
    item = 4 if dtype == "float32" else 2
    if (a.tensor.shape[1] * item) % 16 or (b.tensor.shape[1] * item) % 16:
        return None
    return a, b


def _config(config: Mapping[str, Any]) -> dict[str, Any]:
    c = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 1, "SPLIT_K": 1, "PERSISTENT": False,
         "TMA": False, "TMA_STORE": False, "EPILOGUE_SPLIT": 1, "RELAYOUT": False, "TAIL_SPLIT": 1,
         "STREAM_K": 0, "SK_PER_SM": 1, "num_warps": 4, "num_stages": 3}
    unknown = set(config) - set(c)
    if unknown:
        raise CodegenError(f"unknown contraction parameter(s) {sorted(unknown)}; known: {sorted(c)}")
    c.update(config)
    for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K"):
        v = c[name]
        if not isinstance(v, int) or v < 16 or v & (v - 1):
            raise CodegenError(f"{name}={v!r}: tl.dot needs a power of two of at least 16")
    if c["GROUP_M"] < 1 or c["SPLIT_K"] < 1:
        raise CodegenError("GROUP_M and SPLIT_K must be at least 1")
    if c["SPLIT_K"] > 1 and c["PERSISTENT"]:
        raise CodegenError("SPLIT_K > 1 is not combined with PERSISTENT")
    if not isinstance(c["TAIL_SPLIT"], int) or c["TAIL_SPLIT"] < 1:
        raise CodegenError(f"TAIL_SPLIT={c['TAIL_SPLIT']!r} must be a positive integer")
    if c["TAIL_SPLIT"] > 1 and (c["SPLIT_K"] > 1 or c["TMA_STORE"]):
        raise CodegenError("TAIL_SPLIT > 1 is not combined with SPLIT_K or TMA_STORE")
    if c["STREAM_K"] not in streamk.OPTIONS or c["SK_PER_SM"] not in (1, 2, 3, 4):
        raise CodegenError(f"STREAM_K={c['STREAM_K']!r} must be one of {streamk.OPTIONS} and "
                           f"SK_PER_SM={c['SK_PER_SM']!r} 1 to 4")
    if c["STREAM_K"] and (not c["PERSISTENT"] or c["SPLIT_K"] > 1 or c["TAIL_SPLIT"] > 1):
        raise CodegenError("STREAM_K > 0 needs PERSISTENT and is not combined with SPLIT_K or TAIL_SPLIT")
    return c


def generate_contraction(plan: ContractionPlan, config: Mapping[str, Any], options: GenOptions) -> KernelSource:
    if config.get("GEMV"):  # a few rows: the matrix-vector kernel (gen_gemv.py)
        return generate_gemv(plan, config, options)
    c = _config(tiled_config(config))
    bm, bn, bk, group, split = c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"], c["GROUP_M"], c["SPLIT_K"]
    halves, tail = c["EPILOGUE_SPLIT"], c["TAIL_SPLIT"]
    nb, m, n, _ = plan.sizes
    stream = c["STREAM_K"]
    if (tail > 1 or stream) and nb > 1:
        raise CodegenError("TAIL_SPLIT > 1 and STREAM_K need a contraction without batch axes")
    if nb > 65535 and not c["PERSISTENT"]:
        raise CodegenError(f"{nb} batch entries exceed the launch grid's second dimension; use PERSISTENT")
    if halves not in (1, 2) or (halves == 2 and (bn < 32 or split > 1)):
        raise CodegenError(f"EPILOGUE_SPLIT={halves}: 1, or 2 with BLOCK_N >= 32 and no SPLIT_K")
    args = kernel_args(plan, options)
    pointers = {a.name: a.pointer for a in args}
    storage = {a.name: a.dtype for a in args}
    out_arg = args[-1]
    dtype = dot_type(plan, options)
    feed = "float32" if options.interpret and dtype == "bfloat16" else dtype
    precision = ""
    if feed == "float32":
        precision = f', input_precision="{"tf32" if options.allow_tf32 and dtype == "float32" else "ieee"}"'
    targets = relayout_targets(plan) if c["RELAYOUT"] else []
    if c["RELAYOUT"] and not targets:
        raise CodegenError("RELAYOUT applies to windowed contractions (convolutions) gathering along a dimension "
                           "that is not the last")
    if c["RELAYOUT"] and c["TMA"]:
        raise CodegenError("RELAYOUT is not combined with TMA")
    copies: list[Tensor] = []
    if targets:
        plan, copies = relayout(plan, targets)
        for i, (copy, (t, _)) in enumerate(zip(copies, targets)):
            pointers[copy.name] = f"p_rl{i}"
            storage[copy.name] = storage[t.name]
    grid_m, grid_n = cdiv(m, bm), cdiv(n, bn)
    tiles = grid_m * grid_n
    k_inner = math.prod(a.extent for a in plan.k)
    blocks = cdiv(k_inner, bk)  # BLOCK_K steps over the inner reduce axes
    iters = blocks * math.prod(a.extent for a in plan.window)
    chunk = cdiv(iters, split)
    even_m, even_n, even_k = m % bm == 0, n % bn == 0, k_inner % bk == 0
    axes = plan.batch + plan.m + plan.n + plan.k + plan.window
    ranges = ranges_of(axes)
    shapes = {**shapes_of(plan.batch, "b"), **shapes_of(plan.m, "m"), **shapes_of(plan.n, "n"),
              **shapes_of(plan.k, "k"), **shapes_of(plan.window, "ko")}
    tma = tma_operands(plan, options) if c["TMA"] else None
    if c["TMA"] and tma is None:
        raise CodegenError("TMA loads need plain reads A[m, k] and B[k, n] in the dot's type, without batch")
    tma_store = bool(c["TMA_STORE"])
    if tma_store and not (tma is not None and plan.out_index == (plan.m[0].var, plan.n[0].var) and split == 1
                          and (n * (2 if out_arg.dtype != "float32" else 4)) % 16 == 0):
        raise CodegenError("TMA_STORE needs TMA, a plain row-major [M, N] output with 16-byte rows, no SPLIT_K")

    # -- which tile --------------------------------------------------------------------------
    tile: list[str] = []
    if group > 1 and grid_m > 1:
        size_m = str(group) if grid_m % group == 0 else f"tl.minimum({grid_m} - first_m, {group})"
        tile += [f"group = pid // {group * grid_n}",
                 f"first_m = group * {group}",
                 f"size_m = {size_m}",
                 f"pid_m = first_m + (pid % {group * grid_n}) % size_m",
                 f"pid_n = (pid % {group * grid_n}) // size_m"]
    else:
        tile += [f"pid_m = pid // {grid_n}", f"pid_n = pid % {grid_n}"]
    tile += decompose("pid_b", plan.batch)
    tile += [f"rm = pid_m * {bm} + tl.arange(0, {bm})",
             f"rn = pid_n * {bn} + tl.arange(0, {bn})",
             f"rm_in = {'rm' if even_m else f'rm % {m}'}",
             f"rn_in = {'rn' if even_n else f'rn % {n}'}"]
    tile += decompose("rm_in", plan.m, "[:, None]")
    tile += decompose("rn_in", plan.n, "[None, :]")

    # -- the K loop: one BLOCK_K step of the inner axes (and one window position) per iteration
    loop: list[str] = []
    if plan.window:
        loop += [f"kw = it // {blocks}", f"kb = it % {blocks}" if blocks > 1 else "kb = 0"]
        loop += decompose("kw", plan.window)
    else:
        loop += ["kb = it"]
    loop += [f"kk = kb * {bk}"]
    common = {**names_of(plan.batch), **names_of(plan.window)}
    if tma is not None:
        loop += [f"a_tile = a_desc.load([pid_m * {bm}, kk])", f"b_tile = b_desc.load([kk, pid_n * {bn}])",
                 f"acc = tl.dot(a_tile, b_tile, acc{precision})"]
    else:
        loop += [f"rk = kk + tl.arange(0, {bk})"]
        a_masks: dict[Any, str] = {}
        b_masks: dict[Any, str] = {}
        if not even_k:
            loop += [f"k_ok = rk < {k_inner}", "k_ok_a = k_ok[None, :]", "k_ok_b = k_ok[:, None]"]
            a_masks = {a.var: "k_ok_a" for a in plan.k}
            b_masks = {a.var: "k_ok_b" for a in plan.k}
        loop += decompose("rk", plan.k, "[None, :]", "_a")
        loop += decompose("rk", plan.k, "[:, None]", "_b")
        ea = Emitter({**common, **names_of(plan.m), **names_of(plan.k, "_a")}, pointers, masks=a_masks,
                     ranges=ranges, storage=storage, shapes=shapes, prefix="ta")
        a_name = ea.native(plan.factor_a, feed)
        eb = Emitter({**common, **names_of(plan.n), **names_of(plan.k, "_b")}, pointers, masks=b_masks,
                     ranges=ranges, storage=storage, shapes=shapes, prefix="tb")
        b_name = eb.native(plan.factor_b, feed)
        loop += ea.lines + eb.lines
        # a factor whose address skips a side (a single row, M = 1) loads a thinner tile: widen it for tl.dot
        loop += [f"{a_name} = tl.broadcast_to({a_name}, ({bm}, {bk}))",
                 f"{b_name} = tl.broadcast_to({b_name}, ({bk}, {bn}))"]
        if not even_k:
            loop += [f"{a_name} = tl.where(k_ok_a, {a_name}, 0)", f"{b_name} = tl.where(k_ok_b, {b_name}, 0)"]
        loop += [f"acc = tl.dot({a_name}, {b_name}, acc{precision})"]
    if tail > 1:
        if tail > iters:
            raise CodegenError(f"TAIL_SPLIT={tail} exceeds the {iters} steps of the K loop")
        k_lo, k_hi = "k_lo", "k_hi"
    elif split == 1:
        k_lo, k_hi = "0", str(iters)
    else:
        k_lo = f"pid_k * {chunk}"
        k_hi = f"pid_k * {chunk} + {chunk}" if iters % chunk == 0 else f"tl.minimum(pid_k * {chunk} + {chunk}, {iters})"
    head = list(tile)
    tile += [f"acc = tl.zeros(({bm}, {bn}), dtype=tl.float32)",
             f"for it in range({k_lo}, {k_hi}):", *indent(loop, 1)]

    # -- epilogue ------------------------------------------------------------------------------
    if tail > 1:
        tile += fixup_lines(tail, bm, bn, "p_tws", "p_tcnt")
        tile += ["if done:", *indent(_epilogue(plan, pointers, storage, ranges, shapes, out_arg, bm, bn, m, n, even_m,
                                               even_n, halves, tma_store), 1)]
    elif split == 1:
        epilogue = _epilogue(plan, pointers, storage, ranges, shapes, out_arg, bm, bn, m, n, even_m, even_n,
                             halves, tma_store)
        tile += epilogue
    else:
        store_mask = [p for p, even in ((f"(rm < {m})[:, None]", even_m), (f"(rn < {n})[None, :]", even_n))
                      if not even]
        mask_arg = f", mask={' & '.join(store_mask)}" if store_mask else ""
        tile += [f"ws_off = (pid_k * {nb} + pid_b) * {m * n} + rm[:, None] * {n} + rn[None, :]",
                 f"tl.store(p_ws + ws_off, acc{mask_arg})"]

    # -- the kernel ----------------------------------------------------------------------------
    descriptors: list[str] = []
    if tma is not None:
        ra, rb = tma
        k = k_inner
        descriptors = [
            f"a_desc = tl.make_tensor_descriptor({pointers[ra.tensor.name]}, shape=[{m}, {k}], strides=[{k}, 1], "
            f"block_shape=[{bm}, {bk}])",
            f"b_desc = tl.make_tensor_descriptor({pointers[rb.tensor.name]}, shape=[{k}, {n}], strides=[{n}, 1], "
            f"block_shape=[{bk}, {bn}])"]
        if tma_store:
            descriptors.append(f"c_desc = tl.make_tensor_descriptor({out_arg.pointer}, shape=[{m}, {n}], "
                               f"strides=[{n}, 1], block_shape=[{bm}, {bn // halves}])")
    rl_params = [f"p_rl{i}" for i in range(len(copies))]
    params = ", ".join([a.pointer for a in args] + rl_params + (["p_ws"] if split > 1 else [])
                       + (["p_tws", "p_tcnt", "dp_tiles"] if tail > 1 else [])
                       + (["p_sws", "p_scnt", "dp_tiles", "sk_iters", "sk_programs"] if stream else []))
    body: list[str] = list(descriptors)
    if stream:
        k_loop = [f"acc = tl.zeros(({bm}, {bn}), dtype=tl.float32)", "for it in range(k_lo, k_hi):",
                  *indent(loop, 1)]
        body += streamk.drive(iters, head, k_loop, streamk.fixup_lines(iters, bm, bn, "p_sws", "p_scnt"), epilogue,
                              tile)
    elif c["PERSISTENT"] and tail > 1:
        body += [f"for pid0 in tl.range(tl.program_id(0), dp_tiles + ({tiles} - dp_tiles) * {tail}, "
                 "tl.num_programs(0)):",
                 *indent(["pid_b = 0", *tail_prologue(tail, iters), *tile], 1)]
    elif c["PERSISTENT"]:
        body += [f"for tile in tl.range(tl.program_id(0), {tiles * nb}, tl.num_programs(0), flatten=True):",
                 *indent([f"pid_b = tile // {tiles}", f"pid = tile % {tiles}", *tile], 1)]
    elif tail > 1:
        body += ["pid0 = tl.program_id(0)", "pid_b = tl.program_id(1)", *tail_prologue(tail, iters), *tile]
    else:
        body += ["pid = tl.program_id(0)", "pid_b = tl.program_id(1)"]
        if split > 1:
            body += ["pid_k = tl.program_id(2)"]
        body += tile
    jit = '@triton.jit(do_not_specialize=["dp_tiles"])' if tail > 1 else "@triton.jit"
    if stream:
        jit = '@triton.jit(do_not_specialize=["dp_tiles", "sk_iters", "sk_programs"])'
    kernels = [jit + "\n" + f"def tt_contraction({params}):\n" + "\n".join(indent(body, 1))]
    names = ["tt_contraction"]
    opts = f"num_warps={c['num_warps']}, num_stages={c['num_stages']}"
    call_args = ", ".join([a.pointer for a in args] + [f"rl{i}" for i in range(len(copies))])
    launch: list[str] = ["triton.set_allocator(_scratch_allocator(" + out_arg.pointer + "))"] if tma else []
    pre: list[str] = []
    warm_rl: list[str] = []
    for i, (copy, (t, d)) in enumerate(zip(copies, targets)):
        text, grid = relayout_kernel(i, t, d)
        kernels.append(text)
        names.append(f"tt_relayout{i}")
        src = pointers[t.name]
        launch += [f"rl{i} = torch.empty({math.prod(copy.shape)}, dtype={src}.dtype, device={src}.device)",
                   f"tt_relayout{i}[{grid}]({src}, rl{i}, num_warps=4, num_stages=1)"]
        pre += [f"rl{i} = {src}"]  # precompile gets dtypes: the copy has its source's
        warm_rl.append(f"tt_relayout{i}.warmup({src}, {src}, grid=(1,), num_warps=4, num_stages=1)")
    if c["PERSISTENT"] and tail == 1 and not stream:
        launch += [f"grid = (min({tiles * nb}, _num_sms({out_arg.pointer})),)"]
    elif tail == 1 and not stream:
        launch += [f"grid = ({tiles}, {nb}, {split})"]
    if stream:
        launch += streamk.launch_lines(tiles, iters, c["SK_PER_SM"], bm, bn, stream, out_arg.pointer, call_args, opts)
        pre += [f"return [tt_contraction.warmup({call_args}, torch.float32, torch.int32, 0, 0, 1, grid=(1,), {opts})"
                + "".join(f", {w}" for w in warm_rl) + "]"]
    elif tail > 1:
        compiled = f"lambda: tt_contraction.warmup({call_args}, torch.float32, torch.int32, 0, grid=(1,), {opts})"
        work = f"dp_tiles + ({tiles} - dp_tiles) * {tail}"
        if c["PERSISTENT"]:
            launch += [f"slots = _num_sms({out_arg.pointer})"]
        else:
            launch += [f"slots = _wave_slots({out_arg.pointer}, {compiled}, {c['num_warps']})"]
        launch += [f"dp_tiles = {tiles} - {tiles} % slots",
                   f"tws = torch.empty(max(1, {tiles} - dp_tiles) * {tail * bm * bn}, dtype=torch.float32, "
                   f"device={out_arg.pointer}.device)",
                   f"grid = ({f'min({work}, slots)' if c['PERSISTENT'] else work}, 1, 1)",
                   f"tt_contraction[grid]({call_args}, tws, _tail_counters({out_arg.pointer}, {tiles}), dp_tiles, "
                   f"{opts})"]
        pre += [f"return [tt_contraction.warmup({call_args}, torch.float32, torch.int32, 0, grid=(1,), {opts})"
                + "".join(f", {w}" for w in warm_rl) + "]"]
    elif split > 1:
        total = nb * m * n
        launch += [f"ws = torch.empty({split * total}, dtype=torch.float32, device={out_arg.pointer}.device)",
                   f"tt_contraction[grid]({call_args}, ws, {opts})",
                   f"tt_splitk[({cdiv(total, SPLITK_BLOCK)},)]({call_args}, ws, num_warps=4, num_stages=1)"]
        pre += [f"return [tt_contraction.warmup({call_args}, torch.float32, grid=(1,), {opts}),",
                f"        tt_splitk.warmup({call_args}, torch.float32, grid=(1,), num_warps=4, num_stages=1)"
                + "".join(f", {w}" for w in warm_rl) + "]"]
        kernels.append(_splitk_kernel(plan, args, pointers, storage, ranges, split, params))
        names.append("tt_splitk")
    else:
        launch += [f"tt_contraction[grid]({call_args}, {opts})"]
        pre += [f"return [tt_contraction.warmup({call_args}, grid=(1,), {opts})" + "".join(f", {w}" for w in warm_rl)
                + "]"]
    helpers = ((NUM_SMS_HELPER if c["PERSISTENT"] else []) + (ALLOCATOR_HELPER if tma else [])
               + (WAVE_HELPER if tail > 1 or stream else []))
    text = module_text(plan, c, kernels, launch, pre, args, helpers)
    return KernelSource(text, tuple(a.name for a in args), tuple(a.dtype for a in args), tuple(names), c)


def _epilogue(plan: ContractionPlan, pointers: dict[str, str], storage: dict[str, str], ranges: dict,
              shapes: dict, out_arg: Any, bm: int, bn: int, m: int, n: int, even_m: bool, even_n: bool,
              halves: int, tma_store: bool) -> list[str]:
    """The epilogue on the accumulator, in `halves` column halves (fewer live registers)."""
    lines: list[str] = []
    accs = ["acc"]
    width = bn // halves
    if halves == 2:
        lines += [f"acc_h0, acc_h1 = tl.split(tl.permute(tl.reshape(acc, ({bm}, 2, {width})), (0, 2, 1)))"]
        accs = ["acc_h0", "acc_h1"]
    out_t = TL_TYPES[out_arg.dtype]
    for h, acc in enumerate(accs):
        suffix = f"_h{h}" if halves == 2 else ""
        names = {**names_of(plan.batch), **names_of(plan.m)}
        if halves == 2:
            lines += [f"rn{suffix} = pid_n * {bn} + {h * width} + tl.arange(0, {width})",
                      f"rn_in{suffix} = {f'rn{suffix}' if even_n else f'rn{suffix} % {n}'}"]
            lines += decompose(f"rn_in{suffix}", plan.n, "[None, :]", suffix)
            names.update(names_of(plan.n, suffix))
        else:
            names.update(names_of(plan.n))
        ee = Emitter(names, pointers, ranges=ranges, known={ACC: acc}, storage=storage, shapes=shapes,
                     prefix=f"te{h}_")
        val = ee.value(plan.epilogue)
        if val == acc:
            val = ee.emit(acc)
        if tma_store:
            lines += ee.lines + [f"c_desc.store([pid_m * {bm}, pid_n * {bn} + {h * width}], {val}.to({out_t}))"]
            continue
        rn = f"rn{suffix}"
        store_mask = [p for p, even in ((f"(rm < {m})[:, None]", even_m), (f"({rn} < {n})[None, :]", even_n))
                      if not even]
        mask_arg = f", mask={' & '.join(store_mask)}" if store_mask else ""
        off = ee.offset(TensorRead(plan.output, plan.out_index))
        lines += ee.lines + [f"tl.store({out_arg.pointer} + ({off}), {val}.to({out_t}){mask_arg})"]
    return lines


def _splitk_kernel(plan: ContractionPlan, args: list, pointers: dict[str, str], storage: dict[str, str],
                   ranges: dict, split: int, params: str) -> str:
    nb, m, n, _ = plan.sizes
    total = nb * m * n
    even = total % SPLITK_BLOCK == 0
    body = ["pid = tl.program_id(0)",
            f"e = pid * {SPLITK_BLOCK} + tl.arange(0, {SPLITK_BLOCK})",
            f"e_in = {'e' if even else f'e % {total}'}",
            "acc = tl.load(p_ws + e_in)",
            f"for s in tl.static_range(1, {split}):",
            f"    acc += tl.load(p_ws + s * {total} + e_in)",
            f"pid_b = e_in // {m * n}",
            f"rm_in = (e_in // {n}) % {m}",
            f"rn_in = e_in % {n}"]
    body += decompose("pid_b", plan.batch) + decompose("rm_in", plan.m) + decompose("rn_in", plan.n)
    ee = Emitter({**names_of(plan.batch), **names_of(plan.m), **names_of(plan.n)}, pointers, ranges=ranges,
                 known={ACC: "acc"}, storage=storage, prefix="te")
    val = ee.value(plan.epilogue)
    off = ee.offset(TensorRead(plan.output, plan.out_index))
    out = args[-1]
    mask = "" if even else f", mask=e < {total}"
    body += ee.lines + [f"tl.store({out.pointer} + ({off}), {val}.to({TL_TYPES[out.dtype]}){mask})"]
    return "@triton.jit\n" + f"def tt_splitk({params}):\n" + "\n".join(indent(body, 1))
