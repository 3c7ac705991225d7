"""GPU sketches: the tuning space of each kernel pattern, its constraints and good first points.

A contraction is tiled in BLOCK_M x BLOCK_N (each at most the next power of two of its
extent), with a BLOCK_K reduction step, GROUP_M grouped launch order, EPILOGUE_SPLIT
(the epilogue in two column halves), num_warps and num_stages; SPLIT_K joins when the
tiles alone cannot fill the GPU's multiprocessors and K is long, PERSISTENT when there are
more tiles than multiprocessors, TMA/TMA_STORE when both factors are plain row-major
reads. Constraints keep the pipelined tiles within shared memory and the accumulator
within registers. A product of a few waves at most is seeded first with a tile that
makes one mostly full wave without split-K (counting the programs a multiprocessor
holds), and a short K loop with the persistent TMA kernel four stages deep. A
convolution may copy its NCHW/KCRS inputs channels-last first (RELAYOUT), so its
gathers load along the reduction. A rows kernel chooses BLOCK_R rows
per program and a BLOCK_C column chunk (one pass when it covers the row); an elementwise
kernel its BLOCK. Attention chooses BLOCK_M queries and BLOCK_N keys per step, warps and
pipeline stages, SPLIT_KV (keys shared among programs when the queries alone cannot
fill the GPU, as in a decode step), TMA (tiles loaded through tensor descriptors),
SCORES_AHEAD (the next key block's scores issued before the current softmax) and,
when causal, MASK_SPLIT (blocks below the diagonal looped without the mask) and
REVERSE_M (the longest query blocks first). A contraction whose last wave of tiles would
leave most multiprocessors idle may split that wave's tiles along K (TAIL_SPLIT, seeded
with the split that fills it) or, where a tiling's last wave is under 60% full, share the
last tiles' K steps out over every program (STREAM_K with SK_PER_SM, `streamk.py`; searched,
not seeded: SEED_STREAM_K). A contraction of at most 8 rows also offers GEMV, the
matrix-vector kernel, seeded first (`sketch_gemv.py`). A depthwise or grouped convolution chooses BLOCK_P
pixels and BLOCK_C channels per program, seeded apart for channels-first and
channels-last outputs.
`seeds` are rules-of-thumb points
measured first, so the search starts from sensible kernels (as Ansor's sketch rules
start from sensible structures).

Example:
    >>> from tensortune.te import workloads
    >>> from tensortune.backends.triton.patterns import analyze
    >>> s = sketch(analyze(workloads.matmul(256, 256, 256, "float16").output))
    >>> s.space.names[:3], len(s.seeds) > 0
    (('BLOCK_M', 'BLOCK_N', 'BLOCK_K'), True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...space import Categorical, Config, Ordinal, PowerOfTwo, Space
from .patterns import ContractionPlan, ElementwisePlan, GpuPlan, RowsPlan
from .patterns_attention import AttentionPlan
from .patterns_conv import GroupedConvPlan
from .sketch_gemv import GEMV_ONLY, gemv_applies, gemv_seeds, with_gemv
from . import streamk
from .source import GenOptions

H100_SMS = 132
SHARED_BYTES = 227 * 1024
HALF_BYTES = 2


def _pow2_at_least(x: int) -> int:
    p = 1
    while p < x:
        p *= 2
    return p


@dataclass(frozen=True)
class Sketch:
    """A plan's space and the points to measure first."""

    plan: GpuPlan
    space: Space
    seeds: tuple[Config, ...]


def sketch(plan: GpuPlan, options: GenOptions | None = None, sms: int = H100_SMS) -> Sketch:
    options = options or GenOptions()
    if isinstance(plan, ContractionPlan):
        return _contraction(plan, options, sms)
    if isinstance(plan, AttentionPlan):
        return _attention(plan, options, sms)
    if isinstance(plan, GroupedConvPlan):
        return _grouped_conv(plan)
    if isinstance(plan, RowsPlan):
        return _rows(plan)
    if isinstance(plan, ElementwisePlan):
        return _elementwise(plan)
    raise TypeError(f"no sketch for {type(plan).__name__}")


