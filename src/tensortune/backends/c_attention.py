"""Fused attention for the CPU: scores, softmax and the weighted sum of values in one C kernel.

The kernel computes the attention stages the pattern analysis recognises (an
`AttentionPlan`, the same one the GPU's flash-attention kernel is generated from: see
`backends.triton.patterns_attention`) without writing the scores to memory. One OpenMP
task takes BLOCK_M queries of one batch index. It evaluates its query tile once (the
graph's query expression: a rotary embedding, say), then loops over the keys in BLOCK_N
blocks with an online softmax (FlashAttention's scheme): the block's key and value
tiles are evaluated into local buffers (values whose rows are contiguous float32 are
read in place), the scores of the
block computed, the graph's logit expression applied (scale, a given mask loaded per
block, the causal select; mask terms of the key alone computed once per block), the running row max updated, the accumulator and the running
sum rescaled by `exp(old max - new max)`, and the weights multiplied with the value
tile. With BLOCK_N at least the keys, the whole row is one block: a single pass with
the row in a local buffer.

Both products are register-blocked on GCC vector types of 16 floats: the scores keep
ROWS query rows times two vectors of keys in registers while stepping along the head
dimension of a transposed key tile ([head, key], so the keys are contiguous); the
weighted sum keeps ROWS rows times up to four vectors of value columns while stepping
along the keys. Tiles are padded to whole vectors with zeros. A causal bound `key <= query + c` skips key blocks above the
diagonal and drops its condition on blocks wholly below it. A fully masked row gets the
graph's value (zeros when the graph guards it, NaN otherwise), as the stages give.

Example:
    >>> from tensortune.te import workloads
    >>> from tensortune.backends.triton.patterns import analyze
    >>> plan = analyze(workloads.attention(1, 2, 32, 32, 16, "float32", causal=True).output)
    >>> src = generate_attention_c(plan, {"BLOCK_M": 8, "BLOCK_N": 16, "ROWS": 4})
    >>> "int kernel(" in src and "#pragma omp parallel for" in src
    True
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..te.affine import interval
from ..te.dtype import TEError, is_float
from ..te.expr import Binary, Call, Cast, Compare, Const, Expr, Logical, Not, Select, TensorRead, Var
from ..te.tensor import Tensor
from ..te.affine import Affine
from ..te.visit import children, substitute, variables, walk, with_children
from .c_codegen import _BF16_PRELUDE, _COMPARE, _F32, _PRELUDE, _literal, storage_type
from .triton.patterns import ACC
from .triton.patterns_attention import ROWSUM, SCORE, AttentionPlan

DEFAULTS = {"BLOCK_M": 16, "BLOCK_N": 64, "ROWS": 4}
ROW_CHOICES = (1, 2, 4, 6, 8)  # query rows of a register block
VEC = 16  # floats per vector (a GCC vector type: AVX-512 registers, or two AVX ones)
STORAGE = ("float32", "bfloat16", "int32", "bool")  # element types the kernel reads and writes
LOCAL_BYTES = 512 * 1024  # per thread: the tiles are stack arrays


class AttentionCodegenError(TEError):
    """This attention plan or configuration has no C kernel; the message says why."""


def supports(plan: AttentionPlan) -> str | None:
    """Why `plan` has no C kernel (None when it has one)."""
    for t in tuple(plan.inputs) + (plan.output,):
        if t.dtype not in STORAGE:
            return f"tensor {t.name!r} is {t.dtype}; the C attention kernel reads and writes {', '.join(STORAGE)}"
    if not is_float(plan.output.dtype) and plan.output.dtype != "bfloat16":
        return f"the output is {plan.output.dtype}"
    if plan.p_dtype not in ("float32", "bfloat16"):
        return f"the weights are rounded to {plan.p_dtype}"
    for t in tuple(plan.inputs) + (plan.output,):
        if math.prod(t.shape) >= 2**31:
            return f"tensor {t.name!r} has 2**31 elements or more; indices are 32-bit"
    return None


def _up(x: int, to: int) -> int:
    return -(-x // to) * to


def tile_bytes(plan: AttentionPlan, block_m: int, block_n: int, rows: int = 8) -> int:
    """Bytes of the local tiles of one task (query, key, value, scores, accumulator, rows),
    padded to whole register blocks."""
    _, _, _, d, dv = plan.sizes
    bm, bn, dvp = _up(block_m, rows), _up(block_n, VEC), _up(dv, VEC)
    return 4 * (bm * d + bn * d + bn * dvp + bm * bn + bm * dvp + 2 * bm)


def check_config(plan: AttentionPlan, config: Mapping[str, Any]) -> dict[str, Any]:
    """`config` completed with the defaults; an unknown name or an impossible value is an error."""
    unknown = set(config) - set(DEFAULTS)
    if unknown:
        raise AttentionCodegenError(f"unknown attention parameter(s) {sorted(unknown)}; known: {sorted(DEFAULTS)}")
    c = {**DEFAULTS, **config}
    for name in ("BLOCK_M", "BLOCK_N"):
        v = c[name]
        if not isinstance(v, int) or isinstance(v, bool) or v < 1 or v > 4096:
            raise AttentionCodegenError(f"{name}={v!r} must be an integer from 1 to 4096")
    if c["ROWS"] not in ROW_CHOICES:
        raise AttentionCodegenError(f"ROWS={c['ROWS']!r} must be one of {list(ROW_CHOICES)}")
    if tile_bytes(plan, c["BLOCK_M"], c["BLOCK_N"], c["ROWS"]) > LOCAL_BYTES:
        raise AttentionCodegenError(f"BLOCK_M={c['BLOCK_M']} and BLOCK_N={c['BLOCK_N']} need "
                                    f"{tile_bytes(plan, c['BLOCK_M'], c['BLOCK_N'], c['ROWS'])} bytes of tiles per thread, "
                                    f"over {LOCAL_BYTES}")
    return c


def c_name(text: str) -> str:
    name = re.sub(r"\W", "_", text)
    return "p_" + name


def _strides(shape: Sequence[int]) -> list[int]:
    out, step = [], 1
    for s in reversed(shape):
        out.append(step)
        step *= s
    return list(reversed(out))


class CExpr:
    """C text of an expression over named kernel variables; reads of argument tensors become
    loads from their pointers (contiguous layout). Floats are computed in float, bfloat16
    loads widened, casts to bfloat16 rounded.

    Example:
        >>> from tensortune import te
        >>> X = te.placeholder((4, 8), name="X")
        >>> r, c = Var("r0"), Var("c0")
        >>> CExpr({r: "i", c: "j"}, {r: (0, 3), c: (0, 7)}).text(te.exp(X[r, c]))
        'tt_expf(p_X[((i * 8) + j)])'
    """

    def __init__(self, names: Mapping[Expr, str], ranges: Mapping[Var, tuple[int, int]]) -> None:
        self.names = dict(names)
        self.ranges = dict(ranges)

    def with_names(self, names: Mapping[Expr, str]) -> "CExpr":
        return CExpr({**self.names, **names}, self.ranges)

    def text(self, e: Expr) -> str:
        if e in self.names:
            return self.names[e]
        if isinstance(e, Const):
            return _literal(e)
        if isinstance(e, Var):
            raise AttentionCodegenError(f"variable {e.name!r} has no value in this part of the kernel")
        if isinstance(e, TensorRead):
            return self.load(e)
        if isinstance(e, Binary):
            a, b = self.text(e.a), self.text(e.b)
            if e.op in ("min", "max"):
                kind = "int" if e.dtype == "int32" else "float"
                return f"tt_{e.op}_{kind}({a}, {b})"
            if e.op in ("floordiv", "mod"):
                ra = interval(e.a, self.ranges)
                if ra is not None and ra[0] >= 0 and isinstance(e.b, Const) and int(e.b.value) > 0:
                    return f"({a} {'/' if e.op == 'floordiv' else '%'} {b})"
                return f"tt_floor{'div' if e.op == 'floordiv' else 'mod'}({a}, {b})"
            return f"({a} {dict(add='+', sub='-', mul='*', div='/')[e.op]} {b})"
        if isinstance(e, Compare):
            return f"({self.text(e.a)} {_COMPARE[e.op]} {self.text(e.b)})"
        if isinstance(e, Logical):
            # without loads both sides are cheap and safe: `&` keeps the loop branch-free (vectorizable)
            cheap = not any(isinstance(x, TensorRead) for x in walk(e))
            op = ("&" if cheap else "&&") if e.op == "and" else ("|" if cheap else "||")
            return f"({self.text(e.a)} {op} {self.text(e.b)})"
        if isinstance(e, Not):
            return f"(!{self.text(e.a)})"
        if isinstance(e, Select):
            return f"({self.text(e.cond)} ? {self.text(e.then)} : {self.text(e.other)})"
        if isinstance(e, Cast):
            inner = self.text(e.value)
            if e.dtype == "bfloat16":
                return f"tt_bf16_round((float){inner})"
            if e.dtype == "float32":
                return f"((float){inner})"
            if e.dtype == "int32":
                return f"((int){inner})"
            if e.dtype == "bool":
                return f"({inner} != 0)"
            raise AttentionCodegenError(f"a cast to {e.dtype} in the attention graph")
        if isinstance(e, Call):
            x = self.text(e.args[0])
            if e.name == "sigmoid":
                return f"(1.0f / (1.0f + tt_expf(-{x})))"
            if e.name not in _F32:
                raise AttentionCodegenError(f"no C function for {e.name!r}")
            return f"{_F32[e.name]}({x})"
        raise AttentionCodegenError(f"cannot generate C for {type(e).__name__} {e}")

    def offset(self, read: TensorRead) -> str:
        terms = []
        for idx, stride in zip(read.indices, _strides(read.tensor.shape)):
            if isinstance(idx, Const) and int(idx.value) == 0:
                continue
            t = self.text(idx)
            terms.append(t if stride == 1 else f"({t} * {stride})")
        return "(" + " + ".join(terms) + ")" if terms else "0"

    def load(self, read: TensorRead) -> str:
        t = read.tensor
        if t.op is not None:
            raise AttentionCodegenError(f"{t.name!r} is computed, not an argument of the kernel")
        access = f"{c_name(t.name)}[{self.offset(read)}]"
        return f"tt_bf16_to_float({access})" if t.dtype == "bfloat16" else access


def _store(out: Tensor, value: str) -> str:
    return f"tt_float_to_bf16({value})" if out.dtype == "bfloat16" else value


def hoist(exprs: Sequence[Expr], outer: set[Var], prefix: str) -> tuple[list[Expr], list[tuple[Var, Expr]]]:
    """`exprs` with each largest subexpression that reads memory and uses only the
    variables `outer` replaced by a fresh variable `{prefix}{k}`, and those (variable,
    subexpression) pairs: a mask gathered per key is computed once per key block, not once
    per (query, key)."""
    found: dict[Expr, Var] = {}

    def go(e: Expr) -> Expr:
        if not isinstance(e, (Const, Var)) and variables(e) <= outer and any(
                isinstance(x, TensorRead) for x in walk(e)):
            if e not in found:
                found[e] = Var(f"{prefix}{len(found)}", e.dtype)
            return found[e]
        kids = children(e)
        return with_children(e, tuple(go(k) for k in kids)) if kids else e

    rewritten = [go(e) for e in exprs]
    return rewritten, [(v, e) for e, v in found.items()]


def bool_reads(exprs: Sequence[Expr]) -> tuple[list[Expr], list[tuple[Var, Expr]]]:
    """`exprs` with each read of a bool tensor replaced by a fresh variable `hb{k}`: those
    are copied into an int row first, since GCC does not vectorize a select on a `_Bool` load."""
    found: dict[Expr, Var] = {}

    def go(e: Expr) -> Expr:
        if isinstance(e, TensorRead) and e.tensor.dtype == "bool":
            if e not in found:
                found[e] = Var(f"hb{len(found)}", "bool")
            return found[e]
        kids = children(e)
        return with_children(e, tuple(go(k) for k in kids)) if kids else e

    return [go(e) for e in exprs], [(v, e) for e, v in found.items()]


def _c_value_type(dtype: str) -> str:
    return "float" if is_float(dtype) or dtype == "bfloat16" else "int"


_VECTOR_TYPES = """typedef float tt_v __attribute__((vector_size(64), __may_alias__));
typedef float tt_vu __attribute__((vector_size(64), __may_alias__, aligned(4)));
"""


def direct_values(plan: AttentionPlan) -> TensorRead | None:
    """The read of the values when it is a plain float32 read whose last index is the value
    column (so a row of values is contiguous) and there are whole vectors of columns."""
    v = plan.v_factor
    if not isinstance(v, TensorRead) or v.tensor.op is not None or v.tensor.dtype != "float32":
        return None
    e = plan.value.var
    if plan.value.extent % VEC or any(e in variables(i) for i in v.indices[:-1]):
        return None
    rest = Affine.of(Binary("sub", v.indices[-1], e))  # the last index must be (something) + e
    if any(e in variables(atom) for atom, _ in rest.terms):
        return None
    return v


def _value_vectors(dvp: int, rows: int) -> int:
    """Vectors of value columns per register block of the weighted sum (at most 24 accumulators)."""
    for u in (4, 3, 2, 1):
        if (dvp // VEC) % u == 0 and rows * u <= 24:
            return u
    return 1


def _scores_block(d: int, bmp: int, bnp: int, rows: int) -> list[str]:
    """s[i][j] = sum_k q[i][k] * kb[k][j], `rows` x `ju` vectors of accumulators at a time."""
    ju = 2 if (bnp // VEC) % 2 == 0 else 1
    acc = [[f"c{r}_{u}" for u in range(ju)] for r in range(rows)]
    lines = [f"      for (int ib = 0; ib < {bmp}; ib += {rows}) {{",
             f"        for (int jv = 0; jv < {bnp}; jv += {VEC * ju}) {{",
             "          " + " ".join(f"tt_v {a} = {{0}};" for row in acc for a in row),
             f"          for (int k0 = 0; k0 < {d}; ++k0) {{"]
    lines += [f"            const tt_v kv{u} = *(const tt_v*)&kb[k0][jv + {VEC * u}];" for u in range(ju)]
    for r in range(rows):
        lines.append(f"            {{ const float qs = q[ib + {r}][k0]; "
                     + " ".join(f"{acc[r][u]} += qs * kv{u};" for u in range(ju)) + " }")
    lines += ["          }"]
    lines += ["          " + " ".join(f"*(tt_v*)&s[ib + {r}][jv + {VEC * u}] = {acc[r][u]};" for u in range(ju))
              for r in range(rows)]
    return lines + ["        }", "      }"]


def _values_block(bmp: int, dvp: int, rows: int, direct: str | None = None) -> list[str]:
    """acc[i][e] += sum_j s[i][j] * vb[j][e] over the block's keys, `rows` x `eu` vectors at a
    time; with `direct` (the address of value row j, column 0), the values are read where
    they are instead of from the tile."""
    eu = _value_vectors(dvp, rows)
    acc = [[f"a{r}_{u}" for u in range(eu)] for r in range(rows)]
    lines = [f"      for (int ib = 0; ib < {bmp}; ib += {rows}) {{",
             f"        for (int ev = 0; ev < {dvp}; ev += {VEC * eu}) {{"]
    lines += ["          " + " ".join(f"tt_v {acc[r][u]} = *(tt_v*)&acc[ib + {r}][ev + {VEC * u}];" for u in range(eu))
              for r in range(rows)]
    lines += ["          for (int j = 0; j < nj; ++j) {"]
    if direct is not None:
        lines += ["            const int n0 = j0 + j;", f"            const float* vr = &{direct};"]
        lines += [f"            const tt_vu vv{u} = *(const tt_vu*)&vr[ev + {VEC * u}];" for u in range(eu)]
    else:
        lines += [f"            const tt_v vv{u} = *(const tt_v*)&vb[j][ev + {VEC * u}];" for u in range(eu)]
    for r in range(rows):
        lines.append(f"            {{ const float p = s[ib + {r}][j]; "
                     + " ".join(f"{acc[r][u]} += p * vv{u};" for u in range(eu)) + " }")
    lines += ["          }"]
    lines += ["          " + " ".join(f"*(tt_v*)&acc[ib + {r}][ev + {VEC * u}] = {acc[r][u]};" for u in range(eu))
              for r in range(rows)]
    return lines + ["        }", "      }"]


def generate_attention_c(plan: AttentionPlan, config: Mapping[str, Any], args: Sequence[Tensor] | None = None,
                         name: str = "kernel") -> str:
    """The C source of `plan` under `config` (BLOCK_M, BLOCK_N, ROWS): one function
    `int name(args...)` returning 0, its arguments `args` (default: the plan's inputs,
    then its output) as contiguous arrays."""
    why = supports(plan)
    if why is not None:
        raise AttentionCodegenError(f"no C attention kernel: {why}")
    c = check_config(plan, config)
    args = list(args) if args is not None else list(plan.inputs) + [plan.output]
    names = [t.name for t in args]
    if plan.output.name not in names or any(t.name not in names for t in plan.inputs):
        raise AttentionCodegenError(f"the arguments {names} must hold the inputs and the output of the attention")
    nb, sq, skv, d, dv = plan.sizes
    rows = c["ROWS"]
    bm, bn = min(c["BLOCK_M"], sq), min(c["BLOCK_N"], skv)
    bmp, bnp, dvp = _up(bm, rows), _up(bn, VEC), _up(dv, VEC)
    m_blocks = -(-sq // bm)
    causal = plan.causal
    batch = plan.batch
    ranges = {a.var: (0, a.extent - 1) for a in batch + (plan.query, plan.key, plan.head, plan.value)}
    bnames = {a.var: f"b{k}" for k, a in enumerate(batch)}
    scale = _literal(Const(float(plan.exp_scale), "float32"))

    def em(**extra: str) -> CExpr:
        mapping: dict[Expr, str] = dict(bnames)
        for key, value in extra.items():
            mapping[{"m": plan.query.var, "n": plan.key.var, "k": plan.head.var, "e": plan.value.var,
                     "score": SCORE, "rowsum": ROWSUM, "acc": ACC}[key]] = value
        return CExpr(mapping, ranges)

    v_read = direct_values(plan)
    direct = None
    if v_read is not None:  # row j of the values at column 0
        zero = TensorRead(v_read.tensor, tuple(v_read.indices[:-1]) + (
            substitute(v_read.indices[-1], {plan.value.var: Const(0, "int32")}),))
        direct = f"{c_name(v_read.tensor.name)}[{em(n='n0').offset(zero)}]"
    params = []
    for t in args:
        const = "" if t.name == plan.output.name else "const "
        params.append(f"{const}{storage_type(t.dtype)}* restrict {c_name(t.name)}")
    lines = [f"int {name}({', '.join(params)}) {{"]
    sched = "dynamic, 1" if causal is not None else "static"
    lines += [f"  #pragma omp parallel for schedule({sched})",
              f"  for (int task = 0; task < {nb * m_blocks}; ++task) {{",
              f"    const int pb = task / {m_blocks};",
              # causal: the query blocks with the most keys first
              f"    const int mb = {f'{m_blocks - 1} - ' if causal is not None else ''}task % {m_blocks};"]
    rest = "pb"
    for k in reversed(range(len(batch))):
        ext = batch[k].extent
        lines.append(f"    const int b{k} = {rest} % {ext};" if k else f"    const int b{k} = {rest};")
        if k:
            lines.append(f"    const int pb{k} = {rest} / {ext};")
            rest = f"pb{k}"
    lines += [f"    const int i0 = mb * {bm};",
              f"    const int mi = {sq} - i0 < {bm} ? {sq} - i0 : {bm};",
              f"    float q[{bmp}][{d}] __attribute__((aligned(64)));",
              f"    float kb[{d}][{bnp}] __attribute__((aligned(64)));",
              *([] if direct else [f"    float vb[{bnp}][{dvp}] __attribute__((aligned(64)));"]),
              f"    float s[{bmp}][{bnp}] __attribute__((aligned(64)));",
              f"    float acc[{bmp}][{dvp}] __attribute__((aligned(64)));",
              f"    float mrow[{bmp}], lrow[{bmp}];",
              # padding is zero: key columns past the keys, value columns past dv, query rows past mi
              "    memset(acc, 0, sizeof acc);",
              f"    for (int i = mi; i < {bmp}; ++i) memset(q[i], 0, sizeof q[i]);",
              *([f"    for (int k = 0; k < {d}; ++k) for (int j = {bn}; j < {bnp}; ++j) kb[k][j] = 0.0f;"]
                if bnp != bn else []),
              *([f"    for (int j = 0; j < {bnp}; ++j) for (int e = {dv}; e < {dvp}; ++e) vb[j][e] = 0.0f;"]
                if dvp != dv and not direct else []),
              f"    for (int i = 0; i < {bmp}; ++i) {{ mrow[i] = -INFINITY; lrow[i] = 0.0f; }}",
              "    for (int i = 0; i < mi; ++i) {",
              "      const int m0 = i0 + i;",
              f"      for (int k0 = 0; k0 < {d}; ++k0) q[i][k0] = {em(m='m0', k='k0').text(plan.q_factor)};",
              "    }"]
    if causal is not None:
        lines.append(f"    int hi = i0 + mi + {causal};")
        lines.append(f"    hi = hi < 0 ? 0 : hi > {skv} ? {skv} : hi;")
    else:
        lines.append(f"    const int hi = {skv};")
    k_text = em(n="n0", k="k0").text(plan.k_factor)
    v_text = em(n="n0", e="e0").text(plan.v_factor)
    lines += [f"    for (int j0 = 0; j0 < hi; j0 += {bn}) {{",
              f"      const int nj = hi - j0 < {bn} ? hi - j0 : {bn};",
              "      for (int j = 0; j < nj; ++j) {",
              "        const int n0 = j0 + j;",
              f"        for (int k0 = 0; k0 < {d}; ++k0) kb[k0][j] = {k_text};",
              *([] if direct else [f"        for (int e0 = 0; e0 < {dv}; ++e0) vb[j][e0] = {v_text};"]),
              "      }",
              f"      if (nj < {bn}) for (int k = 0; k < {d}; ++k) for (int j = nj; j < {bn}; ++j) kb[k][j] = 0.0f;"]
    lines += _scores_block(d, bmp, bnp, rows)
    full = f"nj == {bn}" + (f" && j0 + {bn - 1} <= i0 + {causal}" if causal is not None else "")
    outer = {a.var for a in batch}
    (logits_inside, logits), per_key = hoist([plan.logits_inside, plan.logits], outer | {plan.key.var}, "hk")
    (logits_inside, logits), per_row = hoist([logits_inside, logits], outer | {plan.query.var}, "hr")
    (logits_inside, logits), per_score = bool_reads([logits_inside, logits])
    in_loop = {**{v: f"{v.name}[j]" for v, _ in per_key + per_score}, **{v: v.name for v, _ in per_row}}
    inside = em(m="m0", n="n0", score="s[i][j]").with_names(in_loop).text(logits_inside)
    masked = em(m="m0", n="n0", score="s[i][j]").with_names(in_loop).text(logits)
    if per_key:
        lines += [f"      {_c_value_type(e.dtype)} {v.name}[{bnp}] __attribute__((aligned(64)));" for v, e in per_key]
        lines += ["      for (int j = 0; j < nj; ++j) {", "        const int n0 = j0 + j;"]
        lines += [f"        {v.name}[j] = {em(n='n0').text(e)};" for v, e in per_key]
        lines += ["      }"]
    round_p = "tt_bf16_round(p)" if plan.p_dtype == "bfloat16" else "p"
    lines += [f"      const int whole = {full};",
              "      for (int i = 0; i < mi; ++i) {",
              "        const int m0 = i0 + i;",
              *[f"        const {_c_value_type(e.dtype)} {v.name} = {em(m='m0').text(e)};" for v, e in per_row],
              *[f"        int {v.name}[{bnp}] __attribute__((aligned(64)));" for v, _ in per_score],
              *(["        for (int j = 0; j < nj; ++j) { const int n0 = j0 + j; "
                 + " ".join(f"{v.name}[j] = {em(m='m0', n='n0').with_names({w: w.name for w, _ in per_row}).text(e)};"
                            for v, e in per_score) + " }"] if per_score else []),
              "        if (whole) {",
              "          #pragma omp simd",
              f"          for (int j = 0; j < {bn}; ++j) {{ const int n0 = j0 + j; s[i][j] = {inside}; }}",
              f"          for (int j = {bn}; j < {bnp}; ++j) s[i][j] = -INFINITY;",
              "        } else {",
              f"          for (int j = 0; j < nj; ++j) {{ const int n0 = j0 + j; s[i][j] = {masked}; }}",
              f"          for (int j = nj; j < {bnp}; ++j) s[i][j] = -INFINITY;",
              "        }",
              "        float mx = mrow[i];",
              "        #pragma omp simd reduction(max:mx)",
              f"        for (int j = 0; j < {bnp}; ++j) mx = s[i][j] > mx ? s[i][j] : mx;",
              "        const float mu = mx == -INFINITY ? 0.0f : mx;",
              f"        const float alpha = tt_expf({scale} * (mrow[i] - mu));",
              f"        const float shift = {scale} * mu;",
              "        float sum = 0.0f;",
              "        #pragma omp simd reduction(+:sum)",
              f"        for (int j = 0; j < {bnp}; ++j) {{",
              f"          const float p = tt_expf({scale} * s[i][j] - shift);",
              f"          sum += p; s[i][j] = {round_p};",
              "        }",
              "        lrow[i] = lrow[i] * alpha + sum;",
              "        mrow[i] = mx;",
              "        #pragma omp simd",
              f"        for (int e = 0; e < {dvp}; ++e) acc[i][e] *= alpha;",
              "      }",
              f"      for (int i = mi; i < {bmp}; ++i) memset(s[i], 0, sizeof s[i]);"]
    lines += _values_block(bmp, dvp, rows, direct)
    lines += ["    }"]
    out = plan.output
    weight = em(m="m0", rowsum="l").text(plan.weight)
    o_expr = "acc[i][e0]" if isinstance(plan.weight, Const) and float(plan.weight.value) == 1.0 \
        else f"acc[i][e0] * {weight}"
    store = em(m="m0", e="e0", rowsum="l", acc="o")
    lines += ["    for (int i = 0; i < mi; ++i) {",
              "      const int m0 = i0 + i;",
              "      const float l = lrow[i];",
              f"      for (int e0 = 0; e0 < {dv}; ++e0) {{",
              f"        float o = {o_expr};"]
    if not plan.row_guarded:
        lines.append("        if (mrow[i] == -INFINITY) o = NAN;")
    lines += [f"        {c_name(out.name)}[{store.offset(TensorRead(out, plan.out_index))}] = "
              f"{_store(out, store.text(plan.epilogue))};",
              "      }",
              "    }",
              "  }",
              "  return 0;",
              "}"]
    body = "\n".join(lines)
    prelude = _PRELUDE + (_BF16_PRELUDE if "bf16" in body else "") + _VECTOR_TYPES
    return prelude + "\n" + body + "\n"
