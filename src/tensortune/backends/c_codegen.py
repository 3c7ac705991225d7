"""C code for a lowered tensor-expression program (`te.ir.LoweredFunc`).

Parallel loops become `#pragma omp parallel for`, vectorized loops `#pragma omp simd`
(measured against GCC vector extensions on hand-written kernels: no slower, and they
handle guarded tails), unrolled loops `#pragma GCC unroll`; local tiles are stack arrays
that GCC keeps in registers once the loops around them are unrolled and vectorized.
Arguments are `restrict` pointers; the function returns 0, or 1 if a temporary could
not be allocated. bfloat16 arguments are their 16 bits (`uint16_t`); bfloat16 values are
computed in float, rounded to nearest even when stored to an argument or cast, and
temporaries and local tiles of bfloat16 tensors hold float (`te.dtype.stored_dtype`).

Example:
    >>> from tensortune import te
    >>> A = te.placeholder((8,), name="A")
    >>> B = te.compute((8,), lambda i: A[i] * 2.0, name="B")
    >>> s = te.create_schedule(B)
    >>> s[B].vectorize("i")
    >>> src = generate_c(s.lower("double_it"))
    >>> "#pragma omp simd" in src and "int double_it(const float* restrict A, float* restrict B)" in src
    True
"""

from __future__ import annotations

import re

from ..te.affine import Range, interval
from ..te.dtype import c_type, is_float, itemsize, stored_dtype
from ..te.expr import (Binary, Buffer, BufferLoad, Call, Cast, Compare, Const, Expr, Logical, Not, Select, Var,
                       const)
from ..te.ir import Allocate, For, IfThenElse, LoweredFunc, Seq, Stmt, Store, walk_stmts
from ..te.lower import normalize_index
from ..te.visit import walk

FLAGS = ("-ffp-contract=fast", "-fno-math-errno")  # FMA contraction is off by default under -std=c11
# Local tiles up to this many bytes are stack arrays (GCC promotes small ones to
# registers); larger ones are heap buffers behind restrict pointers: a 128 KiB packed
# panel on the stack kept GCC 12 from promoting the accumulator tile next to it
# (vfmadd on memory operands, about 2x slower), on the heap it did not.
STACK_LIMIT = 4096

_C_KEYWORDS = set("""auto break case char const continue default do double else enum extern float for goto if
inline int long register restrict return short signed sizeof static struct switch typedef union unsigned void
volatile while main free malloc abs exp log sqrt tanh""".split())

_PRELUDE = r"""#include <math.h>
#include <stdlib.h>
#include <string.h>

static inline int tt_floordiv(int a, int b) { int q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }
static inline int tt_floormod(int a, int b) { int r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
static inline float tt_max_float(float a, float b) { return a > b ? a : b; }
static inline float tt_min_float(float a, float b) { return a < b ? a : b; }
static inline double tt_max_double(double a, double b) { return a > b ? a : b; }
static inline double tt_min_double(double a, double b) { return a < b ? a : b; }
static inline int tt_max_int(int a, int b) { return a > b ? a : b; }
static inline int tt_min_int(int a, int b) { return a < b ? a : b; }
static inline void* tt_alloc(size_t bytes) { return aligned_alloc(64, (bytes + 63) / 64 * 64); }
""" + r"""
/* float exp, tanh, erf that GCC vectorizes (libm's are scalar calls in a vector loop): no
   branches, no floorf or copysignf (those need -fno-trapping-math to vectorize; checked
   with -fopt-info-vec on GCC 12, as is every other choice below). exp is
   Cephes' polynomial after range reduction (relative error under 2e-7; results below
   2^-125 flush to zero); tanh comes from exp, erf is Abramowitz and Stegun 7.1.26, each
   with its odd series near 0 (relative error under 2e-6). */
static inline float tt_expf(float x) {
  /* the special cases as factors decided up front: a select after the conversion to int
     keeps GCC from vectorizing the loop */
  float big = x > 88.72283f ? INFINITY : 1.0f;
  float keep = x < -86.6f ? 0.0f : 1.0f;  /* results below 2^-125 (subnormal) flush to zero */
  float xc = x < -86.6f ? -86.6f : x;
  xc = xc > 88.72283f ? 88.72283f : xc;
  float v = xc * 1.44269504088896341f;
  int ki = (int)__builtin_nearbyintf(v);
  float k = (float)ki;
  float r = xc - k * 0.693359375f + k * 2.12194440e-4f;
  float q = 1.9875691500E-4f;
  q = q * r + 1.3981999507E-3f;
  q = q * r + 8.3334519073E-3f;
  q = q * r + 4.1665795894E-2f;
  q = q * r + 1.6666665459E-1f;
  q = q * r + 5.0000001201E-1f;
  q = q * r * r + r + 1.0f;
  union { int i; float f; } s;
  s.i = (ki + 126) << 23;  /* 2^(k-1), then doubled: 2^128 alone would overflow; a NaN stays NaN through q */
  return q * s.f * 2.0f * big * keep;
}
static inline float tt_tanhf(float x) {
  float a = x < 0.0f ? -x : x;
  float e = tt_expf(-2.0f * a);
  float t = (1.0f - e) / (1.0f + e);
  float x2 = x * x;  /* near 0, 1 - e cancels: the odd series instead */
  float small = x * (1.0f + x2 * (-0.333333333f + x2 * (0.133333333f - 0.053968254f * x2)));
  t = x < 0.0f ? -t : t;
  return a < 0.0625f ? small : t;
}
static inline float tt_erff(float x) {
  float a = x < 0.0f ? -x : x;
  float t = 1.0f / (1.0f + 0.3275911f * a);
  float p = ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t + 0.254829592f) * t;
  float y = 1.0f - p * tt_expf(-a * a);
  float x2 = x * x;  /* near 0 the absolute error above is a large relative one: the series instead */
  float small = 1.1283791671f * x * (1.0f + x2 * (-0.333333333f + x2 * (0.1f - 0.0238095238f * x2)));
  y = x < 0.0f ? -y : y;
  return a < 0.125f ? small : y;
}
"""

