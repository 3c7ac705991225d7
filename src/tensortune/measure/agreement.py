"""Checking kernels that do not say what they write: roles, written elements, consensus.

A Triton kernel's arguments are just pointers: nothing says which are outputs. The role of
each checked tensor is found by running one implementation (the reference function, or a
candidate) on pristine values, then again with every tensor it changed poisoned (NaN for
floats, the largest value for integers):

- `OUTPUT`: written only; the elements still poisoned after the second run were not written.
  Before every checking run it is poisoned, so an element a candidate leaves unwritten shows.
- `INPLACE`: read and written (its old values matter): restored before every run, compared whole.
- `INPUT`: not written: restored before every run; a candidate that writes it is wrong.
- `IGNORED`: restored, never compared (a reference returning {name: expected} checks only those).

Only the elements the reference wrote are compared (a causal kernel leaves half of its output
alone by design). Without a reference function, the first few candidates are compared with
each other and the largest group that agrees becomes the reference (`elect`), so one wrong
configuration cannot become the yardstick that fails every right one. Two candidates agree
when they match where both wrote, and what only one of them wrote is a constant (the zeros a
tile across a causal mask writes) or at most half of what it wrote (tiles of another size
across a causal boundary); the elements every member of the group wrote are compared. A
check that compares less than a quarter of the outputs is weak. The election says how
strong the check was: `consensus` when at least two configurations agreed, `weak` otherwise.

Example:
    >>> import torch
    >>> x, y = torch.randn(8), torch.empty(8)
    >>> def run(): y[:4] = x[:4] * 2            # writes half of y
    >>> roles, outcome = infer_roles(run, [x, y], [x.clone(), torch.randn(8)], names=["x", "y"])
    >>> roles, int(outcome.written[1].sum())
    (['input', 'output'], 4)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .tolerance import tolerance_for

OUTPUT, INPLACE, INPUT = "output", "inplace", "input"
IGNORED = "ignored"  # restored before every run, never compared (a reference that names what it checks)

POOL = 3  # candidates compared with each other before a reference is elected
POOL_LIMIT = 5  # ... or up to this many when no two of the first agree


def tolerance_of(t: Any, override: "float | Mapping[str, float] | None" = None) -> float:
    name = str(t.dtype).removeprefix("torch.")
    if isinstance(override, Mapping):
        if name in override:
            return float(override[name])
    elif override is not None:
        return float(override)
    return tolerance_for(name)


def poisonable(t: Any) -> bool:
    import torch

    return t.dtype != torch.bool and not t.dtype.is_complex


def poison_(t: Any) -> Any:
    """Fill with NaN (floats) or the largest value (integers): what no kernel writes by chance."""
    import torch

    if t.dtype.is_floating_point:
        return t.fill_(float("nan"))
    return t.fill_(torch.iinfo(t.dtype).max)


def unwritten(t: Any) -> Any:
    """The elements of a poisoned tensor that still hold the poison."""
    import torch

    if t.dtype.is_floating_point:
        return torch.isnan(t)
    return t == torch.iinfo(t.dtype).max


def _same(a: Any, b: Any) -> bool:
    import torch

    if a.dtype.is_floating_point:
        return bool(torch.equal(torch.isnan(a), torch.isnan(b))) and bool(
            torch.equal(torch.nan_to_num(a, nan=0.0), torch.nan_to_num(b, nan=0.0)))
    return bool(torch.equal(a, b))


@dataclass(frozen=True)
class Outcome:
    """The checked tensors after one run: their values and, per OUTPUT tensor, the elements
    written (None: compared whole)."""

    values: tuple[Any, ...]
    written: tuple[Any, ...]

    @property
    def compared(self) -> tuple[int, int]:
        """(elements compared, elements in all): how much of the output a check looks at."""
        seen = total = 0
        for v, w in zip(self.values, self.written):
            total += v.numel()
            seen += v.numel() if w is None else int(w.sum())
        return seen, total


def prepare(tensors: Sequence[Any], pristine: Sequence[Any], roles: Sequence[str]) -> None:
    """Before a checking run: outputs poisoned, everything else back to its pristine values."""
    for t, p, role in zip(tensors, pristine, roles):
        if role == OUTPUT:
            poison_(t)
        else:
            t.copy_(p)


def snapshot(tensors: Sequence[Any], roles: Sequence[str]) -> Outcome:
    values = tuple(t.detach().clone() for t in tensors)
    return Outcome(values, tuple(~unwritten(v) if r == OUTPUT else None for v, r in zip(values, roles)))


def named_outcome(returned: Mapping[str, Any], names: Sequence[str], tensors: Sequence[Any]
                  ) -> tuple[list[str], Outcome]:
    """Roles and expected values from a reference that returned {argument name: expected}:
    those arguments are compared whole, the others never."""
    unknown = sorted(set(map(str, returned)) - set(names))
    if unknown:
        raise ValueError(f"the reference returned {unknown}, which are not tensor arguments "
                         f"(the tensor arguments are {list(names)})")
    given = {str(k): v for k, v in returned.items()}
    roles = [INPLACE if n in given else IGNORED for n in names]
    values = tuple(given[n].detach().to(t.dtype) if n in given else t.detach().clone()
                   for n, t in zip(names, tensors))
    return roles, Outcome(values, tuple(None for _ in names))


def infer_roles(run: Callable[[], object], tensors: Sequence[Any], pristine: Sequence[Any],
                names: Sequence[str] = (), tolerance: "float | Mapping[str, float] | None" = None,
                sync: Callable[[], None] = lambda: None) -> tuple[list[str], Outcome]:
    """Run `run` (which reads and writes `tensors`) on pristine values, then with what it
    changed poisoned; the roles of the tensors and what the run computed."""
    n = len(tensors)
    prepare(tensors, pristine, [INPUT] * n)
    run()
    sync()
    first = [t.detach().clone() for t in tensors]
    roles = [INPUT if _same(a, p) else (OUTPUT if poisonable(a) else INPLACE) for a, p in zip(first, pristine)]
    for _ in range(2):  # an in-place tensor poisoned can spoil an output computed from it: once more without
        if OUTPUT not in roles:
            break
        prepare(tensors, pristine, roles)
        run()
        sync()
        demoted = False
        for i, t in enumerate(tensors):
            if roles[i] != OUTPUT:
                continue
            wrote = ~unwritten(t)
            same = differs(_name(names, i), t[wrote], first[i][wrote], tolerance_of(t, tolerance)) is None
            if not (same and _same(first[i][~wrote], pristine[i][~wrote])):
                roles[i], demoted = INPLACE, True
        if not demoted:
            return roles, snapshot(tensors, roles)
    roles = [INPLACE if r == OUTPUT else r for r in roles]
    return roles, Outcome(tuple(first), tuple(None for _ in range(n)))


def differs(name: str, actual: Any, expected: Any, tol: float) -> str | None:
    """Why `actual` does not match `expected` (same shapes), or None. Floats match within
    `tol` x the largest expected magnitude (at least 1), NaN where the expected has NaN;
    integers and booleans exactly."""
    import torch

    if tuple(actual.shape) != tuple(expected.shape):
        return f"argument {name!r}: shape {tuple(actual.shape)} != expected {tuple(expected.shape)}"
    if actual.numel() == 0:
        return None
    if not expected.dtype.is_floating_point:
        if torch.equal(actual, expected):
            return None
        return f"argument {name!r}: {int((actual != expected).sum())} of {actual.numel()} values differ"
    a = actual.detach().to(torch.float64 if expected.dtype == torch.float64 else torch.float32)
    e = expected.detach().to(a.dtype)
    if not bool(torch.equal(torch.isnan(a), torch.isnan(e))):
        return f"argument {name!r}: NaN where the reference has none (or the reverse)"
    finite = torch.isfinite(e)
    if not bool(torch.equal(a[~finite & ~torch.isnan(e)], e[~finite & ~torch.isnan(e)])):
        return f"argument {name!r}: infinities differ from the reference's"
    if not bool(torch.isfinite(a[finite]).all()):
        return f"argument {name!r}: infinity where the reference is finite"
    if not bool(finite.any()):
        return None
    scale = float(e[finite].abs().max())
    err = float((a[finite] - e[finite]).abs().max())
    if err > tol * max(scale, 1.0):
        return (f"argument {name!r}: max abs error {err:.3g} exceeds {tol:g} x "
                f"max(|expected| = {scale:.3g}, 1)")
    return None


def mismatch(outcome: Outcome, expected: Outcome, roles: Sequence[str], names: Sequence[str] = (),
             tolerance: "float | Mapping[str, float] | None" = None) -> str | None:
    """Why a candidate's outcome is wrong, or None: every element the reference wrote must be
    written and match; inputs and in-place tensors must match whole."""
    for i, (v, e, need, role) in enumerate(zip(outcome.values, expected.values, expected.written, roles)):
        name = _name(names, i)
        if role == IGNORED:
            continue
        if role == OUTPUT and need is not None:
            missing = int((need & unwritten(v)).sum())
            if missing:
                return (f"argument {name!r}: {missing} of {int(need.sum())} elements the reference wrote "
                        "were left unwritten")
            why = differs(name, v[need], e[need], tolerance_of(v, tolerance))
        else:
            why = differs(name, v, e, tolerance_of(v, tolerance))
        if why:
            return why
    return None


def agree(a: Outcome, b: Outcome, roles: Sequence[str],
          tolerance: "float | Mapping[str, float] | None" = None) -> bool:
    """Whether two candidates computed the same thing where both wrote."""
    for va, vb, wa, wb, role in zip(a.values, b.values, a.written, b.written, roles):
        if role == IGNORED:
            continue
        tol = tolerance_of(va, tolerance)
        if role == OUTPUT and wa is not None and wb is not None:
            both = wa & wb
            if bool(wa.any()) != bool(wb.any()):
                return False
            common, na, nb = int(both.sum()), int(wa.sum()), int(wb.sum())
            if not (_constant(va[wa & ~wb]) and _constant(vb[wb & ~wa])) and 2 * common < max(na, nb):
                return False  # one wrote much the other left alone, and not padding: not the same computation
            why = differs("", va[both], vb[both], tol)
        else:
            why = differs("", va, vb, tol)
        if why:
            return False
    return True


@dataclass(frozen=True)
class Election:
    """The reference agreed on by the first candidates, and how strong a check it makes."""

    expected: Outcome
    members: tuple[int, ...]  # positions in the pool of the candidates that agreed
    pooled: int
    strength: str  # "consensus": at least two agreed; "weak": no two did (or only one ran)

    @property
    def note(self) -> str:
        seen, total = self.expected.compared
        if self.pooled == 1:
            what = "only one configuration ran: nothing to compare it with"
        elif len(self.members) < 2:
            what = f"no two of {self.pooled} configurations agreed: the first is the reference"
        elif self.strength == "weak":
            what = f"{len(self.members)} of {self.pooled} configurations agreed on less than a quarter of the outputs"
        else:
            what = f"{len(self.members)} of {self.pooled} configurations agreed"
        return f"{what}; {seen} of {total} elements compared"


def elect(pool: Sequence[Outcome], roles: Sequence[str],
          tolerance: "float | Mapping[str, float] | None" = None) -> Election:
    """The largest group of agreeing outcomes (the earliest among equals) becomes the
    reference; only the elements every member wrote are compared later."""
    if not pool:
        raise ValueError("nothing to elect a reference from")
    groups: list[list[int]] = []
    for i, o in enumerate(pool):
        for g in groups:
            if agree(pool[g[0]], o, roles, tolerance):
                g.append(i)
                break
        else:
            groups.append([i])
    best = max(groups, key=len)
    leader = pool[best[0]]
    written = []
    for j, w in enumerate(leader.written):
        if w is None:
            written.append(None)
            continue
        both = w.clone()
        for m in best[1:]:
            other = pool[m].written[j]
            if other is not None:
                both &= other
        written.append(both)
    expected = Outcome(leader.values, tuple(written))
    outputs = [(v, w) for v, w, r in zip(leader.values, written, roles) if r == OUTPUT and w is not None]
    total = sum(v.numel() for v, _ in outputs)
    too_little = total > 0 and 4 * sum(int(w.sum()) for _, w in outputs) < total
    strong = len(best) >= 2 and not too_little
    return Election(expected, tuple(best), len(pool), "consensus" if strong else "weak")


def _constant(values: Any) -> bool:
    """Whether elements hold one value (the zeros a masked tile writes, say), or none at all."""
    return values.numel() == 0 or bool((values == values.reshape(-1)[0]).all())


def _name(names: Sequence[str], i: int) -> str:
    return names[i] if i < len(names) else f"argument {i}"
