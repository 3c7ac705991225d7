"""Printing a sketch as loop-nest pseudo-code, with `?` for the extents annotation fills.

Example:
    >>> from tensortune.te import workloads
    >>> from tensortune.autoschedule.analysis import analyze
    >>> from tensortune.autoschedule.sketch import generate_sketches
    >>> w = workloads.matmul(64, 64, 64)
    >>> print(describe_sketch(generate_sketches(w.outputs)[0], analyze(w.outputs)))
    sketch C:cache_write
      parallel for i.0@j.0 (fused, ? levels)
        for i.1, j.1
          C.local = 0 over the tile                 # computed here (or one level up)
          for k.0
            for i.2, j.2
              for k.1
                unroll for i.3
                  vectorize for j.3
                    C.local[i, j] += (A[i, k] * B[k, j])
          for i.2*i.3
            vectorize for j.2*j.3
              C[i, j] = C.local[i, j]
"""

from __future__ import annotations

from .analysis import GraphInfo
from .sketch import (CACHE_WRITE, DOT, INLINE, RFACTOR, SIMPLE, TILE, TILE_CONSUMER, TILE_LOCAL, WINDOW, Sketch, packs,
                     panel_inputs, sketch_dot_axes, window_axes)


def describe_sketch(sketch: Sketch, g: GraphInfo) -> str:
    lines = [f"sketch {sketch.key}"]
    inlined = [p.stage for p in sketch.plans if p.rule == INLINE]
    if inlined:
        lines.append(f"  inlined: {', '.join(inlined)}")
    for p in sketch.plans:
        if p.rule in (INLINE, TILE_LOCAL) or (p.rule in (WINDOW, DOT) and p.partner):
            continue
        s = g[p.stage]
        sp = [a.name for a in s.spatial]
        rd = [r.name for r in s.reduce]
        if p.rule == DOT or (p.rule == TILE_CONSUMER and sketch.plan(p.partner).rule == DOT):
            src = s if p.rule == DOT else g[p.partner]
            lines += _dot(src, sketch_dot_axes(sketch, g, src.name), p.stage, "" if p.rule == DOT else _text(s))
        elif p.rule == WINDOW or (p.rule == TILE_CONSUMER and sketch.plan(p.partner).rule == WINDOW):
            src = s if p.rule == WINDOW else g[p.partner]
            local = f"{p.stage}.local" if p.rule == WINDOW else p.partner
            copy = f"{local}[...]" if p.rule == WINDOW else _text(s)
            lines += _window(src, local, p.stage, copy)
        elif p.rule in (CACHE_WRITE, TILE_CONSUMER):
            local = f"{p.stage}.local" if p.rule == CACHE_WRITE else p.partner
            src = g[p.stage] if p.rule == CACHE_WRITE else g[p.partner]
            tiled = p if p.rule == CACHE_WRITE else sketch.plan(p.partner)
            vector = tiled.vector
            packed_along = vector or (src.spatial[-1].name if tiled.pack else "")
            if packed_along:
                axis = next(a for a in src.spatial if a.name == packed_along)
                for t, dim in packs(src.tensor.op.body, axis):
                    names = [f"i{d}" for d in range(len(t.shape))]
                    order = names[:dim] + names[dim + 1:] + [names[dim]]
                    lines.append(f"  parallel for {', '.join(order)}   # packed with {packed_along} last, at the root")
                    lines.append(f"    {t.name}.local[{', '.join(order)}] = {t.name}[{', '.join(names)}]")
            if tiled.panel:
                lines += _panel_local(src, local, f"{p.stage}[{', '.join(sp)}] = "
                                      + (f"{local}[{', '.join(sp)}]" if p.rule == CACHE_WRITE else _text(s)))
                continue
            lines += _tiled_local(sp, [r.name for r in src.reduce], local, _update(src, local),
                                  p.stage, f"{p.stage}[{', '.join(sp)}] = "
                                  + (f"{local}[{', '.join(sp)}]" if p.rule == CACHE_WRITE else _text(s)), vector)
        elif p.rule == TILE:
            lines += _tiled_root(sp, rd, _update(s, p.stage))
        elif p.rule == RFACTOR:
            lines += [f"  parallel for lane.0 in ?: for {', '.join(sp)}: for {rd[0]}.o",
                      "    vectorize for lane.1 in ?",
                      f"      {p.stage}.rf[lane, {', '.join(sp)}] += ...",
                      f"  for {', '.join(sp)}: {p.stage}[...] = sum over lanes of {p.stage}.rf"]
        elif p.rule == SIMPLE:
            follows = len(s.consumers) == 1 and sketch.plan(s.consumers[0]).rule in (TILE, TILE_LOCAL, CACHE_WRITE)
            lines += _simple(sp, rd, s.name, _text(s), follows)
    return "\n".join(lines)


