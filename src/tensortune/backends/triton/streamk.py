"""Stream-K contractions: the K steps of the last tiles shared out evenly over every program.

With G programs (multiprocessors times `SK_PER_SM`), T tiles and I K steps a tile, a
persistent kernel runs `T - S` tiles whole (`T - S` a multiple of G) and divides the
`S * I` K steps of the other S tiles into G contiguous ranges that differ by one step at
most, each crossing tile boundaries where it must (the hybrid of the Stream-K paper).
`STREAM_K = w` makes S the partial last wave plus `w - 1` full waves: with 1 each program
gets a share of the remainder tiles alone (cheap when they are few and K is long); with 2
each gets one to two tiles' worth, so a tile is split between two programs at most (under
one wave of tiles both share out every tile).

Fix-up of a tile split among several programs (deterministic, and no program ever waits
for one that has not started): each program that finishes its part of the tile takes a
ticket from the tile's arrival counter. Every one but the last stores its float32
partial tile to a workspace slot of its own and then counts itself in the tile's ready
counter; the last waits until the ready counter shows the others' stores (they are
already running, past their ticket, so the wait is bounded by one store; should it ever
pass `SPIN_LIMIT` polls the tile is written as NaN, which the check catches, rather than
hanging the GPU), adds the parts,
resets both counters for the next launch and applies the epilogue once, on the whole K
sum. Two parts are added in registers (`a + b == b + a` exactly, so the sum is the same
whichever program is last); more are all read from the workspace, the last arrival's
own stored first, and added in program order. One accumulator and one part are live at
a time. Atomic adds into the output were not used: they would need a float32 output or
a second conversion pass, and their order (so the result) would change from run to run.

A program's slots: 0 for its first tile, 1 for its last (only those can be partial), so
the workspace is `2 * G` tiles. The counters live with the module, one set per device
(the last arrival resets them), so two launches of the same module must not overlap on
different streams.

Example:
    >>> plan_sizes(288, 48, 132, 2)  # 3072^3 in 128x256 tiles on an H100: (dp_tiles, sk_tiles, programs)
    (132, 156, 132)
"""

from __future__ import annotations

from collections.abc import Sequence

OPTIONS = (0, 1, 2)  # STREAM_K: off, the remainder tiles' steps shared, the remainder plus one full wave
LAST_WAVE_FILL = 0.6  # offered where some tiling's last wave is less full than this
SPIN_LIMIT = 1 << 22  # polls of a ready counter (about a second) before the tile is given up as NaN


def plan_sizes(tiles: int, iters: int, slots: int, waves: int) -> tuple[int, int, int]:
    """(whole tiles, stream-K tiles, programs launched) for `tiles` tiles of `iters` K steps on `slots` programs."""
    rem = tiles % slots
    sk_tiles = 0 if rem == 0 or waves < 1 else min(tiles, rem + (waves - 1) * slots)
    dp_tiles = tiles - sk_tiles
    programs = slots if dp_tiles else max(1, min(slots, sk_tiles * iters))
    return dp_tiles, sk_tiles, programs


def last_wave_fill(tiles: int, slots: int) -> float:
    """How full the last wave of `tiles` tiles on `slots` programs is (1.0: every wave full)."""
    rem = tiles % slots
    return 1.0 if rem == 0 else rem / slots


def drive(iters: int, head: Sequence[str], k_loop: Sequence[str], fixup: Sequence[str], epilogue: Sequence[str],
          whole_tile: Sequence[str]) -> list[str]:
    """The kernel body: this program's stream-K range segment by segment (`head` maps `pid` to
    the tile, `k_loop` runs steps `k_lo`..`k_hi` into `acc`), then the whole tiles."""
    return ["pid0 = tl.program_id(0)",
            "pid_b = 0",
            "sk_at = ((pid0.to(tl.int64) * sk_iters) // sk_programs).to(tl.int32)",
            "sk_end = (((pid0 + 1).to(tl.int64) * sk_iters) // sk_programs).to(tl.int32)",
            "sk_end = tl.where(pid0 < sk_programs, sk_end, sk_at)",
            f"sk_first = sk_at // {iters}",
            "while sk_at < sk_end:",
            f"    pid = dp_tiles + sk_at // {iters}",
            f"    k_lo = sk_at % {iters}",
            f"    k_hi = tl.minimum({iters}, k_lo + (sk_end - sk_at))",
            *("    " + line for line in head),
            *("    " + line for line in k_loop),
            *("    " + line for line in fixup),
            "    if done:",
            *("        " + line for line in epilogue),
            "    sk_at += k_hi - k_lo",
            "for tile in tl.range(pid0, dp_tiles, tl.num_programs(0), flatten=True):",
            "    pid = tile",
            *("    " + line for line in whole_tile)]


