"""Wave-aware contraction tiles: full waves of whole tiles, then the last wave's tiles split along K.

With T tiles and S program slots on the GPU (multiprocessors times the programs one of
them holds), T // S full waves leave T % S tiles for a last wave that keeps most slots
idle: 3072^3 in 128x256 tiles is 288 tiles on 132 slots, a last wave of 24. With
`TAIL_SPLIT = s > 1` the generated kernel runs the first `T - T % S` tiles whole and
gives each of the last `T % S` tiles to `s` programs, each over a `1/s` share of K (the
hybrid schedule of stream-K, with the tail split evenly). Each share writes its float32
partial tile to a workspace and bumps the tile's counter; the program that brings the
counter to `s` adds the `s` partials in their fixed order (the result does not depend on
which program finishes last), resets the counter for the next launch and applies the
epilogue. Nothing waits on another program, so no schedule can deadlock.

`S` is found at launch: the compiled kernel's shared memory and registers give the
programs per multiprocessor (one when that cannot be read), times the multiprocessor
count. The counters live with the module, one set per device, so two launches of the
same module must not overlap on different streams. With PERSISTENT, S is the
multiprocessor count (one program each), and the programs take the whole tiles and then
the shares in turn.

Example:
    >>> print(fixup_lines(2, 16, 16, "p_tws", "p_tcnt")[6])
        done = arrived == 1
"""

from __future__ import annotations

from .source import cdiv


def tail_prologue(split: int, iters: int) -> list[str]:
    """Lines mapping work item `pid0` (a program, or a persistent program's turn) to its
    tile (`pid`) and K range (`k_lo`, `k_hi`)."""
    chunk = cdiv(iters, split)
    return ["in_tail = pid0 >= dp_tiles",
            "pid_t = tl.maximum(pid0 - dp_tiles, 0)",
            f"pid_k = pid_t % {split}",
            f"pid = tl.where(in_tail, dp_tiles + pid_t // {split}, pid0)",
            f"k_lo = tl.where(in_tail, pid_k * {chunk}, 0)",
            f"k_hi = tl.where(in_tail, tl.minimum(k_lo + {chunk}, {iters}), {iters})"]


def fixup_lines(split: int, bm: int, bn: int, ws: str, counters: str) -> list[str]:
    """After the K loop: a tail share stores its partial tile and the last one sums them;
    `done` says whether this program applies the epilogue."""
    size = bm * bn
    return ["done = pid0 < dp_tiles",
            "if pid0 >= dp_tiles:",
            f"    loc = tl.arange(0, {bm})[:, None] * {bn} + tl.arange(0, {bn})[None, :]",
            "    slot = pid - dp_tiles",
            f"    tl.store({ws} + (slot * {split} + pid_k) * {size} + loc, acc)",
            f"    arrived = tl.atomic_add({counters} + slot, 1, sem=\"acq_rel\")",
            f"    done = arrived == {split - 1}",
            "    if done:",
            f"        acc = tl.load({ws} + slot * {split * size} + loc, cache_modifier=\".cg\")",
            f"        for s in tl.static_range(1, {split}):",
            f"            acc += tl.load({ws} + (slot * {split} + s) * {size} + loc, cache_modifier=\".cg\")",
            f"        tl.atomic_xchg({counters} + slot, 0)"]


WAVE_HELPER = [
    "",
    "_SLOTS = {}",
    "_COUNTERS = {}",
    "",
    "",
    "def _wave_slots(t, compiled, num_warps):",
    '    """Programs the GPU runs at once: multiprocessors times the programs each holds."""',
    "    if not t.is_cuda:",
    "        return 4",
    "    index = t.device.index if t.device.index is not None else torch.cuda.current_device()",
    "    if index not in _SLOTS:",
    "        props = torch.cuda.get_device_properties(index)",
    "        per_sm = 1",
    "        try:",
    "            kernel = compiled()",
    "            if getattr(kernel, '_init_handles', None) is not None:",
    "                kernel._init_handles()",
    "            shared = int(kernel.metadata.shared) + 1024",
    "            regs = max(1, int(getattr(kernel, 'n_regs', 0) or 0)) * 32 * num_warps",
    "            smem_sm = int(getattr(props, 'shared_memory_per_multiprocessor', 233472))",
    "            regs_sm = int(getattr(props, 'regs_per_multiprocessor', 65536))",
    "            per_sm = max(1, min(smem_sm // shared, regs_sm // regs, 64 // num_warps))",
    "        except Exception:  # an unreadable occupancy: one program per multiprocessor",
    "            per_sm = 1",
    "        _SLOTS[index] = props.multi_processor_count * per_sm",
    "    return _SLOTS[index]",
    "",
    "",
    "def _tail_counters(t, n):",
    '    """Zeroed arrival counters, kept per device (the last arrival resets its own)."""',
    "    key = (t.device.type, t.device.index)",
    "    have = _COUNTERS.get(key)",
    "    if have is None or have.numel() < n:",
    "        have = torch.zeros(max(n, 64), dtype=torch.int32, device=t.device)",
    "        _COUNTERS[key] = have",
    "    return have",
    "",
]