# bfloat16 is the upper half of a float: widening is a shift; narrowing rounds to nearest
# even by adding 0x7fff plus the lowest kept bit (a carry into the exponent gives infinity
# past the largest finite value), and keeps NaNs NaN by setting the quiet bit instead.
_BF16_PRELUDE = r"""#include <stdint.h>
static inline float tt_bf16_to_float(uint16_t h) {
  union { uint32_t u; float f; } v; v.u = (uint32_t)h << 16; return v.f;
}
static inline uint16_t tt_float_to_bf16(float f) {
  union { float f; uint32_t u; } v; v.f = f;
  uint32_t rounded = v.u + 0x7fffu + ((v.u >> 16) & 1u);
  return (uint16_t)((((v.u & 0x7fffffffu) > 0x7f800000u) ? (v.u | 0x00400000u) : rounded) >> 16);
}
static inline float tt_bf16_round(float f) { return tt_bf16_to_float(tt_float_to_bf16(f)); }
"""

_F32 = {"exp": "tt_expf", "log": "logf", "sqrt": "sqrtf", "tanh": "tt_tanhf", "abs": "fabsf", "erf": "tt_erff",
        "cos": "cosf", "sin": "sinf"}
_F64 = {"exp": "exp", "log": "log", "sqrt": "sqrt", "tanh": "tanh", "abs": "fabs", "erf": "erf", "cos": "cos", "sin": "sin"}
_COMPARE = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


def storage_type(dtype: str) -> str:
    """The C element type of a buffer. A bool is one byte, as NumPy stores it, and `_Bool`
    rather than `unsigned char`: GCC 12.2 (-O3 -march=native, AVX-512) vectorizes a float
    select on `unsigned char` conditions with one mask register for several vectors of
    floats, without shifting it, and so computes wrong values; on `_Bool` it does not."""
    return "_Bool" if dtype == "bool" else c_type(dtype)


def generate_c(func: LoweredFunc, threads: int | None = None, partition: bool = True) -> str:
    """The C source of `func` (one exported function named `func.name`); parallel loops
    use `threads` threads (default: OpenMP's, i.e. every core or $OMP_NUM_THREADS). With
    `partition`, guarded tails are first split off full tiles (`te.partition`)."""
    if partition:
        from ..te.partition import partition_tails
        func = partition_tails(func)
    return _CodeGen(func, threads).run()


