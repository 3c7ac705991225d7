"""Flash-attention kernels: an online softmax over key blocks, both products on `tl.dot`.

One program takes BLOCK_M queries of one batch index (and, with SPLIT_KV > 1, one share
of the keys). It keeps its query tile, a float32 accumulator of BLOCK_M x Dv, the running
row max and the running row sum, and loops over the keys in BLOCK_N blocks: scores
`q @ k^T` on `tl.dot` in float32, the graph's logit expression on them (scale, masks
loaded per block, causal select), the running max updated, the accumulator rescaled by
`exp(old max - new max)`, and the weights (rounded to the graph's weight type, as the
graph rounds its probabilities) multiplied with the value block on `tl.dot`. The
exponentials are `exp2` with log2(e) folded into the exponent's scale. A fully masked row
keeps a max of -inf: it is treated as 0 while exponentiating, so its weights are 0.

Key blocks above a causal diagonal are skipped. With MASK_SPLIT, blocks wholly below it
run a loop without the causal condition and without key bounds, the rest (the diagonal
and a partial last block) a loop with them; a non-causal graph always loops over the
full blocks first and the partial last block apart. Rows past the queries, keys past
the keys and columns past Dv are wrapped into range (their results are dropped or get
a -inf logit), the head dimension is zero-padded to a power of two.

With TMA, the q, k and v tiles come through device-side tensor descriptors (Hopper's
tensor memory accelerator) instead of pointer arithmetic.

With SCORES_AHEAD, the loop over whole key blocks computes the scores one block ahead:
each step issues `q @ k^T` of the next block before the softmax and `p @ v` of the
current one (which do not depend on it), so that the tensor cores can work while the
exponentials are computed (the overlap FlashAttention-3 gets within a warpgroup).

SPLIT_KV > 1 divides the keys among programs (flash decoding: a decode step has one
query per head, too few programs to fill the GPU); each writes its float32 accumulator,
max and sum to a workspace, and a second kernel combines them and applies the output
expression. REVERSE_M launches the query blocks with the most keys first (causal).

Example:
    >>> from tensortune.te import workloads
    >>> from tensortune.backends.triton.patterns import analyze
    >>> plan = analyze(workloads.attention(1, 2, 32, 32, 16, causal=True).output)
    >>> src = generate_attention(plan, {"BLOCK_M": 16, "BLOCK_N": 16}, GenOptions())
    >>> src.kernels, src.text.count("tl.dot(")
    (('tt_attention',), 4)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ...te.dtype import is_float
from ...te.expr import Cast, Const, TensorRead
from ...te.visit import variables
from .exprgen import TL_TYPES, Emitter, literal
from .gen_contraction import underlying_type
from .patterns import ACC
from .patterns_attention import ROWSUM, SCORE, AttentionPlan
from .source import (ALLOCATOR_HELPER, CodegenError, GenOptions, KernelSource, cdiv, decompose, indent, kernel_args,
                     module_text, names_of, ranges_of)

LOG2E = 1.4426950408889634
NEG_INF = '-float("inf")'
DEFAULTS = {"BLOCK_M": 64, "BLOCK_N": 64, "MASK_SPLIT": True, "SPLIT_KV": 1, "REVERSE_M": False, "TMA": False,
            "SCORES_AHEAD": False, "num_warps": 4, "num_stages": 2}


def pow2_at_least(x: int, low: int = 16) -> int:
    p = low
    while p < x:
        p *= 2
    return p


def dot_types(plan: AttentionPlan, options: GenOptions) -> tuple[str, str]:
    """The operand types of the scores product and of the weights-times-values product."""
    storage = {a.name: a.dtype for a in kernel_args(plan, options)}
    tq, tk = underlying_type(plan.q_factor, options, storage), underlying_type(plan.k_factor, options, storage)
    scores = tq if tq == tk and tq in ("float16", "bfloat16") else "float32"
    tp = options.half if plan.p_dtype == "float16" else plan.p_dtype
    tv = underlying_type(plan.v_factor, options, storage)
    values = tp if tp == tv and tp in ("float16", "bfloat16") else "float32"
    return scores, values


def tma_reads(plan: AttentionPlan, options: GenOptions) -> dict[str, TensorRead] | None:
    """The reads of q, k and v when the tensor memory accelerator can load their tiles:
    plain reads `x[batch..., row, col]` (row the query or key, col the head or value
    column) stored in their product's type, with 16-byte rows."""
    scores, values = dot_types(plan, options)
    if options.interpret and "bfloat16" in (scores, values):
        return None
    storage = {a.name: a.dtype for a in kernel_args(plan, options)}
    batch = {a.var for a in plan.batch}
    found = {}
    for name, factor, row, col, dtype in (("q", plan.q_factor, plan.query, plan.head, scores),
                                          ("k", plan.k_factor, plan.key, plan.head, scores),
                                          ("v", plan.v_factor, plan.key, plan.value, values)):
        x = factor
        while isinstance(x, Cast) and is_float(x.dtype):
            x = x.value
        if not isinstance(x, TensorRead) or x.tensor.op is not None or storage[x.tensor.name] != dtype:
            return None
        if tuple(x.indices[-2:]) != (row.var, col.var) or any(not variables(i) <= batch for i in x.indices[:-2]):
            return None
        if x.tensor.shape[-1] * (4 if dtype == "float32" else 2) % 16:
            return None
        found[name] = x
    return found