def fixup_lines(iters: int, bm: int, bn: int, ws: str, counters: str) -> list[str]:
    """After a segment's K loop: whether the tile is whole here (`done`), else the arrival
    protocol above; the last arrival leaves the tile's full sum in `acc` with `done` true."""
    size = bm * bn
    return ["st = pid - dp_tiles",
            f"owner_lo = ((st * {iters} + 1).to(tl.int64) * sk_programs - 1) // sk_iters",
            f"owner_hi = ((st * {iters} + {iters}).to(tl.int64) * sk_programs - 1) // sk_iters",
            "parts = (owner_hi - owner_lo + 1).to(tl.int32)",
            "done = parts == 1",
            "if parts > 1:",
            f"    loc = tl.arange(0, {bm})[:, None] * {bn} + tl.arange(0, {bn})[None, :]",
            f"    ticket = tl.atomic_add({counters} + 2 * st, 1, sem=\"acq_rel\")",
            "    if ticket < parts - 1:",
            "        slot = (st != sk_first).to(tl.int32)",
            f"        tl.store({ws} + (pid0 * 2 + slot) * {size} + loc, acc)",
            "        tl.debug_barrier()",
            f"        tl.atomic_add({counters} + 2 * st + 1, 1, sem=\"release\")",
            "    else:",
            "        spins = 0",
            f"        ready = {counters} + 2 * st + 1",
            f"        while (tl.atomic_add(ready, 0, sem=\"acquire\") < parts - 1) & (spins < {SPIN_LIMIT}):",
            "            spins += 1",
            f"        poison = tl.where(spins < {SPIN_LIMIT}, 1.0, float(\"nan\"))  # never expected: NaN, not a hang",
            "        if parts == 2:  # a + b == b + a: the same sum whichever of the two is last",
            "            q = owner_lo.to(tl.int32) + owner_hi.to(tl.int32) - pid0",
            f"            q_first = ((tl.cast(q, tl.int64) * sk_iters) // sk_programs).to(tl.int32) // {iters}",
            "            q_slot = (st != q_first).to(tl.int32)",
            f"            acc += tl.load({ws} + (q * 2 + q_slot) * {size} + loc, cache_modifier=\".cg\") * poison",
            "        else:  # more parts: all of them from the workspace, added in program order",
            "            slot = (st != sk_first).to(tl.int32)",
            f"            tl.store({ws} + (pid0 * 2 + slot) * {size} + loc, acc)",
            "            tl.debug_barrier()",
            "            lo = owner_lo.to(tl.int32)",
            f"            lo_first = ((owner_lo * sk_iters) // sk_programs).to(tl.int32) // {iters}",
            "            lo_slot = (st != lo_first).to(tl.int32)",
            f"            acc = tl.load({ws} + (lo * 2 + lo_slot) * {size} + loc, cache_modifier=\".cg\") * poison",
            "            for q in range(lo + 1, owner_hi.to(tl.int32) + 1):  # the others' first (and only) part",
            f"                acc += tl.load({ws} + (q * 2) * {size} + loc, cache_modifier=\".cg\")",
            f"        tl.atomic_xchg({counters} + 2 * st, 0)",
            f"        tl.atomic_xchg({counters} + 2 * st + 1, 0)",
            "        done = ticket >= 0"]