class _CodeGen:
    def __init__(self, func: LoweredFunc, threads: int | None = None) -> None:
        self.func = func
        self.threads = threads
        self.names: dict[object, str] = {}
        self.taken = set(_C_KEYWORDS) | {func.name}
        self.ranges: dict[Expr, Range] = {}
        self.lines: list[str] = []
        self.arguments = set(func.args)
        loops = [s for s in walk_stmts(func.body) if isinstance(s, For)]
        short: dict[str, set[str]] = {}
        for f in loops:
            short.setdefault(f.loop, set()).add(f.var.name)
        for b in func.args:
            self._name(b, b.name)
        for s in walk_stmts(func.body):
            if isinstance(s, Allocate) and s.buffer not in self.names:  # (partitioned copies share buffers)
                self._name(s.buffer, s.buffer.name)
        for f in loops:
            self.ranges[f.var] = (0, f.extent - 1)
            if f.var not in self.names:
                self._name(f.var, f.loop if len(short[f.loop]) == 1 else f.var.name)

    def _name(self, key: object, text: str) -> str:
        base = re.sub(r"\W", "_", text) or "v"
        if base[0].isdigit():
            base = "v" + base
        name, n = base, 1
        while name in self.taken:
            name, n = f"{base}_{n}", n + 1
        self.taken.add(name)
        self.names[key] = name
        return name

    def run(self) -> str:
        written = {b.name for s in walk_stmts(self.func.body) if isinstance(s, Store) for b in [s.buffer]}
        params = []
        for b in self.func.args:
            const_ = "" if b.name in written else "const "
            params.append(f"{const_}{self.storage(b)}* restrict {self.names[b]}")
        self.lines.append(f"int {self.func.name}({', '.join(params)}) {{")
        heap: list[Buffer] = []
        body = self.func.body
        while isinstance(body, Allocate) and body.buffer.scope == "global":
            heap.append(body.buffer)
            body = body.body
        for b in heap:
            t = self.storage(b)
            self.lines.append(f"  {t}* restrict {self.names[b]} = ({t}*)tt_alloc({b.size}ul * sizeof({t}));")
        if heap:
            cond = " || ".join(f"!{self.names[b]}" for b in heap)
            frees = " ".join(f"free({self.names[b]});" for b in heap)
            self.lines.append(f"  if ({cond}) {{ {frees} return 1; }}")
        self.stmt(body, 1)
        for b in heap:
            self.lines.append(f"  free({self.names[b]});")
        self.lines.append("  return 0;")
        self.lines.append("}")
        body = "\n".join(self.lines)
        prelude = _PRELUDE + _BF16_PRELUDE if "uint16_t" in body or "tt_bf16" in body else _PRELUDE
        return prelude + "\n" + body + "\n"

    def storage(self, b: Buffer) -> str:
        """The C element type of a buffer (bfloat16 temporaries hold float)."""
        return storage_type(stored_dtype(b.dtype, b in self.arguments))

    def is_bf16(self, b: Buffer) -> bool:
        return stored_dtype(b.dtype, b in self.arguments) == "bfloat16"

    # -- statements --

    def stmt(self, s: Stmt, depth: int) -> None:
        pad = "  " * depth
        if isinstance(s, Seq):
            for c in s.stmts:
                self.stmt(c, depth)
        elif isinstance(s, For):
            v = self.names[s.var]
            if s.kind == "parallel" and s.extent > 1:  # (one iteration: no threads to start)
                nt = f" num_threads({self.threads})" if self.threads else ""
                self.lines.append(f"{pad}#pragma omp parallel for schedule(static){nt}")
            elif s.kind == "vectorize":
                self.lines.append(f"{pad}#pragma omp simd")
            elif s.kind == "unroll":
                self.lines.append(f"{pad}#pragma GCC unroll {s.extent}")
            self.lines.append(f"{pad}for (int {v} = 0; {v} < {s.extent}; ++{v}) {{")
            self.stmt(s.body, depth + 1)
            self.lines.append(f"{pad}}}")
        elif isinstance(s, IfThenElse):
            self.lines.append(f"{pad}if ({self.expr(s.cond)}) {{")
            self.stmt(s.then, depth + 1)
            self.lines.append(f"{pad}}}")
        elif isinstance(s, Store):
            value = self.expr(s.value)
            if self.is_bf16(s.buffer):
                value = f"tt_float_to_bf16({value})"
            self.lines.append(f"{pad}{self.access(s.buffer, s.indices)} = {value};")
        elif isinstance(s, Allocate):
            self.allocate(s, depth)
        else:
            raise TypeError(f"cannot generate C for {type(s).__name__}")

    def allocate(self, s: Allocate, depth: int) -> None:
        pad = "  " * depth
        b, name, t = s.buffer, self.names[s.buffer], self.storage(s.buffer)
        bytes_ = b.size * itemsize(stored_dtype(b.dtype, b in self.arguments))
        self.lines.append(f"{pad}{{")
        if bytes_ <= STACK_LIMIT:
            self.lines.append(f"{pad}  {t} {name}[{b.size}] __attribute__((aligned(64)));")
            self.stmt(s.body, depth + 1)
        else:
            self.lines.append(f"{pad}  {t}* restrict {name} = ({t}*)tt_alloc({b.size}ul * sizeof({t}));")
            self.lines.append(f"{pad}  if (!{name}) abort();")
            self.stmt(s.body, depth + 1)
            self.lines.append(f"{pad}  free({name});")
        self.lines.append(f"{pad}}}")

    def access(self, b: Buffer, indices: tuple[Expr, ...]) -> str:
        flat: Expr = const(0)
        stride = 1
        for ix, n in zip(reversed(indices), reversed(b.shape)):
            flat = Binary("add", flat, ix if stride == 1 else Binary("mul", ix, const(stride)))
            stride *= n
        return f"{self.names[b]}[{self.expr(normalize_index(flat))}]"

    # -- expressions --

    def expr(self, e: Expr) -> str:
        if isinstance(e, Const):
            return _literal(e)
        if isinstance(e, Var):
            return self.names.get(e) or re.sub(r"\W", "_", e.name)
        if isinstance(e, BufferLoad):
            load = self.access(e.buffer, e.indices)
            return f"tt_bf16_to_float({load})" if self.is_bf16(e.buffer) else load
        if isinstance(e, Binary):
            a, b = self.expr(e.a), self.expr(e.b)
            if e.op in ("min", "max"):
                return f"tt_{e.op}_{_value_type(e.dtype) if e.dtype != 'float16' else 'float'}({a}, {b})"
            if e.op in ("floordiv", "mod"):
                if self._nonneg(e.a) and isinstance(e.b, Const) and int(e.b.value) > 0:
                    return f"({a} {'/' if e.op == 'floordiv' else '%'} {b})"
                return f"tt_floor{'div' if e.op == 'floordiv' else 'mod'}({a}, {b})"
            return f"({a} {dict(add='+', sub='-', mul='*', div='/')[e.op]} {b})"
        if isinstance(e, Compare):
            return f"({self.expr(e.a)} {_COMPARE[e.op]} {self.expr(e.b)})"
        if isinstance(e, Logical):
            # without loads or calls both sides are cheap and safe: `&` keeps the condition
            # branch-free, which lets GCC if-convert (and vectorize) what it guards
            cheap = not any(isinstance(x, (BufferLoad, Call)) for x in walk(e))
            op = ("&" if cheap else "&&") if e.op == "and" else ("|" if cheap else "||")
            return f"({self.expr(e.a)} {op} {self.expr(e.b)})"
        if isinstance(e, Not):
            return f"(!{self.expr(e.a)})"
        if isinstance(e, Select):
            return f"({self.expr(e.cond)} ? {self.expr(e.then)} : {self.expr(e.other)})"
        if isinstance(e, Cast):
            if e.dtype == "bfloat16":
                return f"tt_bf16_round((float){self.expr(e.value)})"
            return f"(({c_type(e.dtype)}){self.expr(e.value)})"
        if isinstance(e, Call):
            return self.call(e)
        raise TypeError(f"cannot generate C for {e!r}")

    def call(self, e: Call) -> str:
        x = self.expr(e.args[0])
        if e.dtype == "float64":
            fn, one = _F64, "1.0"
        else:
            fn, one = _F32, "1.0f"
            if e.dtype == "float16":
                x = f"((float){x})"
        if e.name == "sigmoid":
            out = f"({one} / ({one} + {fn['exp']}(-{x})))"
        else:
            out = f"{fn[e.name]}({x})"
        return f"((_Float16){out})" if e.dtype == "float16" else out

    def _nonneg(self, e: Expr) -> bool:
        r = interval(e, self.ranges)
        return r is not None and r[0] >= 0


def _value_type(dtype: str) -> str:
    """The C type expressions of `dtype` are computed in."""
    return "float" if dtype == "bfloat16" else c_type(dtype)


def _literal(c: Const) -> str:
    if c.dtype == "bool":
        return "1" if c.value else "0"
    if not is_float(c.dtype):
        return f"({c.value})" if int(c.value) < 0 else str(int(c.value))
    v = float(c.value)
    if v != v:
        text = "NAN"
    elif v in (float("inf"), float("-inf")):
        text = "INFINITY" if v > 0 else "(-INFINITY)"
    else:
        text = repr(v)
        if c.dtype != "float64":
            text += "f"
        if v < 0:
            text = f"({text})"
    return f"((_Float16){text})" if c.dtype == "float16" else text