def _config(config: Mapping[str, Any]) -> dict[str, Any]:
    unknown = set(config) - set(DEFAULTS)
    if unknown:
        raise CodegenError(f"unknown attention parameter(s) {sorted(unknown)}; known: {sorted(DEFAULTS)}")
    c = {**DEFAULTS, **config}
    for name in ("BLOCK_M", "BLOCK_N"):
        v = c[name]
        if not isinstance(v, int) or v < 16 or v & (v - 1):
            raise CodegenError(f"{name}={v!r}: tl.dot needs a power of two of at least 16")
    if not isinstance(c["SPLIT_KV"], int) or c["SPLIT_KV"] < 1:
        raise CodegenError(f"SPLIT_KV={c['SPLIT_KV']!r} must be a positive integer")
    return c


class _Context:
    """What every part of the kernel shares: names, pointers, types, sizes."""

    def __init__(self, plan: AttentionPlan, c: dict[str, Any], options: GenOptions) -> None:
        self.plan, self.c, self.options = plan, c, options
        self.args = kernel_args(plan, options)
        self.pointers = {a.name: a.pointer for a in self.args}
        self.storage = {a.name: a.dtype for a in self.args}
        self.nb, self.sq, self.skv, self.d, self.dv = plan.sizes
        self.bm, self.bn = c["BLOCK_M"], c["BLOCK_N"]
        self.bd, self.be = pow2_at_least(self.d), pow2_at_least(self.dv)
        scores, values = dot_types(plan, options)
        interp_bf16 = options.interpret
        self.qk_type = "float32" if interp_bf16 and scores == "bfloat16" else scores
        self.pv_type = "float32" if interp_bf16 and values == "bfloat16" else values
        self.ranges = ranges_of(plan.batch + (plan.query, plan.key, plan.head, plan.value))
        self.shapes: dict[Any, str] = {a.var: "b" for a in plan.batch}
        self.shapes.update({plan.query.var: "m", plan.key.var: "n", plan.head.var: "k", plan.value.var: "e"})
        self.batch_names = names_of(plan.batch)
        self.scale = plan.exp_scale * LOG2E
        self.tma = tma_reads(plan, options) if c["TMA"] else None
        if c["TMA"] and self.tma is None:
            raise CodegenError("TMA loads need plain reads q[..., i, d], k[..., j, d], v[..., j, e] stored in their "
                               "product's type, with rows of a multiple of 16 bytes")

    def emitter(self, names: dict[Any, str], prefix: str, masks: dict[Any, str] | None = None,
                known: dict[Any, str] | None = None) -> Emitter:
        return Emitter({**self.batch_names, **names}, self.pointers, masks=masks, ranges=self.ranges,
                       known=known, storage=self.storage, shapes=self.shapes, prefix=prefix)

    def precision(self, dtype: str) -> str:
        if dtype != "float32":
            return ""
        return f', input_precision="{"tf32" if self.options.allow_tf32 else "ieee"}"'


