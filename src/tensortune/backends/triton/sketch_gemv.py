"""The matrix-vector variant in a contraction's sketch: the GEMV switch, its knobs and seeds.

A contraction of at most `GEMV_MAX_ROWS` rows (`gen_gemv.py`) gets a `GEMV` parameter
beside the tiled kernel's, so the search compares the two. Under `GEMV`, the tiled
kernel's own knobs are pinned (one point per matrix-vector configuration) and its
constraints lifted; BLOCK_N reaches down to 1 and BLOCK_K up to 1024 (wide rows of
the weight per step), SPLIT_K up to 16. Constraints keep one accumulator tile per row
within registers (64 float32 values a thread for all rows) and give every thread at
least one 16-byte load a step. VECTOR_TILE says how each row's slice of the other
factor is loaded (`gen_gemv.py`). The seeds, measured first, load four 16-byte vectors
per thread a step and split K until the programs make about two per multiprocessor;
the first two are also tried with VECTOR_TILE off.

Example:
    >>> from tensortune.te import workloads
    >>> from tensortune.backends.triton.patterns import analyze
    >>> from tensortune.backends.triton.sketches import sketch
    >>> s = sketch(analyze(workloads.matmul(1, 8192, 2048, "bfloat16", "NT").output))
    >>> s.seeds[0]["GEMV"], s.seeds[0]["BLOCK_K"]
    (True, 512)
"""

from __future__ import annotations

from typing import Any

from ...space import Categorical, Config, Ordinal, PowerOfTwo, Space
from .gen_gemv import GEMV_MAX_ROWS, GEMV_ONLY, TILED_ONLY, UNUSED, gemv_applies
from .patterns import ContractionPlan
from .source import cdiv

__all__ = ["GEMV_MAX_ROWS", "GEMV_ONLY", "gemv_applies", "gemv_seeds", "with_gemv"]

GEMV_SPLITS = [1, 2, 4, 8, 16]
GEMV_KNOBS = ("BLOCK_N", "BLOCK_K", "SPLIT_K", "num_warps", "num_stages")  # and VECTOR_TILE, its own
REGS_PER_THREAD = 64  # float32 accumulator values a thread holds for all rows together
LOAD_BYTES = 16  # one vector load


def _pow2_at_least(x: int) -> int:
    return 1 << max(0, x - 1).bit_length()


def _equals(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return name if value else f"not {name}"
    return f"{name} == {value}"


def _k_inner(plan: ContractionPlan) -> int:
    k = 1
    for a in plan.k:
        k *= a.extent
    return k


def with_gemv(plan: ContractionPlan, params: list[Any], constraints: list[str],
              item: int) -> tuple[list[Any], list[str]]:
    """The tiled contraction's parameters and constraints with the GEMV switch joined."""
    _, m, n, _ = plan.sizes
    k = _k_inner(plan)
    by_name = {p.name: p for p in params}
    old_n, old_k, old_split = by_name["BLOCK_N"], by_name["BLOCK_K"], by_name["SPLIT_K"]
    top_k = min(1024, max(16, _pow2_at_least(k)))
    splits = sorted(set(old_split.values) | {s for s in GEMV_SPLITS if s <= cdiv(k, 16)})
    widened = {"BLOCK_N": PowerOfTwo("BLOCK_N", 1, max(old_n.values)),
               "BLOCK_K": PowerOfTwo("BLOCK_K", 16, max(top_k, max(old_k.values))),
               "SPLIT_K": Ordinal("SPLIT_K", splits)}
    params = ([Categorical("GEMV", [True, False])] + [widened.get(p.name, p) for p in params]
              + [Categorical("VECTOR_TILE", [True, False])])
    tiled = constraints + [f"BLOCK_N >= {min(old_n.values)}", f"BLOCK_K <= {max(old_k.values)}",
                           f"SPLIT_K <= {max(old_split.values)}"]
    unknown = sorted(set(by_name) - set(TILED_ONLY) - set(UNUSED) - set(GEMV_KNOBS))
    if unknown:  # a new knob of the tiled kernel: say what a GEMV configuration sets it to (gen_gemv.TILED_ONLY)
        raise ValueError(f"the contraction's knob(s) {unknown} have no fixed value for GEMV configurations")
    pinned = [_equals(name, value) for name, value in {**UNUSED, **TILED_ONLY}.items() if name in by_name]
    gemv = [" and ".join(pinned),
            f"{m} * BLOCK_N * BLOCK_K <= num_warps * 32 * {REGS_PER_THREAD}",
            f"BLOCK_N * BLOCK_K * {item} >= num_warps * 32 * {LOAD_BYTES}",
            f"BLOCK_K <= {top_k}",
            f"(SPLIT_K - 1) * BLOCK_K < {k}",  # every share of K holds a step
            f"BLOCK_N <= {max(1, _pow2_at_least(n))}"]
    tiled.append("not VECTOR_TILE")
    return params, [f"GEMV or ({c})" for c in tiled] + [f"not GEMV or ({c})" for c in gemv]


def _values(space: Space, name: str) -> list[Any]:
    return list(next(p for p in space.params if name in p.names).values)


def gemv_seeds(plan: ContractionPlan, space: Space, item: int, sms: int) -> list[Config]:
    """Matrix-vector configurations to measure first: wide K steps, four vector loads a
    thread a step, K split until about two programs run per multiprocessor."""
    nb, m, n, _ = plan.sizes
    k = _k_inner(plan)
    seeds: list[Config] = []
    splits = _values(space, "SPLIT_K")
    fixed = {name: value for name, value in {**UNUSED, **TILED_ONLY}.items() if name in space.names}
    row_bytes = (1024, 512, 2048, 1024, 256, 512)  # bytes of a weight row a step
    shapes = ((4, 2), (4, 3), (8, 2), (8, 3), (2, 3), (4, 4))  # (num_warps, num_stages)
    for width, (warps, stages) in zip(row_bytes, shapes):
        bk = max(16, min(width // item, _pow2_at_least(k)))
        want = warps * 32 * 4 * LOAD_BYTES // (bk * item)
        cap = warps * 32 * REGS_PER_THREAD // (m * bk)
        bn = max(1, min(want, cap, _pow2_at_least(n)))
        programs = nb * cdiv(n, bn)
        split = 1
        while programs * split < 2 * sms and 2 * split <= cdiv(k, bk) and 2 * split in splits:
            split *= 2
        cfg = {**fixed, "GEMV": True, "VECTOR_TILE": True, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split,
               "num_warps": warps, "num_stages": stages}
        try:
            c = space.config(cfg)
        except Exception:  # noqa: BLE001 - a rule of thumb outside this shape's space is skipped
            continue
        if space.is_valid(c) and c not in seeds:
            seeds.append(c)
    # the first two again with the vector loaded once and broadcast through shared memory
    vector = [space.config({**c, "VECTOR_TILE": False}) for c in seeds[:2]]
    return seeds[:2] + vector[:1] + seeds[2:4] + vector[1:] + seeds[4:]