def _contraction(plan: ContractionPlan, options: GenOptions, sms: int) -> Sketch:
    from .gen_contraction import dot_type, relayout_targets, tma_operands

    nb, m, n, k = plan.sizes
    k_inner = 1
    for a in plan.k:
        k_inner *= a.extent
    item = 4 if dot_type(plan, options) == "float32" else HALF_BYTES
    top_m, top_n, top_k = (min(256, max(16, _pow2_at_least(x))) for x in (m, n, k_inner))
    top_k = min(top_k, 128)
    tiles_128 = nb * -(-m // 128) * -(-n // 128)
    split = [1]
    if tiles_128 < sms and k >= 1024:
        split = [1, 2, 4, 8, 16]
    tails = [1, 2, 3, 4, 6, 8] if nb == 1 and tiles_128 >= sms // 2 and k >= 1024 else [1]
    stream = streamk.offered(nb, m, n, k_inner, sms)
    params = [
        PowerOfTwo("BLOCK_M", 16, top_m),
        PowerOfTwo("BLOCK_N", 16, top_n),
        PowerOfTwo("BLOCK_K", 16, top_k),
        Ordinal("GROUP_M", [1, 4, 8, 16]),
        Ordinal("SPLIT_K", split),
        Categorical("PERSISTENT", [False, True] if tiles_128 >= sms // 2 or stream else [False]),
        Categorical("TMA", [False, True] if tma_operands(plan, options) is not None else [False]),
        Categorical("TMA_STORE", [False, True] if _tma_store_ok(plan, options) else [False]),
        Ordinal("EPILOGUE_SPLIT", [1, 2]),
        Ordinal("num_warps", [2, 4, 8]),
        Ordinal("num_stages", [2, 3, 4, 5]),
    ]
    if tails != [1]:
        params.append(Ordinal("TAIL_SPLIT", tails))
    if stream:
        params += [Ordinal("STREAM_K", list(streamk.OPTIONS)), Ordinal("SK_PER_SM", [1, 2])]
    relayouts = [True, False] if relayout_targets(plan) else [False]
    if relayouts != [False]:  # a parameter only where it can change something
        params.append(Categorical("RELAYOUT", relayouts))
    constraints = [
        f"(BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N) * {item} * num_stages + TMA_STORE * BLOCK_M * BLOCK_N * {item} "
        f"// EPILOGUE_SPLIT <= {SHARED_BYTES}",
        "TMA or not TMA_STORE",
        "BLOCK_M * BLOCK_N <= num_warps * 32 * 128",
        "BLOCK_M * BLOCK_N >= num_warps * 32 * 4",
        "SPLIT_K == 1 or not PERSISTENT",
        "SPLIT_K == 1 or not TMA_STORE",  # split-K: a second kernel stores the output, from float32 partial sums
        "EPILOGUE_SPLIT == 1 or (BLOCK_N >= 32 and SPLIT_K == 1)",
        f"SPLIT_K * BLOCK_K <= {max(16, k)}",
    ]
    if tails != [1]:
        constraints += ["TAIL_SPLIT == 1 or (SPLIT_K == 1 and not TMA_STORE)",
                        f"TAIL_SPLIT * BLOCK_K <= {k}"]
    if stream:
        constraints += streamk.constraints(item, SHARED_BYTES, [p.name for p in params])
    gemv = gemv_applies(plan)
    if gemv:  # a few rows: the matrix-vector kernel competes (sketch_gemv.py)
        params, constraints = with_gemv(plan, params, constraints, item)
    space = Space(params, constraints=constraints)
    tiles = ((128, 256, 64, 8, 3), (128, 128, 64, 4, 4), (128, 256, 64, 8, 4), (128, 128, 64, 8, 3),
             (256, 128, 64, 8, 3),
             (64, 128, 64, 4, 4), (128, 64, 64, 4, 4), (64, 64, 64, 4, 3), (64, 32, 32, 4, 4), (32, 32, 32, 2, 3),
             (16, 16, 16, 2, 2))
    variants = ((False, False, False), (False, True, False), (True, True, False), (True, True, True),
                (True, False, False), (False, True, True))  # (PERSISTENT, TMA, TMA_STORE)
    order = sorted(((t, v) for t in range(len(tiles)) for v in range(len(variants))), key=lambda p: (sum(p), p))
    seeds: list[Config] = []
    for relayout, (t, v) in ((r, o) for o in order for r in relayouts):
        bm, bn, bk, w, s = tiles[t]
        persistent, tma, store = variants[v]
        cfg = {"BLOCK_M": min(bm, top_m), "BLOCK_N": min(bn, top_n), "BLOCK_K": min(bk, top_k), "GROUP_M": 8,
               "SPLIT_K": 1, "PERSISTENT": persistent, "TMA": tma, "TMA_STORE": store,
               "EPILOGUE_SPLIT": 2 if store else 1, "num_warps": w, "num_stages": s}
        if "RELAYOUT" in space.names:
            cfg["RELAYOUT"] = relayout
        if "TAIL_SPLIT" in space.names:
            cfg["TAIL_SPLIT"] = 1
        if stream:
            cfg.update(STREAM_K=0, SK_PER_SM=1)
        if split != [1]:
            want = max(1, min(16, sms // max(1, nb * -(-m // cfg["BLOCK_M"]) * -(-n // cfg["BLOCK_N"]))))
            cfg["SPLIT_K"] = max(v for v in split if v <= want)
            cfg["PERSISTENT"] = False if cfg["SPLIT_K"] > 1 else persistent
            cfg["EPILOGUE_SPLIT"] = 1 if cfg["SPLIT_K"] > 1 else cfg["EPILOGUE_SPLIT"]
        _add(space, seeds, cfg)
    if tails != [1]:  # the first tiles again with the last wave split, where it is mostly idle
        tail_seeds: list[Config] = []
        for cfg in seeds[:8]:
            want = _tail_split(cfg, m, n, k_inner, item, sms, tails)
            if want > 1:
                _add(space, tail_seeds, {**cfg, "TAIL_SPLIT": want, "TMA_STORE": False, "EPILOGUE_SPLIT": 1})
        seeds = seeds[:2] + tail_seeds[:4] + seeds[2:]
    first: list[Config] = []
    base = {"GROUP_M": 8, "SPLIT_K": 1, "PERSISTENT": False, "TMA": False, "TMA_STORE": False, "EPILOGUE_SPLIT": 1}
    base.update({name: value for name, value in (("TAIL_SPLIT", 1), ("RELAYOUT", relayouts[0]), ("STREAM_K", 0),
                                                 ("SK_PER_SM", 1)) if name in space.names})
    if k_inner <= 4096:  # a product of a few waves at most: one mostly full wave of whole tiles, no split-K pass
        for bm, bn, bk, w, s in FILL_TILES:
            bm, bn, bk = min(bm, top_m), min(bn, top_n), min(bk, top_k)
            slots = sms * programs_per_sm(bm, bn, bk, w, s, item)
            if 0.75 * slots <= nb * -(-m // bm) * -(-n // bn) <= slots:
                _add(space, first, {**base, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": w,
                                    "num_stages": s})
                break
    if k_inner <= 1024:  # a short K loop: every step in flight, the stores overlapping the next tile
        _add(space, first, {**base, "BLOCK_M": min(128, top_m), "BLOCK_N": min(256, top_n), "BLOCK_K": min(64, top_k),
                            "PERSISTENT": True, "TMA": True, "TMA_STORE": True, "EPILOGUE_SPLIT": 2, "num_warps": 8,
                            "num_stages": 4})
    seeds = first + [c for c in seeds if c not in first]
    if stream and SEED_STREAM_K:  # the last wave balanced by stream-K, right after the first two tilings
        balanced: list[Config] = []
        for cfg in streamk.seeds(base, m, n, k_inner, sms, tma_operands(plan, options) is not None,
                                 (top_m, top_n, top_k)):
            _add(space, balanced, cfg)
        seeds = seeds[:2] + balanced + [c for c in seeds[2:] if c not in balanced]
    if gemv:
        seeds = gemv_seeds(plan, space, item, sms)[:6] + seeds[:4]
    return Sketch(plan, space, tuple(seeds[:10]))


# Stream-K stays in the space but is not seeded: on the H100 it was slower than the best
# seed without it on every shape measured (docs/benchmarks/gpu_kernels.md, 0.32-0.76x cuBLAS
# against 0.79-0.98x), so its seeds would cost a task's first trials.
SEED_STREAM_K = False

# tiles that can make one wave: deep pipelines with one program per SM, or shallow ones with three
FILL_TILES = ((128, 128, 64, 4, 5), (64, 128, 64, 4, 5), (128, 64, 64, 4, 5), (128, 128, 64, 4, 2), (64, 64, 64, 4, 4))


def programs_per_sm(bm: int, bn: int, bk: int, warps: int, stages: int, item: int = HALF_BYTES) -> int:
    """Programs of a tiling one multiprocessor holds, by shared memory and registers (the
    accumulator plus about 40 registers a thread), at most 4."""
    smem = (bm * bk + bk * bn) * item * stages
    regs = warps * 32 * (bm * bn // (warps * 32) + 40)
    return max(1, min(4, SHARED_BYTES // smem, 65536 // regs))


def _tail_split(cfg: Config, m: int, n: int, k_inner: int, item: int, sms: int, tails: list[int]) -> int:
    """The TAIL_SPLIT that fills the last wave of a tiling (1 when that wave is mostly busy, or
    its idle slots are under 5% of the whole kernel's)."""
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    smem = (bm * bk + bk * bn) * item * cfg["num_stages"]
    slots = sms if cfg["PERSISTENT"] else sms * max(1, min(2, SHARED_BYTES // max(1, smem)))
    tiles = -(-m // bm) * -(-n // bn)
    last = tiles % slots
    idle = (slots - last) / slots / -(-tiles // slots)  # the share of the kernel's slot time left idle
    if last == 0 or last > slots // 2 or idle < 0.05:
        return 1
    return max(t for t in tails if t <= max(1, slots // last) and t * bk <= k_inner)


def _tma_store_ok(plan: ContractionPlan, options: GenOptions) -> bool:
    from .gen_contraction import tma_operands

    if tma_operands(plan, options) is None or plan.out_index != (plan.m[0].var, plan.n[0].var):
        return False
    item = 4 if options.storage(plan.output) == "float32" else HALF_BYTES
    return (plan.output.shape[-1] * item) % 16 == 0


def _attention(plan: AttentionPlan, options: GenOptions, sms: int) -> Sketch:
    """FlashAttention-2's blocking: 128-query tiles with 64 or 128 keys per step and 4 to 8
    warps for long sequences, 16-query tiles with the keys split among programs for decoding."""
    from .gen_attention import dot_types, pow2_at_least, tma_reads

    nb, sq, skv, d, dv = plan.sizes
    bd, be = pow2_at_least(d), pow2_at_least(dv)
    item = 2 if dot_types(plan, options)[0] != "float32" else 4
    top_m = min(256, pow2_at_least(sq))
    top_n = min(256, pow2_at_least(skv))
    causal = plan.causal is not None
    key_blocks = -(-skv // 16)
    splits = [1]
    if nb * -(-sq // 64) < sms and skv >= 256:
        splits = [s for s in (1, 2, 4, 8, 16, 32, 64) if s <= key_blocks]
    # long sequences: at least a warpgroup's 64 rows (Hopper's wgmma) and 32 keys per step
    low_m, low_n = (64 if sq >= 512 else 16), (32 if skv >= 512 else 16)
    params = [
        PowerOfTwo("BLOCK_M", low_m, top_m),
        PowerOfTwo("BLOCK_N", low_n, top_n),
        Ordinal("SPLIT_KV", splits),
        Categorical("MASK_SPLIT", [True, False] if causal else [True]),
        Categorical("REVERSE_M", [False, True] if causal and sq > 16 else [False]),
        Categorical("TMA", [False, True] if tma_reads(plan, options) is not None else [False]),
        Categorical("SCORES_AHEAD", [False, True] if skv >= 2 * low_n else [False]),
        Ordinal("num_warps", [2, 4, 8]),
        Ordinal("num_stages", [1, 2, 3, 4, 5]),
    ]
    constraints = [
        f"(BLOCK_M * {bd} + num_stages * BLOCK_N * {bd + be}) * {item} <= {SHARED_BYTES}",
        # the accumulator and the scores (two blocks of them with SCORES_AHEAD) in registers
        f"BLOCK_M * ({be} + BLOCK_N * (1 + SCORES_AHEAD)) <= num_warps * 32 * 192",
        "BLOCK_M * BLOCK_N >= num_warps * 32 * 4",
        "num_warps < 8 or BLOCK_M >= 64",
        f"(SPLIT_KV - 1) * BLOCK_N < {skv}",  # every share of the keys holds a block
    ]
    space = Space(params, constraints=constraints)
    if sq <= 16:
        tiles = ((16, 64, 4, 3), (16, 128, 4, 3), (16, 128, 8, 2), (16, 64, 2, 4), (16, 32, 4, 4), (16, 256, 8, 2))
    elif d <= 64:
        tiles = ((128, 64, 4, 3), (128, 128, 8, 3), (64, 64, 4, 3), (128, 32, 4, 4), (128, 64, 8, 4),
                 (64, 32, 4, 4), (64, 128, 4, 2), (32, 32, 2, 3))
    else:
        tiles = ((128, 64, 8, 3), (128, 64, 4, 2), (128, 128, 8, 2), (64, 64, 4, 3), (128, 32, 4, 3),
                 (64, 32, 4, 4), (64, 128, 4, 2), (32, 32, 2, 3))
    tma = tma_reads(plan, options) is not None
    # the first tiles also with TMA loads and (causal) with the longest query blocks first
    reverse = causal and sq > 16
    variants = [(tiles[0], False, False, False), (tiles[0], tma, False, False), (tiles[0], tma, False, True),
                (tiles[1], False, False, False), (tiles[0], False, reverse, False), (tiles[2], False, False, False),
                (tiles[1], tma, False, False), ((tiles[0][0], 32, 4, 3), tma, False, True)]
    variants += [(t, False, False, False) for t in tiles[3:]]
    seeds: list[Config] = []
    for (bm, bn, w, st), with_tma, reverse, ahead in variants:
        bm, bn = min(bm, top_m), min(bn, top_n)
        programs = nb * -(-sq // bm)
        split = 1
        if splits != [1]:
            want = max(1, sms // max(1, programs))
            split = max(v for v in splits if v <= want and (v - 1) * bn < skv)
        _add(space, seeds, {"BLOCK_M": bm, "BLOCK_N": bn, "SPLIT_KV": split, "MASK_SPLIT": True, "REVERSE_M": reverse,
                            "TMA": with_tma, "SCORES_AHEAD": ahead, "num_warps": w, "num_stages": st})
    return Sketch(plan, space, tuple(seeds[:10]))


def _grouped_conv(plan: GroupedConvPlan) -> Sketch:
    """Channels-last outputs want wide channel blocks (loads along channels), channels-first
    ones long pixel blocks (loads along image rows); both are in the space, seeded apart."""
    pixels, channels, group, _ = plan.sizes
    top_p = min(2048, max(16, _pow2_at_least(pixels)))
    top_c = min(256, _pow2_at_least(channels))
    params = [
        PowerOfTwo("BLOCK_P", min(8, top_p), top_p),
        PowerOfTwo("BLOCK_C", 1, top_c),
        Ordinal("num_warps", [1, 2, 4, 8]),
        Ordinal("num_stages", [1, 2, 3] if group > 1 else [1]),
    ]
    constraints = ["BLOCK_P * BLOCK_C <= num_warps * 32 * 32", "BLOCK_P * BLOCK_C >= num_warps * 32"]
    space = Space(params, constraints=constraints)
    if plan.channels_last:
        tiles = ((32, 64, 4), (16, 128, 4), (64, 64, 8), (64, 32, 4), (128, 32, 8), (16, 64, 2), (8, 128, 4),
                 (32, 128, 8))
    else:
        tiles = ((512, 2, 4), (1024, 1, 4), (256, 4, 4), (1024, 2, 8), (512, 4, 8), (256, 1, 2), (128, 8, 4),
                 (2048, 1, 8))
    seeds: list[Config] = []
    for bp, bc, warps in tiles:
        _add(space, seeds, {"BLOCK_P": min(bp, top_p), "BLOCK_C": min(bc, top_c), "num_warps": warps,
                            "num_stages": 1})
    return Sketch(plan, space, tuple(seeds[:8]))


def _rows(plan: RowsPlan) -> Sketch:
    cols = plan.n_cols
    top_c = min(16384, max(2, _pow2_at_least(cols)))
    # short rows (a pooling window of 9) want many rows a program, long ones (softmax) few
    top_r = min(_pow2_at_least(plan.n_rows), 16 if cols > 64 else max(16, 8192 // top_c))
    params = [
        PowerOfTwo("BLOCK_R", 1, top_r),
        PowerOfTwo("BLOCK_C", min(64, top_c), top_c),
        Ordinal("num_warps", [1, 2, 4, 8, 16]),
        Ordinal("num_stages", [1, 2, 3]),
    ]
    constraints = ["BLOCK_R * BLOCK_C <= num_warps * 32 * 64", "BLOCK_R * BLOCK_C >= num_warps * 32"]
    space = Space(params, constraints=constraints)
    seeds: list[Config] = []
    if top_r > 16:
        for br, warps in ((256, 4), (128, 4), (512, 8), (64, 2), (256, 8), (128, 8)):
            _add(space, seeds, {"BLOCK_R": min(br, top_r), "BLOCK_C": top_c, "num_warps": warps, "num_stages": 1})
    for br, warps in ((1, 8), (1, 16), (2, 8), (1, 4), (4, 8), (2, 16)):
        for bc in (top_c, min(top_c, 1024)):
            _add(space, seeds, {"BLOCK_R": br, "BLOCK_C": bc, "num_warps": warps, "num_stages": 1})
    return Sketch(plan, space, tuple(seeds[:6]))


def _elementwise(plan: ElementwisePlan) -> Sketch:
    top = min(16384, max(32, _pow2_at_least(plan.size)))
    space = Space([PowerOfTwo("BLOCK", min(128, top), top), Ordinal("num_warps", [1, 2, 4, 8])],
                  constraints=["BLOCK >= num_warps * 32"])
    seeds: list[Config] = []
    for block, warps in ((1024, 4), (2048, 8), (4096, 8), (512, 4)):
        _add(space, seeds, {"BLOCK": min(block, top), "num_warps": warps})
    return Sketch(plan, space, tuple(seeds))


def _add(space: Space, seeds: list[Config], values: dict[str, Any]) -> None:
    values = {**{k: off for k, off in GEMV_ONLY.items() if k in space.names}, **values}  # the tiled kernel
    try:
        cfg = space.config(values)
    except Exception:  # noqa: BLE001 - a rule of thumb outside this shape's space is skipped
        return
    if space.is_valid(cfg) and cfg not in seeds:
        seeds.append(cfg)
