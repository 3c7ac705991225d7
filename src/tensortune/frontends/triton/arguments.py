"""Private copies of a launch's arguments for tuning, and the correctness check.

Tuning never touches the caller's tensors: candidates run on copies. Floating-point
tensors are refilled with fresh random values (seeded, the same for every candidate),
so a check never passes on zeros; integer and boolean tensors keep their values (they
are often indices). Before each check the copies are restored from the pristine set,
so kernels that write in place are checked from the same starting state each time.

Example:
    >>> import torch
    >>> x = torch.zeros(4)
    >>> copies = ArgSet.fresh((x, 4), {}, seed=0)
    >>> bool(copies.args[0].abs().sum() > 0), x.abs().sum().item()
    (True, 0.0)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...measure import WrongResult

# relative tolerance, as a fraction of the largest expected magnitude, by dtype name
TOLERANCES: dict[str, float] = {
    "float16": 1e-2, "bfloat16": 2e-2, "float32": 1e-3, "float64": 1e-7,
    "float8_e4m3fn": 1.25e-1, "float8_e5m2": 2.5e-1, "float8_e4m3fnuz": 1.25e-1, "float8_e5m2fnuz": 2.5e-1,
}


def is_tensor(x: Any) -> bool:
    return hasattr(x, "data_ptr") and hasattr(x, "clone") and hasattr(x, "dtype")


def _dtype_name(t: Any) -> str:
    return str(t.dtype).removeprefix("torch.")


@dataclass
class ArgSet:
    """Positional and keyword arguments of one launch, with tensors as private copies."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    @staticmethod
    def fresh(args: Sequence[Any], kwargs: Mapping[str, Any], seed: int = 0,
              random: bool = True) -> "ArgSet":
        """Copies of the arguments; float tensors get random normal values if `random`."""
        import torch

        gen_by_device: dict[Any, Any] = {}
        made: dict[int, Any] = {}  # the same tensor passed twice stays one tensor

        def copy(x: Any) -> Any:
            if not is_tensor(x):
                return x
            if id(x) in made:
                return made[id(x)]
            out = x.detach().clone()
            if random and out.is_floating_point() and out.numel():
                gen = gen_by_device.get(out.device)
                if gen is None:
                    gen = torch.Generator(device=out.device).manual_seed(seed)
                    gen_by_device[out.device] = gen
                values = torch.randn(out.shape, generator=gen, device=out.device, dtype=torch.float32)
                out.copy_(values.to(out.dtype))
            made[id(x)] = out
            return out

        return ArgSet(tuple(copy(a) for a in args), {k: copy(v) for k, v in kwargs.items()})

    def clone(self) -> "ArgSet":
        made: dict[int, Any] = {}

        def copy(x: Any) -> Any:
            if not is_tensor(x):
                return x
            if id(x) not in made:
                made[id(x)] = x.detach().clone()
            return made[id(x)]

        return ArgSet(tuple(copy(a) for a in self.args), {k: copy(v) for k, v in self.kwargs.items()})

    def tensors(self, names: Sequence[str]) -> Iterator[tuple[str, Any]]:
        """(name, tensor) for every tensor argument; positional ones named by `names`."""
        for i, a in enumerate(self.args):
            if is_tensor(a):
                yield (names[i] if i < len(names) else f"arg{i}"), a
        for k, v in self.kwargs.items():
            if is_tensor(v):
                yield k, v

    def restore_from(self, other: "ArgSet") -> None:
        """Copy every tensor's values from `other` (a set of the same shapes)."""
        done: set[int] = set()
        for mine, theirs in zip(self._all(), other._all()):
            if is_tensor(mine) and id(mine) not in done:
                mine.copy_(theirs)
                done.add(id(mine))

    def named(self, names: Sequence[str]) -> dict[str, Any]:
        return {**dict(zip(names, self.args)), **self.kwargs}

    def _all(self) -> list[Any]:
        return [*self.args, *(self.kwargs[k] for k in sorted(self.kwargs))]


def tolerance_for(tensor: Any, override: "float | Mapping[str, float] | None" = None) -> float:
    name = _dtype_name(tensor)
    if isinstance(override, Mapping):
        if name in override:
            return float(override[name])
    elif override is not None:
        return float(override)
    return TOLERANCES.get(name, 0.0)


def compare(name: str, actual: Any, expected: Any,
            tolerance: "float | Mapping[str, float] | None" = None) -> None:
    """Raise WrongResult (naming the argument) unless `actual` matches `expected`.

    Floats match within `tolerance` times the largest expected magnitude (at least 1);
    NaN must be where the expected has NaN; integers and booleans match exactly.
    """
    import torch

    if tuple(actual.shape) != tuple(expected.shape):
        raise WrongResult(f"argument {name!r}: shape {tuple(actual.shape)} != expected {tuple(expected.shape)}")
    if not expected.is_floating_point():
        if not torch.equal(actual, expected.to(actual.dtype)):
            wrong = int((actual != expected.to(actual.dtype)).sum())
            raise WrongResult(f"argument {name!r}: {wrong} of {actual.numel()} values differ")
        return
    tol = tolerance_for(expected, tolerance)
    a = actual.detach().to(torch.float64 if expected.dtype == torch.float64 else torch.float32)
    e = expected.detach().to(a.dtype)
    if a.numel() == 0:
        return
    finite = torch.isfinite(e)
    if not bool(torch.equal(torch.isnan(a), torch.isnan(e))) or not bool(
            torch.equal(a[~finite & ~torch.isnan(e)], e[~finite & ~torch.isnan(e)])):
        raise WrongResult(f"argument {name!r}: NaN or infinity where the reference has none (or the reverse)")
    if not bool(torch.isfinite(a[finite]).all()):
        raise WrongResult(f"argument {name!r}: NaN or infinity where the reference is finite")
    scale = float(e[finite].abs().max()) if bool(finite.any()) else 0.0
    err = float((a[finite] - e[finite]).abs().max()) if bool(finite.any()) else 0.0
    if err > tol * max(scale, 1.0):
        raise WrongResult(f"argument {name!r}: max abs error {err:.3g} exceeds {tol:g} x "
                          f"max(|expected| = {scale:.3g}, 1)")