def launch_lines(tiles: int, iters: int, per_sm: int, bm: int, bn: int, waves: int, out: str, call_args: str,
                 opts: str) -> list[str]:
    """Host side: the split of tiles for this GPU's program count, the workspace, the launch."""
    return [f"slots = _num_sms({out}) * {per_sm}",
            f"rem = {tiles} % slots",
            f"sk_tiles = 0 if rem == 0 else min({tiles}, rem + {waves - 1} * slots)",
            f"dp_tiles = {tiles} - sk_tiles",
            f"sk_iters = sk_tiles * {iters}",
            "sk_programs = min(slots, sk_iters)",
            "grid = (slots if dp_tiles else max(1, sk_programs),)",
            f"sws = torch.empty(max(1, 2 * grid[0] * {bm * bn} if sk_tiles else 1), dtype=torch.float32, "
            f"device={out}.device)",
            f"tt_contraction[grid]({call_args}, sws, _tail_counters({out}, {2 * tiles}), dp_tiles, sk_iters, "
            f"max(1, sk_programs), {opts})"]


# -- the search space ----------------------------------------------------------------------------

SEED_TILES = ((128, 256, 64, 8, 3, 2), (128, 256, 64, 8, 3, 1), (128, 128, 64, 4, 4, 2))  # with STREAM_K


def offered(batch: int, m: int, n: int, k_inner: int, sms: int) -> bool:
    """Whether the sketch offers STREAM_K: no batch axes, at least four 64-wide K steps, and a
    last wave under `LAST_WAVE_FILL` full for 128x256 or 128x128 tiles, one program a multiprocessor."""
    if batch != 1 or k_inner < 256:
        return False
    return any(last_wave_fill(-(-m // bm) * -(-n // bn), sms) < LAST_WAVE_FILL for bm, bn in ((128, 256), (128, 128)))


def constraints(item: int, shared: int, names: Sequence[str]) -> list[str]:
    """STREAM_K runs persistent, alone among the K splits, with its epilogue in column halves when
    the accumulator takes 128 registers a thread (in one piece it spills: compiled for sm_90,
    255 registers and a 128-208 byte stack, against 168-255 and none in halves); two programs a
    multiprocessor only where two fit (shared memory, and the accumulators plus about 40
    registers a thread)."""
    out = ["STREAM_K == 0 or (PERSISTENT and SPLIT_K == 1)",
           "STREAM_K == 0 or EPILOGUE_SPLIT == 2 or BLOCK_M * BLOCK_N <= num_warps * 32 * 64",
           "STREAM_K > 0 or SK_PER_SM == 1",
           f"SK_PER_SM == 1 or (2 * ((BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N) * {item} * num_stages + TMA_STORE * "
           f"BLOCK_M * BLOCK_N * {item} // EPILOGUE_SPLIT) <= {shared} "
           "and 2 * (BLOCK_M * BLOCK_N + num_warps * 32 * 40) <= 65536)"]
    if "TAIL_SPLIT" in names:
        out.append("STREAM_K == 0 or TAIL_SPLIT == 1")
    return out


def seeds(base: dict, m: int, n: int, k_inner: int, sms: int, tma: bool, top: tuple[int, int, int]) -> list[dict]:
    """Stream-K points for the tilings whose last wave is under `LAST_WAVE_FILL` full and whose idle
    slots are at least 5% of the kernel's: the two-tile hybrid first, TMA loads where they apply."""
    out: list[dict] = []
    for bm, bn, bk, warps, stages, waves in SEED_TILES:
        bm, bn, bk = min(bm, top[0]), min(bn, top[1]), min(bk, top[2])
        tiles = -(-m // bm) * -(-n // bn)
        fill = last_wave_fill(tiles, sms)
        idle = (1 - fill) / -(-tiles // sms)
        waves = min(waves, tiles // sms + 1)  # under one wave, every STREAM_K shares out all the tiles
        if fill >= LAST_WAVE_FILL or idle < 0.05 or -(-k_inner // bk) < 2 or any(
                (c["BLOCK_M"], c["BLOCK_N"], c["STREAM_K"]) == (bm, bn, waves) for c in out):
            continue
        out.append({**base, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": warps, "num_stages": stages,
                    "PERSISTENT": True, "TMA": tma, "TMA_STORE": False, "EPILOGUE_SPLIT": 2, "SPLIT_K": 1,
                    "STREAM_K": waves, "SK_PER_SM": 1})
    return out
