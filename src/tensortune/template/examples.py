"""Worked templates: a register-tiled matmul and a convolution vectorized along its filters
for the CPU, and a matmul over the GPU contraction pattern's options.

The CPU ones are the hand-written schedules of `examples/te_matmul_schedule.py` and
`examples/te_conv2d_schedule.py` with their numbers turned into knobs; docs/templates.md
walks through all three. Importing this module registers `matmul`, `conv2d` and
`gpu_matmul`.

Example:
    >>> task = matmul(64, 64, 64)
    >>> sorted(task.knobs), task.space.size > 100
    (['order', 'parallel', 'tile_i', 'tile_j', 'tile_k', 'unroll'], True)
"""

from __future__ import annotations

from .. import te
from .template import template

VECTOR = 16  # float32 lanes of a 512-bit register


@template("matmul")
def matmul(cfg, M: int, N: int, K: int, dtype: str = "float32"):
    """C = A @ B with a register tile: rows `tile_i`, vector columns `tile_j`, the reduction
    split by `tile_k`; the accumulator tile is computed at each output tile."""
    A = te.placeholder((M, K), dtype, "A")
    B = te.placeholder((K, N), dtype, "B")
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C)
    CL = s.cache_write(C)

    cfg.define_split("tile_i", s[C].loop("i"), num_outputs=2, max_factor=16)
    cfg.define_split("tile_j", s[C].loop("j"), num_outputs=2,
                     candidate=[(N // v, v) for v in (VECTOR, 2 * VECTOR, 4 * VECTOR) if N % v == 0] or None)
    cfg.define_split("tile_k", s[CL].loop("k"), num_outputs=2, max_factor=64)
    io, ii = cfg["tile_i"].apply(s, C, "i")
    jo, ji = cfg["tile_j"].apply(s, C, "j")
    s[C].reorder(io, jo, ii, ji)
    tile = s[C].fuse(io, jo)
    cfg.define_annotate("parallel", [tile], "parallel")
    cfg["parallel"].apply(s, C)
    s[C].vectorize(ji)

    s[CL].compute_at(s[C], tile)
    ko, ki = cfg["tile_k"].apply(s, CL, "k")
    # the row loop i: outside the reduction (one row's vector at a time) or inside it (the whole tile in registers)
    cfg.define_reorder("order", [ko, ki, "i", "j"], candidate=[[0, 1, 2, 3], [0, 2, 1, 3], [2, 0, 1, 3]])
    cfg["order"].apply(s, CL, [ko, ki, "i", "j"])
    s[CL].vectorize("j")
    cfg.define_annotate("unroll", ["i"], "unroll")
    cfg["unroll"].apply(s, CL)
    return s, [A, B, C]


@template("conv2d")
def conv2d(cfg, N: int, C: int, H: int, W: int, F: int, R: int, S: int, padding: int = 0):
    """NCHW convolution, stride 1: padding at the root, the output's local tile laid out
    with the filters last and vectorized along them (`tile_f`), a few image columns
    (`tile_x`) and rows (`tile_y`) per tile, the input channels split by `tile_c`, the
    window optionally unrolled."""
    from .knobs import TemplateError
    if F % VECTOR:
        raise TemplateError(f"conv2d template: the filters ({F}) must be a multiple of {VECTOR}")
    data = te.placeholder((N, C, H, W), name="data")
    weight = te.placeholder((F, C, R, S), name="weight")
    Y, X = H + 2 * padding - R + 1, W + 2 * padding - S + 1
    pad = te.compute((N, C, H + 2 * padding, W + 2 * padding),
                     lambda b, c, y, x: te.select((y >= padding) & (y < H + padding) & (x >= padding)
                                                  & (x < W + padding), data[b, c, y - padding, x - padding], 0.0),
                     name="pad")
    rc, rr, rs = te.reduce_axis(C, "rc"), te.reduce_axis(R, "rr"), te.reduce_axis(S, "rs")
    out = te.compute((N, F, Y, X), lambda b, f, y, x: te.sum(pad[b, rc, y + rr, x + rs] * weight[f, rc, rr, rs],
                                                             axis=[rc, rr, rs]), name="conv")
    s = te.create_schedule(out)
    s[pad].parallel(s[pad].fuse("b", "c"))
    WL = s.cache_read(weight, [out])
    s[WL].reorder_storage("i1", "i2", "i3", "i0")  # the packed weights with the filters last
    s[WL].parallel(s[WL].fuse("i0", "i1"))
    OL = s.cache_write(out)
    s[OL].reorder_storage("b", "y", "x", "f")

    cfg.define_split("tile_f", s[out].loop("f"), num_outputs=2,
                     candidate=[(F // v, v) for v in (VECTOR, 2 * VECTOR, 4 * VECTOR) if F % v == 0])
    cfg.define_split("tile_y", s[out].loop("y"), num_outputs=2, max_factor=4)
    cfg.define_split("tile_x", s[out].loop("x"), num_outputs=2, max_factor=16)
    fo, fi = cfg["tile_f"].apply(s, out, "f")
    yo, yi = cfg["tile_y"].apply(s, out, "y")
    xo, xi = cfg["tile_x"].apply(s, out, "x")
    s[out].reorder("b", yo, xo, fo, fi, yi, xi)
    tile = s[out].fuse("b", yo, xo, fo)
    s[out].parallel(tile)
    s[out].vectorize(xi)

    s[OL].compute_at(s[out], tile)
    cfg.define_split("tile_c", s[OL].loop("rc"), num_outputs=2, max_factor=16)
    co, ci = cfg["tile_c"].apply(s, OL, "rc")
    s[OL].reorder(co, ci, "rr", "rs", "b", "y", "x", "f")
    s[OL].vectorize("f")
    cfg.define_annotate("unroll", ["rr", "rs", "y", "x"], "unroll")
    cfg["unroll"].apply(s, OL)
    return s, [data, weight, out]


@template("gpu_matmul")
def gpu_matmul(cfg, M: int, N: int, K: int, dtype: str = "float16"):
    """C = A @ B on the GPU, over the contraction pattern's options: the output tile
    (`tile_m` x `tile_n`), the reduction step `tile_k`, the warps, the pipeline stages,
    the grouped launch order, and the launch: plain, persistent (one program per
    multiprocessor) or persistent with TMA loads and stores, where the shape offers them."""
    from .cuda import cuda_schedule, pattern_options
    A = te.placeholder((M, K), dtype, "A")
    B = te.placeholder((K, N), dtype, "B")
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    offered = pattern_options(C)

    def at_least(name: str, low: int) -> list[int]:  # tiles this big or more, where the extent allows
        values = offered[name]
        return [v for v in values if v >= low] or values[-1:]

    cfg.define_knob("tile_m", at_least("BLOCK_M", 32))
    cfg.define_knob("tile_n", at_least("BLOCK_N", 32))
    cfg.define_knob("tile_k", [v for v in offered["BLOCK_K"] if v in (32, 64)] or offered["BLOCK_K"][:1])
    cfg.define_knob("warps", [4, 8])
    cfg.define_knob("stages", [3, 4])
    cfg.define_knob("group_m", [1, 8])
    cfg.define_knob("split_k", offered["SPLIT_K"])  # [1] unless the tiles alone cannot fill the GPU
    launches = ["plain"] + (["persistent"] if True in offered["PERSISTENT"] else []) \
        + (["tma"] if True in offered["TMA"] and True in offered["TMA_STORE"] else [])
    cfg.define_knob("launch", launches)
    launch = {"plain": {"PERSISTENT": False, "TMA": False, "TMA_STORE": False, "EPILOGUE_SPLIT": 1},
              "persistent": {"PERSISTENT": True, "TMA": False, "TMA_STORE": False, "EPILOGUE_SPLIT": 1},
              "tma": {"PERSISTENT": True in offered["PERSISTENT"], "TMA": True, "TMA_STORE": True,
                      "EPILOGUE_SPLIT": 2}}[cfg["launch"]]
    return cuda_schedule(C, BLOCK_M=cfg["tile_m"], BLOCK_N=cfg["tile_n"], BLOCK_K=cfg["tile_k"],
                         num_warps=cfg["warps"], num_stages=cfg["stages"], GROUP_M=cfg["group_m"],
                         SPLIT_K=cfg["split_k"], **launch)
