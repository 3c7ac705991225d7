"""Program features for the cost model, computed from the lowered loop nest.

As in AutoTVM's itervar features and Ansor's per-store features, each store statement
of the lowered program is described by its loops (extents, annotations, depth), the
accumulator tile held inside its innermost reduction loop, its guards (tails), and,
for the buffer it writes and the buffers it reads, the elements touched and the reuse
at the innermost loop levels, the stride along the vectorized and innermost loops, and
the arithmetic intensity (flops per byte touched) at each level. The program's vector
concatenates the blocks of its three heaviest stores (by flops) and a few global
numbers (parallel chunks per core, local memory). Every block has a fixed length, so
programs of different sketches share columns.

Example:
    >>> from tensortune import te
    >>> from tensortune.te import workloads
    >>> s = te.create_schedule(workloads.matmul(32, 32, 32).outputs)
    >>> f = program_features(s.lower())
    >>> len(f) == len(FEATURE_NAMES), float(round(f[FEATURE_NAMES.index("s0.log_flops")], 3))
    (True, 16.0)
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any
from dataclasses import dataclass

import numpy as np

from ..te.affine import Affine
from ..te.dtype import TEError, itemsize, stored_dtype
from ..te.expr import Binary, Buffer, BufferLoad, Call, Expr, Var
from ..te.ir import Allocate, For, IfThenElse, LoweredFunc, Stmt, Store, stmt_children
from ..te.visit import walk

LEVELS = 4  # footprints at the innermost 1..LEVELS loops, plus the whole nest
ACCESSES = 4  # the store, then up to three loads (largest first)
STORES = 3
VECTOR_LANES = 16  # float32 lanes of a 512-bit register


def _log(x: float) -> float:
    return math.log2(x + 1.0)


def _block_names() -> list[str]:
    names = ["log_iters", "log_flops", "loops", "reduce_loops", "log_inner_extent", "log_parallel",
             "parallel_balance", "log_vector", "vector_store_contiguous", "vector_loads_contiguous",
             "vector_loads_broadcast", "vector_loads_strided", "vector_tail", "log_unrolled", "unrolled_loops",
             "guards", "inner_guard", "log_acc_tile", "log_acc_reuse", "acc_vectors", "acc_fits_registers", "spatial_inside_reduce",
             "local_store", "flops_per_iter"]
    for a in range(ACCESSES):
        names += [f"a{a}.log_stride_inner", f"a{a}.contiguous_inner", f"a{a}.log_reuse"]
        names += [f"a{a}.log_bytes_l{lv}" for lv in range(1, LEVELS + 1)] + [f"a{a}.log_bytes_all"]
    names += [f"log_intensity_l{lv}" for lv in range(1, LEVELS + 1)] + ["log_intensity_all"]
    return names


BLOCK = _block_names()
GLOBAL = ["stores", "log_local_bytes", "log_total_flops", "log_parallel_chunks", "parallel_load_balance"]
FEATURE_NAMES = [f"s{k}.{n}" for k in range(STORES) for n in BLOCK] + [f"g.{n}" for n in GLOBAL]


@dataclass
class _Access:
    bytes_per_elem: int
    coef: dict[Var, int]
    opaque: set[Var]  # variables the index depends on non-affinely
    is_store: bool
    local: bool


def program_features(func: LoweredFunc, cores: int = 2) -> np.ndarray:
    """The feature vector of a lowered program (length `len(FEATURE_NAMES)`)."""
    stores = list(_stores(func.body, (), ()))
    args = frozenset(func.args)
    blocks = sorted((_store_block(s, loops, guards, cores, args) for s, loops, guards in stores),
                    key=lambda b: -b[1])
    out = np.zeros(len(FEATURE_NAMES))
    width = len(BLOCK)
    for k, b in enumerate(blocks[:STORES]):
        out[k * width:(k + 1) * width] = b
    local = sum(s.buffer.size * _elem_bytes(s.buffer, args) for s in _allocations(func.body))
    chunks = [f.extent for f in _root_parallel(func.body)]
    par = max(chunks) if chunks else 1
    total_flops = sum(2.0 ** b[1] - 1 for b in blocks)
    out[STORES * width:] = [len(stores), _log(local), _log(total_flops), math.log2(par),
                            par / (math.ceil(par / cores) * cores)]
    return out


def _stores(s: Stmt, loops: tuple[For, ...], guards: tuple[int, ...]) -> Iterator[tuple[Store, tuple[For, ...],
                                                                                        tuple[int, ...]]]:
    if isinstance(s, Store):
        yield s, loops, guards
        return
    if isinstance(s, For):
        loops = loops + (s,)
    elif isinstance(s, IfThenElse):
        guards = guards + (len(loops),)
    for c in stmt_children(s):
        yield from _stores(c, loops, guards)


def _allocations(s: Stmt) -> Iterator[Allocate]:
    if isinstance(s, Allocate) and s.buffer.scope == "local":
        yield s
    for c in stmt_children(s):
        yield from _allocations(c)


def _root_parallel(s: Stmt) -> Iterator[For]:
    if isinstance(s, For) and s.kind == "parallel":
        yield s
        return
    for c in stmt_children(s):
        yield from _root_parallel(c)


def _elem_bytes(buffer: Buffer, args: frozenset[Buffer]) -> int:
    """Bytes per element as the C program stores it (bfloat16 temporaries hold float)."""
    return itemsize(stored_dtype(buffer.dtype, buffer in args))


def _flops(e: Expr) -> int:
    return sum(1 for x in walk(e) if isinstance(x, (Binary, Call)) and x.dtype not in ("int32", "bool"))


def _access(buffer, indices, is_store: bool, args: frozenset[Buffer]) -> _Access:
    coef: dict[Var, int] = {}
    opaque: set[Var] = set()
    stride = 1
    for ix, n in zip(reversed(indices), reversed(buffer.shape)):
        for atom, c in Affine.of(ix).terms:
            if isinstance(atom, Var):
                coef[atom] = coef.get(atom, 0) + c * stride
            else:
                opaque |= {v for v in walk(atom) if isinstance(v, Var)}
        stride *= n
    return _Access(_elem_bytes(buffer, args), coef, opaque, is_store, buffer.scope == "local")


def _touched(a: _Access, loops: tuple[For, ...]) -> float:
    """Distinct elements `a` touches while `loops` sweep (the others fixed)."""
    count, span = 1.0, 1.0
    for f in loops:
        c = a.coef.get(f.var, 0)
        if f.var in a.opaque:
            count *= f.extent
            span = math.inf
        elif c:
            count *= f.extent
            span += abs(c) * (f.extent - 1)
    return min(count, span)


def _store_block(s: Store, loops: tuple[For, ...], guards: tuple[int, ...], cores: int,
                 args: frozenset[Buffer]) -> list[float]:
    accesses = [_access(s.buffer, s.indices, True, args)]
    loads = [x for x in walk(s.value) if isinstance(x, BufferLoad)]
    accesses += sorted((_access(x.buffer, x.indices, False, args) for x in loads),
                       key=lambda a: -_touched(a, loops) * a.bytes_per_elem)
    flops_per_iter = max(1, _flops(s.value))
    iters = math.prod(f.extent for f in loops) if loops else 1
    n = len(loops)
    par = [f for f in loops if f.kind == "parallel"]
    par_extent = math.prod(f.extent for f in par) if par else 1
    vec = [f for f in loops if f.kind == "vectorize"]
    unrolled = [f for f in loops if f.kind == "unroll"]
    inner = loops[-1] if loops else None
    reduce_pos = [k for k, f in enumerate(loops) if f.axis_kind == "reduce"]
    acc_tile = math.prod(f.extent for f in loops[reduce_pos[-1] + 1:]) if reduce_pos else 0
    acc_reuse = 1  # reduction steps the accumulator tile stays put for (no spatial loop in between)
    for f in reversed(loops[:reduce_pos[-1] + 1] if reduce_pos else ()):
        if f.axis_kind == "reduce":
            acc_reuse *= f.extent
        elif f.extent > 1:
            break
    vstats = [0.0, 0.0, 0.0, 0.0, 0.0]
    if vec:
        v = vec[-1].var
        vstats[0] = float(accesses[0].coef.get(v, 0) == 1 and v not in accesses[0].opaque)
        kinds = [(a.coef.get(v, 0), v in a.opaque) for a in accesses[1:]]
        if kinds:
            vstats[1] = sum(c == 1 and not o for c, o in kinds) / len(kinds)
            vstats[2] = sum(c == 0 and not o for c, o in kinds) / len(kinds)
            vstats[3] = sum(c not in (0, 1) or o for c, o in kinds) / len(kinds)
        vstats[4] = float(any(g >= loops.index(vec[-1]) for g in guards))
    block = [
        _log(iters), _log(iters * flops_per_iter), n, len(reduce_pos), _log(inner.extent if inner else 1),
        _log(par_extent), par_extent / (math.ceil(par_extent / cores) * cores) if par else 0.0,
        _log(vec[-1].extent if vec else 0), *vstats,
        _log(math.prod(f.extent for f in unrolled) if unrolled else 0), len(unrolled),
        len(guards), float(any(g >= n - 2 for g in guards)),
        _log(acc_tile), _log(acc_reuse), acc_tile / VECTOR_LANES, float(0 < acc_tile <= 28 * VECTOR_LANES),
        n - 1 - reduce_pos[-1] if reduce_pos else 0, float(accesses[0].local), flops_per_iter,
    ]
    totals = [0.0] * (LEVELS + 1)
    for k in range(ACCESSES):
        if k >= len(accesses):
            block += [0.0] * (3 + LEVELS + 1)
            continue
        a = accesses[k]
        c = a.coef.get(inner.var, 0) if inner else 0
        whole = _touched(a, loops)
        block += [_log(abs(c)), float(c == 1), _log(iters / max(whole, 1.0))]
        for lv in range(1, LEVELS + 1):
            b = _touched(a, loops[max(0, n - lv):]) * a.bytes_per_elem
            block.append(_log(b))
            totals[lv - 1] += b
        block.append(_log(whole * a.bytes_per_elem))
        totals[LEVELS] += whole * a.bytes_per_elem
    for lv in range(1, LEVELS + 1):
        it = math.prod(f.extent for f in loops[max(0, n - lv):]) if loops else 1
        block.append(_log(it * flops_per_iter / max(totals[lv - 1], 1.0)))
    block.append(_log(iters * flops_per_iter / max(totals[LEVELS], 1.0)))
    return block


class LoopNestFeatures:
    """Feature rows of a space's configurations, from the loop nests they lower to (cached
    by `key`, which configurations of one program share); a configuration te refuses gets
    a row of NaN. Subclasses say how a configuration lowers (`lowered`)."""

    def __init__(self, space: Any, cores: int = 2) -> None:
        self.space = space
        self.cores = cores
        self.names = list(FEATURE_NAMES)
        self._cache: dict[Any, np.ndarray] = {}

    @property
    def width(self) -> int:
        return len(self.names)

    def key(self, config: Any) -> Any:
        return config

    def lowered(self, config: Any) -> LoweredFunc:
        raise NotImplementedError

    def config_row(self, config: Any) -> np.ndarray:
        key = self.key(config)
        row = self._cache.get(key)
        if row is None:
            try:
                row = program_features(self.lowered(key), self.cores)
            except TEError:
                row = np.full(self.width, np.nan)
            self._cache[key] = row
        return row

    def configs(self, configs: Sequence[Any]) -> np.ndarray:
        if len(configs) == 0:
            return np.zeros((0, self.width))
        return np.stack([self.config_row(c) for c in configs])

    def points(self, points: Sequence[Sequence[int]]) -> np.ndarray:
        return self.configs([self.space.to_config(p) for p in points])