def _dot(s, axes, out: str, epilogue: str) -> list[str]:
    k = s.reduce[0].name
    j = axes.vector
    body = s.tensor.op.body
    update = f"{s.name}.rf[{', '.join(a.name for a in s.spatial)}, lane] += {getattr(body, 'source', body)}"
    lines = [f"  parallel for {'@'.join([*axes.batch, j + '.0'])} (? blocks of outputs)",
             f"    for {j}.1 in ?",
             f"      {s.name}.rf[...] = 0 over {', '.join([*axes.rows, j + '.2'])} x ? lanes",
             f"      for {k}.0 in ?      # {k} = {k}.0 * lanes + lane",
             f"        unroll for {j}.2 in ?, {', '.join(axes.rows) or '-'}",
             "          vectorize for lane in ?",
             f"            {update}",
             f"      for {', '.join([*axes.rows, j + '.2'])}: {s.name}[...] = sum over lanes of {s.name}.rf"]
    if epilogue:
        lines.append(f"      for {', '.join([*axes.rows, j + '.2'])}: {out}[...] = {epilogue}")
    return lines


def _text(s) -> str:
    return str(s.tensor.op.body)


def _update(s, target: str) -> str:
    body = s.tensor.op.body
    src = getattr(body, "source", body)
    op = {"sum": "+=", "max": "max=", "min": "min="}.get(getattr(body, "combiner", ""), "=")
    return f"{target}[{', '.join(a.name for a in s.spatial)}] {op} {src}"


def _tiled_local(sp, rd, local, update, stage, copy, vector="") -> list[str]:
    j = lambda lv: ", ".join(f"{a}.{lv}" for a in sp)  # noqa: E731
    if vector:
        rows = [a for a in sp if a != vector]
        laid = ", ".join(rows + [vector])
        return [
            f"  parallel for {'@'.join(a + '.0' for a in rows + [vector])} (fused, ? levels)",
            f"    for {', '.join(a + '.1' for a in rows + [vector])}",
            f"      {local}[{laid}] = 0 over the tile           # laid out {vector} last; here or one level up",
            f"      for {', '.join(r + '.0' for r in rd)}",
            f"        for {', '.join(a + '.2' for a in sp)}",
            f"          for {', '.join(r + '.1' for r in rd)}",
            f"            unroll for {', '.join(a + '.3' for a in rows)}",
            f"              vectorize for {vector}.3",
            f"                {update}",
            f"      for {', '.join(f'{a}.2*{a}.3' for a in sp[:-1])}",
            f"        vectorize for {sp[-1]}.2*{sp[-1]}.3",
            f"          {copy}",
        ]
    return [
        f"  parallel for {'@'.join(a + '.0' for a in sp)} (fused, ? levels)",
        f"    for {j(1)}",
        f"      {local} = 0 over the tile                 # computed here (or one level up)",
        f"      for {', '.join(r + '.0' for r in rd)}",
        f"        for {', '.join(a + '.2' for a in sp)}",
        f"          for {', '.join(r + '.1' for r in rd)}",
        *([f"            unroll for {', '.join(a + '.3' for a in sp[:-1])}"] if len(sp) > 1 else []),
        f"            {'  ' if len(sp) > 1 else ''}vectorize for {sp[-1]}.3",
        f"              {'  ' if len(sp) > 1 else ''}{update}",
        *([f"      for {', '.join(f'{a}.2*{a}.3' for a in sp[:-1])}"] if len(sp) > 1 else []),
        f"        {'' if len(sp) > 1 else ''}vectorize for {sp[-1]}.2*{sp[-1]}.3",
        f"          {copy}",
    ]


