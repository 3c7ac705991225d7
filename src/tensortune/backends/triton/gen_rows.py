"""Row-reduction kernels (softmax, layer norm, RMS norm, matrix-vector) and elementwise kernels.

A rows kernel takes BLOCK_R rows per program. When BLOCK_C covers a whole row it is
one pass: the row is loaded once into registers, every reduction is computed from it
in order (each may use the earlier ones, as the variance uses the mean), and the output
is written from the same registers. Otherwise each reduction loops over the row in
BLOCK_C-wide chunks, and a last loop writes the output (reads after the first come
mostly from L2). The configuration decides BLOCK_R, BLOCK_C, num_warps and num_stages.

An elementwise kernel covers BLOCK flat output elements per program.

Example:
    >>> from tensortune.te import workloads
    >>> from tensortune.backends.triton.patterns import analyze
    >>> plan = analyze(workloads.softmax(4, 8).output)
    >>> src = generate_rows(plan, {"BLOCK_R": 2, "BLOCK_C": 8}, GenOptions())
    >>> src.text.count("tl.max("), src.text.count("tl.sum(")
    (1, 1)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...te.expr import TensorRead
from .exprgen import TL_TYPES, Emitter
from .patterns import ElementwisePlan, RowsPlan
from .source import (CodegenError, GenOptions, KernelSource, cdiv, decompose, indent, kernel_args, module_text,
                     names_of, ranges_of, shapes_of)

_IDENTITY = {"sum": "0.0", "max": '-float("inf")', "min": 'float("inf")'}
_COMBINE = {"sum": "{a} + {b}", "max": "tl.maximum({a}, {b})", "min": "tl.minimum({a}, {b})"}


def _pow2(name: str, v: Any, low: int = 1) -> int:
    if not isinstance(v, int) or v < low or v & (v - 1):
        raise CodegenError(f"{name}={v!r} must be a power of two of at least {low}")
    return v


def _config(config: Mapping[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    unknown = set(config) - set(defaults)
    if unknown:
        raise CodegenError(f"unknown parameter(s) {sorted(unknown)}; known: {sorted(defaults)}")
    c = dict(defaults)
    c.update(config)
    return c


def generate_rows(plan: RowsPlan, config: Mapping[str, Any], options: GenOptions) -> KernelSource:
    c = _config(config, {"BLOCK_R": 1, "BLOCK_C": 1024, "num_warps": 4, "num_stages": 2})
    br, bc = _pow2("BLOCK_R", c["BLOCK_R"]), _pow2("BLOCK_C", c["BLOCK_C"], 2)
    n_rows, n_cols = plan.n_rows, plan.n_cols
    args = kernel_args(plan, options)
    pointers = {a.name: a.pointer for a in args}
    storage = {a.name: a.dtype for a in args}
    out = args[-1]
    ranges = {**ranges_of(plan.rows), **ranges_of(plan.cols)}
    shapes = {**shapes_of(plan.rows, "r"), **shapes_of(plan.cols, "c")}
    row_names = names_of(plan.rows)
    even_r = n_rows % br == 0
    one_pass = bc >= n_cols
    even_c = n_cols % bc == 0
    body = ["pid = tl.program_id(0)",
            f"rr = pid * {br} + tl.arange(0, {br})",
            f"rr_in = {'rr' if even_r else f'rr % {n_rows}'}"]
    body += decompose("rr_in", plan.rows, "[:, None]")
    row_mask = "" if even_r else f"(rr < {n_rows})[:, None]"
    col_names = names_of(plan.cols)
    known: dict[Any, str] = {}
    has_cols = len(plan.out_index) > len(plan.rows)

    def columns(start: str) -> list[str]:
        lines = [f"rc = {start}tl.arange(0, {bc})"]
        if not even_c:
            lines.append(f"c_ok = (rc < {n_cols})[None, :]")
        return lines + decompose("rc", plan.cols, "[None, :]")

    col_masks = {} if even_c else {a.var: "c_ok" for a in plan.cols}
    full = f"({br}, {bc})"

    def reduce_step(em: Emitter, red: Any) -> str:
        src = em.value(red.source)
        src = em.emit(f"tl.broadcast_to({src}, {full})")
        if not even_c:
            src = em.emit(f"tl.where(c_ok, {src}, {_IDENTITY[red.combiner]})")
        return src

    def store(em: Emitter, with_cols: bool) -> list[str]:
        val = em.value(plan.value)
        if with_cols:
            val = em.emit(f"tl.broadcast_to({val}, {full})")
        else:
            val = em.emit(f"tl.broadcast_to({val}, ({br}, 1))")
        off = em.offset(TensorRead(plan.output, plan.out_index))
        masks = [m for m in (row_mask, "c_ok" if with_cols and not even_c else "") if m]
        mask = f", mask={' & '.join(masks)}" if masks else ""
        return em.lines + [f"tl.store({out.pointer} + ({off}), {val}.to({TL_TYPES[out.dtype]}){mask})"]

    if one_pass:
        body += columns("")
        em = Emitter({**row_names, **col_names}, pointers, masks=col_masks, ranges=ranges, storage=storage,
                     shapes=shapes, prefix="t")
        for i, red in enumerate(plan.reductions):
            src = reduce_step(em, red)
            name = em.emit(f"tl.{red.combiner}({src}, axis=1)[:, None]")
            em.known[TensorRead(red.tensor, tuple(a.var for a in plan.rows))] = name
        body += store(em, has_cols)
    else:
        for i, red in enumerate(plan.reductions):
            em = Emitter({**row_names, **col_names}, pointers, masks=col_masks, ranges=ranges, known=known,
                         storage=storage, shapes=shapes, prefix=f"l{i}_")
            src = reduce_step(em, red)
            step = _COMBINE[red.combiner].format(a=f"acc{i}", b=src)
            body += [f"acc{i} = tl.full({full}, {_IDENTITY[red.combiner]}, tl.float32)",
                     f"for cc in range(0, {n_cols}, {bc}):",
                     *indent(columns("cc + ") + em.lines + [f"acc{i} = {step}"], 1),
                     f"red{i} = tl.{red.combiner}(acc{i}, axis=1)[:, None]"]
            known[TensorRead(red.tensor, tuple(a.var for a in plan.rows))] = f"red{i}"
        em = Emitter({**row_names, **col_names}, pointers, masks=col_masks, ranges=ranges, known=known,
                     storage=storage, shapes=shapes, prefix="o")
        if has_cols:
            lines = store(em, True)
            body += [f"for cc in range(0, {n_cols}, {bc}):", *indent(columns("cc + ") + lines, 1)]
        else:
            body += store(em, False)
    params = ", ".join(a.pointer for a in args)
    kernel = "@triton.jit\n" + f"def tt_rows({params}):\n" + "\n".join(indent(body, 1))
    opts = f"num_warps={c['num_warps']}, num_stages={c['num_stages']}"
    launch = [f"tt_rows[({cdiv(n_rows, br)},)]({params}, {opts})"]
    pre = [f"return [tt_rows.warmup({params}, grid=(1,), {opts})]"]
    text = module_text(plan, c, [kernel], launch, pre, args)
    return KernelSource(text, tuple(a.name for a in args), tuple(a.dtype for a in args), ("tt_rows",), c)


def generate_elementwise(plan: ElementwisePlan, config: Mapping[str, Any], options: GenOptions) -> KernelSource:
    c = _config(config, {"BLOCK": 1024, "num_warps": 4, "num_stages": 1})
    block = _pow2("BLOCK", c["BLOCK"], 16)
    total = plan.size
    args = kernel_args(plan, options)
    pointers = {a.name: a.pointer for a in args}
    out = args[-1]
    even = total % block == 0
    body = ["pid = tl.program_id(0)",
            f"e = pid * {block} + tl.arange(0, {block})",
            f"e_in = {'e' if even else f'e % {total}'}"]
    body += decompose("e_in", plan.axes)
    em = Emitter(names_of(plan.axes), pointers, ranges=ranges_of(plan.axes),
                 storage={a.name: a.dtype for a in args})
    val = em.emit(f"tl.broadcast_to({em.value(plan.value)}, ({block},))")
    off = em.offset(TensorRead(plan.output, tuple(a.var for a in plan.axes)))
    mask = "" if even else f", mask=e < {total}"
    body += em.lines + [f"tl.store({out.pointer} + ({off}), {val}.to({TL_TYPES[out.dtype]}){mask})"]
    params = ", ".join(a.pointer for a in args)
    kernel = "@triton.jit\n" + f"def tt_elementwise({params}):\n" + "\n".join(indent(body, 1))
    opts = f"num_warps={c['num_warps']}, num_stages={c['num_stages']}"
    launch = [f"tt_elementwise[({cdiv(total, block)},)]({params}, {opts})"]
    pre = [f"return [tt_elementwise.warmup({params}, grid=(1,), {opts})]"]
    text = module_text(plan, c, [kernel], launch, pre, args)
    return KernelSource(text, tuple(a.name for a in args), tuple(a.dtype for a in args), ("tt_elementwise",), c)