def generate_attention(plan: AttentionPlan, config: Mapping[str, Any], options: GenOptions) -> KernelSource:
    c = _config(config)
    x = _Context(plan, c, options)
    split = c["SPLIT_KV"]
    if x.nb > 65535:
        raise CodegenError(f"{x.nb} batch entries exceed the launch grid's second dimension")
    if x.bd > 256 or x.be > 256:
        raise CodegenError(f"head dimensions {x.d} and {x.dv} exceed the 256 this kernel keeps in registers")
    blocks = cdiv(x.skv, x.bn)
    if split > blocks:
        raise CodegenError(f"SPLIT_KV={split} exceeds the {blocks} key blocks of BLOCK_N={x.bn}")
    grid_m = cdiv(x.sq, x.bm)
    body = _prologue(x, grid_m) + _loops(x)
    out = x.args[-1]
    params = [a.pointer for a in x.args]
    if split > 1:
        body += _store_partial(x)
        params += ["p_ws_acc", "p_ws_row"]
    else:
        body += _finish(x, "acc", "l_i", "m_i")
    kernels = ["@triton.jit\n" + f"def tt_attention({', '.join(params)}):\n" + "\n".join(indent(body, 1))]
    names = ["tt_attention"]
    opts = f"num_warps={c['num_warps']}, num_stages={c['num_stages']}"
    call = ", ".join(a.pointer for a in x.args)
    allocate = [f"triton.set_allocator(_scratch_allocator({out.pointer}))"] if x.tma is not None else []
    if split > 1:
        rows = split * x.nb * x.sq
        launch = allocate + [
                  f"ws_acc = torch.empty({rows * x.be}, dtype=torch.float32, device={out.pointer}.device)",
                  f"ws_row = torch.empty({rows * 2}, dtype=torch.float32, device={out.pointer}.device)",
                  f"tt_attention[({grid_m}, {x.nb}, {split})]({call}, ws_acc, ws_row, {opts})",
                  f"tt_attention_combine[({grid_m}, {x.nb})]({call}, ws_acc, ws_row, num_warps=4, num_stages=1)"]
        pre = [f"return [tt_attention.warmup({call}, torch.float32, torch.float32, grid=(1,), {opts}),",
               f"        tt_attention_combine.warmup({call}, torch.float32, torch.float32, grid=(1,), num_warps=4, "
               "num_stages=1)]"]
        kernels.append(_combine_kernel(x, ", ".join(params)))
        names.append("tt_attention_combine")
    else:
        launch = allocate + [f"tt_attention[({grid_m}, {x.nb})]({call}, {opts})"]
        pre = [f"return [tt_attention.warmup({call}, grid=(1,), {opts})]"]
    text = module_text(plan, c, kernels, launch, pre, x.args, ALLOCATOR_HELPER if x.tma is not None else ())
    return KernelSource(text, tuple(a.name for a in x.args), tuple(a.dtype for a in x.args), tuple(names), c)


def _rows(x: _Context, grid_m: int, reverse: bool) -> list[str]:
    """Which queries: rm (unwrapped), m0 (wrapped into range, [BLOCK_M, 1])."""
    pid = f"{grid_m - 1} - tl.program_id(0)" if reverse and grid_m > 1 else "tl.program_id(0)"
    return [f"pid_m = {pid}",
            "pid_b = tl.program_id(1)",
            *decompose("pid_b", x.plan.batch),
            f"rm = pid_m * {x.bm} + tl.arange(0, {x.bm})",
            f"m0 = ({'rm' if x.sq % x.bm == 0 else f'rm % {x.sq}'})[:, None]"]


def _prologue(x: _Context, grid_m: int) -> list[str]:
    plan = x.plan
    lines = _rows(x, grid_m, x.c["REVERSE_M"])
    lines += [f"rd = tl.arange(0, {x.bd})"]
    masks: dict[Any, str] = {}
    if x.bd != x.d:
        lines += [f"d_q = (rd < {x.d})[None, :]", f"d_k = (rd < {x.d})[:, None]"]
        masks = {plan.head.var: "d_q"}
    lines += ["dq = rd[None, :]", "dk = rd[:, None]"]
    if x.tma is not None:
        lines += _descriptors(x)
        q = f"q_desc.load([q_row + pid_m * {x.bm}, 0])"
    else:
        em = x.emitter({plan.query.var: "m0", plan.head.var: "dq"}, "tq", masks)
        q = em.native(plan.q_factor, x.qk_type)
        lines += em.lines
        if x.bd != x.d:
            lines += [f"{q} = tl.where(d_q, {q}, 0)"]
    lines += [f"q = {q}",
              f"re = tl.arange(0, {x.be})",
              f"e_v = ({'re' if x.be == x.dv else f're % {x.dv}'})[None, :]",
              f"m_i = tl.full([{x.bm}], {NEG_INF}, tl.float32)",
              f"l_i = tl.zeros([{x.bm}], dtype=tl.float32)",
              f"acc = tl.zeros([{x.bm}, {x.be}], dtype=tl.float32)"]
    return lines