def _panel_local(s, local, copy) -> list[str]:
    sp, rd = [a.name for a in s.spatial], [r.name for r in s.reduce]
    last, rows = sp[-1], sp[:-1]
    panels = [f"{t.name}.local[{', '.join(f'i{d}' for d in range(len(t.shape)) if d != dim)}, i{dim}]"
              for t, dim in panel_inputs(s)]
    outer = ", ".join(a + ".0" for a in rows)
    return [
        f"  parallel for {last}.0 (and {outer} with 2 levels)",
        f"    {', '.join(panels)} = the panel of this block of {last}   # contiguous, {last} last",
        f"    for {outer}" if rows else "    (one row)",
        f"      for {', '.join(a + '.1' for a in sp)}",
        f"        {local} = 0 over the tile                 # computed here (or one level up)",
        f"        for {', '.join(r + '.0' for r in rd)}",
        f"          for {', '.join(a + '.2' for a in sp)}",
        f"            for {', '.join(r + '.1' for r in rd)}",
        *([f"              unroll for {', '.join(a + '.3' for a in rows)}"] if rows else []),
        f"                vectorize for {last}.3",
        f"                  {_update(s, local)}",
        f"        for {', '.join(f'{a}.2*{a}.3' for a in sp)}: {copy}",
    ]


def _window(s, local, stage, copy) -> list[str]:
    rows, vec = window_axes(s)
    sp = [a.name for a in s.spatial]
    outer = [a for a in sp if a not in (rows, vec)]
    blocks = ([f"{rows}.0"] if rows else []) + [f"{vec}.0"]
    tile = ([f"{rows}.1"] if rows else []) + [f"{vec}.1"]
    return [
        f"  parallel for {'@'.join(outer) or blocks[0]} (and {blocks[0]} with ? levels)",
        f"    for {', '.join(blocks)}",
        f"      {local} = 0 over the tile of ? rows x ? {vec}   # in registers",
        f"      unroll for {', '.join(r.name for r in s.reduce)}" + (f", {rows}.1" if rows else ""),
        f"        vectorize for {vec}.1",
        f"          {_update(s, local)}",
        f"      for {', '.join(tile[:-1]) or '(one row)'}: vectorize for {tile[-1]}",
        f"        {stage}[{', '.join(sp)}] = {copy}",
    ]


def _tiled_root(sp, rd, update) -> list[str]:
    return [
        f"  parallel for {'@'.join(a + '.0' for a in sp)} (fused, ? levels)",
        f"    for {', '.join(a + '.1' for a in sp)}",
        f"      for {', '.join(r + '.0' for r in rd)}",
        f"        for {', '.join(a + '.2' for a in sp)}",
        f"          for {', '.join(r + '.1' for r in rd)}",
        f"            unroll for {', '.join(a + '.3' for a in sp[:-1])}; vectorize for {sp[-1]}.3",
        f"              {update}",
    ]


def _simple(sp, rd, name, text, follows=False) -> list[str]:
    if not sp:
        return [f"  {name} = {text}"]
    outer = ", ".join(sp[:-1] + [sp[-1] + ".0"])
    note = "   # the axis its consumer's threads split first" if follows else ""
    lines = [f"  parallel for (the first ? of) {outer}{note}"]
    if rd:
        lines.append(f"    for {', '.join(rd)}")
    lines += [f"    {'  ' if rd else ''}vectorize for {sp[-1]}.1 in ?",
              f"      {'  ' if rd else ''}{name}[{', '.join(sp)}] = {text}"]
    return lines