def _descriptors(x: _Context) -> list[str]:
    """Tensor descriptors over q, k, v seen as [rows, columns], and each one's first row
    for this program's batch index (rows past a head's end belong to the next head or are
    zero-filled: their results are dropped or get -inf logits)."""
    assert x.tma is not None
    lines = []
    for name, block_rows, cols in (("q", x.bm, x.bd), ("k", x.bn, x.bd), ("v", x.bn, x.be)):
        read = x.tma[name]
        t = read.tensor
        width = t.shape[-1]
        rows = math.prod(t.shape) // width
        em = x.emitter({}, f"d{name}")
        off = em.offset(TensorRead(t, tuple(read.indices[:-2]) + (Const(0, "int32"), Const(0, "int32"))))
        lines += em.lines
        lines += [f"{name}_desc = tl.make_tensor_descriptor({x.pointers[t.name]}, shape=[{rows}, {width}], "
                  f"strides=[{width}, 1], block_shape=[{block_rows}, {cols}])",
                  f"{name}_row = ({off}) // {width}"]
    return lines


def _bounds(x: _Context) -> tuple[list[str], str, str, str]:
    """(lines, lo, full_hi, hi): this program's keys are [lo, hi); the blocks in [lo,
    full_hi) need neither the causal condition nor key bounds. Constants where they are."""
    plan, bm, bn, skv = x.plan, x.bm, x.bn, x.skv
    split = x.c["SPLIT_KV"]
    full = (skv // bn) * bn
    if plan.causal is None and split == 1:
        return [], "0", str(full), str(skv)
    lines: list[str] = []
    if plan.causal is not None:
        last = f"tl.minimum((pid_m + 1) * {bm}, {x.sq})"
        lines += [f"hi = tl.maximum(tl.minimum({last} + {plan.causal}, {skv}), 0)"]
    else:
        lines += [f"hi = pid_m * 0 + {skv}"]
    if split > 1:
        chunk = cdiv(cdiv(skv, bn), split) * bn
        lines += ["pid_s = tl.program_id(2)", f"lo = pid_s * {chunk}", f"hi = tl.minimum(hi, lo + {chunk})"]
    else:
        lines += ["lo = pid_m * 0"]
    if plan.causal is not None and x.c["MASK_SPLIT"]:
        lines += [f"full_hi = tl.minimum(tl.maximum(pid_m * {bm} + {plan.causal + 1}, 0) // {bn} * {bn}, {full})"]
    elif plan.causal is not None:
        lines += ["full_hi = lo"]
    else:
        lines += [f"full_hi = lo * 0 + {full}"]
    lines += ["full_hi = tl.minimum(tl.maximum(full_hi, lo), hi)"]
    return lines, "lo", "full_hi", "hi"


def _loops(x: _Context) -> list[str]:
    lines, lo, full_hi, hi = _bounds(x)
    if full_hi != lo:
        if x.c["SCORES_AHEAD"] and x.skv >= x.bn:
            lines += _ahead_loop(x, lo, full_hi)
        else:
            lines += [f"for start in range({lo}, {full_hi}, {x.bn}):",
                      *indent(_key_block(x, masked=False, prefix="f"), 1)]
    if x.plan.causal is not None or x.skv % x.bn != 0:
        lines += [f"for start in range({full_hi}, {hi}, {x.bn}):",
                  *indent(_key_block(x, masked=True, prefix="g"), 1)]
    return lines


def _key_block(x: _Context, masked: bool, prefix: str) -> list[str]:
    """One BLOCK_N step of the online softmax."""
    lines = _block_index(x, "start", "", masked)
    lines += _scores(x, "start", "", prefix, "s")
    return lines + _update(x, "start", "", prefix, "s", masked)


def _ahead_loop(x: _Context, lo: str, full_hi: str) -> list[str]:
    """The loop over whole key blocks with the scores one block ahead: each step issues
    `q @ k^T` of the next block before the softmax and `p @ v` of the current one, which
    do not depend on it, so the tensor cores and the exponentials can overlap."""
    full = (x.skv // x.bn) * x.bn
    # the first block, in range even when this program has no whole block (its scores are then unused)
    lines = [f"start_p = {min(int(lo), full - x.bn)}" if lo.isdigit() else f"start_p = tl.minimum({lo}, {full - x.bn})"]
    lines += _block_index(x, "start_p", "_p", False) + _scores(x, "start_p", "_p", "pk", "s_cur")
    body = _block_index(x, "start", "_a", False) + _scores(x, "start", "_a", "ak", "s_nxt")
    body += [f"prev = start - {x.bn}"] + _block_index(x, "prev", "_b", False)
    body += _update(x, "prev", "_b", "a", "s_cur", False)
    body += ["s_cur = s_nxt"]
    lines += [f"for start in range({lo} + {x.bn}, {full_hi}, {x.bn}):", *indent(body, 1)]
    last = [f"last = {full_hi} - {x.bn}"] + _block_index(x, "last", "_t", False)
    last += _update(x, "last", "_t", "z", "s_cur", False)
    return lines + [f"if {full_hi} > {lo}:", *indent(last, 1)]


def _block_index(x: _Context, start: str, sfx: str, masked: bool) -> list[str]:
    """The keys of the block at `start`: rn (unwrapped), and the key index of the k, score
    and v tiles (n_k, n_s, n_v, with suffix `sfx`)."""
    wrap = masked and x.skv % x.bn != 0
    rn = f"rn{sfx}"
    return [f"{start} = tl.multiple_of({start}, {x.bn})", f"{rn} = {start} + tl.arange(0, {x.bn})",
            f"{rn}_in = {rn} % {x.skv}" if wrap else f"{rn}_in = {rn}",
            f"n_k{sfx} = {rn}_in[None, :]", f"n_s{sfx} = {rn}_in[None, :]", f"n_v{sfx} = {rn}_in[:, None]"]


def _scores(x: _Context, start: str, sfx: str, prefix: str, out: str) -> list[str]:
    """`out = q @ k^T` of the block at `start` (its key indices have suffix `sfx`)."""
    plan = x.plan
    lines: list[str] = []
    if x.tma is not None:
        kt = f"tl.trans(k_desc.load([k_row + {start}, 0]))"
    else:
        ek = x.emitter({plan.key.var: f"n_k{sfx}", plan.head.var: "dk"}, f"{prefix}k",
                       {plan.head.var: "d_k"} if x.bd != x.d else None)
        kt = ek.native(plan.k_factor, x.qk_type)
        lines += ek.lines
        if x.bd != x.d:
            lines += [f"{kt} = tl.where(d_k, {kt}, 0)"]
    return lines + [f"{out} = tl.dot(q, {kt}{x.precision(x.qk_type)})"]


def _update(x: _Context, start: str, sfx: str, prefix: str, s: str, masked: bool) -> list[str]:
    """The online-softmax step of the block at `start` (key indices with suffix `sfx`), whose
    scores are `s`."""
    plan = x.plan
    wrap = masked and x.skv % x.bn != 0
    logits = plan.logits if masked else plan.logits_inside
    el = x.emitter({plan.query.var: "m0", plan.key.var: f"n_s{sfx}", SCORE: s}, f"{prefix}l")
    t = el.value(logits)
    lines = el.lines + [f"t = tl.broadcast_to({t}, ({x.bm}, {x.bn}))"]
    if wrap:
        lines += [f"t = tl.where((rn{sfx} < {x.skv})[None, :], t, {NEG_INF})"]
    if x.tma is not None:
        v_lines, v = [], f"v_desc.load([v_row + {start}, 0])"
    else:
        ev = x.emitter({plan.key.var: f"n_v{sfx}", plan.value.var: "e_v"}, f"{prefix}v")
        v = ev.native(plan.v_factor, x.pv_type)
        v_lines = ev.lines
    scale = literal(x.scale)
    return lines + ["m_new = tl.maximum(m_i, tl.max(t, 1))",
                    "m_use = tl.where(m_new == -float(\"inf\"), 0.0, m_new)",
                    f"alpha = tl.math.exp2((m_i - m_use) * {scale})",
                    f"p = tl.math.exp2(t * {scale} - (m_use * {scale})[:, None])",
                    "l_i = l_i * alpha + tl.sum(p, 1)",
                    "acc = acc * alpha[:, None]",
                    *v_lines,
                    f"acc = tl.dot(p.to({TL_TYPES[x.pv_type]}), {v}, acc{x.precision(x.pv_type)})",
                    "m_i = m_new"]


def _finish(x: _Context, acc: str, l_name: str, m_name: str) -> list[str]:
    """The normalised accumulator through the output expression, stored."""
    plan = x.plan
    out = x.args[-1]
    lines = [f"l2 = {l_name}[:, None]", "e_o = e_v"]
    ew = x.emitter({plan.query.var: "m0"}, "tw", known={ROWSUM: "l2"})
    w = ew.value(plan.weight)
    lines += ew.lines
    lines += [f"o = {acc}" if isinstance(plan.weight, Const) and float(plan.weight.value) == 1.0
              else f"o = {acc} * {w}"]
    if not plan.row_guarded:
        lines += [f"o = tl.where(({m_name} == -float(\"inf\"))[:, None], float(\"nan\"), o)"]
    ee = x.emitter({plan.query.var: "m0", plan.value.var: "e_o"}, "te", known={ROWSUM: "l2", ACC: "o"})
    val = ee.value(plan.epilogue)
    val = ee.emit(f"tl.broadcast_to({val}, ({x.bm}, {x.be}))")
    off = ee.offset(TensorRead(plan.output, plan.out_index))
    masks = [m for m, even in ((f"(rm < {x.sq})[:, None]", x.sq % x.bm == 0), (f"(re < {x.dv})[None, :]",
                                                                             x.be == x.dv)) if not even]
    mask = f", mask={' & '.join(masks)}" if masks else ""
    lines += ee.lines + [f"tl.store({out.pointer} + ({off}), {val}.to({TL_TYPES[out.dtype]}){mask})"]
    return lines


def _workspace_rows(x: _Context, split: str) -> list[str]:
    """Flat workspace row of (split, batch, query) for each query row of the tile."""
    return [f"ws_r = ({split} * {x.nb} + pid_b) * {x.sq} + (rm % {x.sq})"]


def _store_partial(x: _Context) -> list[str]:
    rows_ok = "" if x.sq % x.bm == 0 else f", mask=rm < {x.sq}"
    tile_ok = "" if x.sq % x.bm == 0 else f", mask=(rm < {x.sq})[:, None]"
    return _workspace_rows(x, "pid_s") + [
        f"tl.store(p_ws_acc + ws_r[:, None] * {x.be} + re[None, :], acc{tile_ok})",
        f"tl.store(p_ws_row + ws_r * 2, m_i{rows_ok})",
        f"tl.store(p_ws_row + ws_r * 2 + 1, l_i{rows_ok})"]


def _combine_kernel(x: _Context, params: str) -> str:
    """Merges the SPLIT_KV partial results of a query tile and finishes it."""
    grid_m = cdiv(x.sq, x.bm)
    lines = _rows(x, grid_m, False)
    scale = literal(x.scale)
    lines += [f"re = tl.arange(0, {x.be})",
              f"e_v = ({'re' if x.be == x.dv else f're % {x.dv}'})[None, :]",
              f"m_i = tl.full([{x.bm}], {NEG_INF}, tl.float32)"]
    lines += [f"for s in tl.static_range({x.c['SPLIT_KV']}):",
              *indent(_workspace_rows(x, "s") + ["m_i = tl.maximum(m_i, tl.load(p_ws_row + ws_r * 2))"], 1)]
    lines += ["m_use = tl.where(m_i == -float(\"inf\"), 0.0, m_i)",
              f"l_i = tl.zeros([{x.bm}], dtype=tl.float32)",
              f"acc = tl.zeros([{x.bm}, {x.be}], dtype=tl.float32)",
              f"for s in tl.static_range({x.c['SPLIT_KV']}):",
              *indent(_workspace_rows(x, "s") + [
                  f"w = tl.math.exp2((tl.load(p_ws_row + ws_r * 2) - m_use) * {scale})",
                  "l_i += tl.load(p_ws_row + ws_r * 2 + 1) * w",
                  f"acc += tl.load(p_ws_acc + ws_r[:, None] * {x.be} + re[None, :]) * w[:, None]"], 1)]
    lines += _finish(x, "acc", "l_i", "m_i")
    return "@triton.jit\n" + f"def tt_attention_combine({params}):\n" + "\n".join(indent(lines, 1))

