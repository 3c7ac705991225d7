"""Private copies of a launch's arguments for tuning.

Tuning never touches the caller's tensors: candidates run on copies. Every argument type
a Triton kernel takes is copied as what it is: a torch tensor, a tensor reinterpreted with
`triton.reinterpret` (a wrapper over a tensor), a `TensorDescriptor` (a dataclass over a
tensor; its copy points at the copied tensor), scalars, `None` and constexpr values (kept).
Floating-point tensors are refilled with fresh random values (seeded, the same for every
candidate), so a check never passes on zeros; integer and boolean tensors keep their values
(they are often indices); `reset_to_zero` arguments start at zero, as Triton's hook makes
them. The same tensor passed twice (or under a descriptor and directly) stays one tensor.

Example:
    >>> import torch
    >>> x = torch.zeros(4)
    >>> copies = ArgSet.fresh((x, 4), {}, seed=0)
    >>> bool(copies.args[0].abs().sum() > 0), x.abs().sum().item()
    (True, 0.0)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


def is_tensor(x: Any) -> bool:
    """A torch tensor (not a wrapper or descriptor around one)."""
    return hasattr(x, "data_ptr") and hasattr(x, "detach") and hasattr(x, "dtype")


def is_wrapper(x: Any) -> bool:
    """A tensor reinterpreted as another dtype (`triton.reinterpret`)."""
    return type(x).__name__ == "TensorWrapper" and is_tensor(getattr(x, "base", None))


def is_descriptor(x: Any) -> bool:
    """A tensor descriptor (`triton.tools.tensor_descriptor.TensorDescriptor` and the like)."""
    return dataclasses.is_dataclass(x) and not isinstance(x, type) and is_tensor(getattr(x, "base", None))


def underlying(x: Any) -> Any | None:
    """The torch tensor an argument reads and writes, or None for a non-tensor argument."""
    if is_tensor(x):
        return x
    if is_wrapper(x) or is_descriptor(x):
        return x.base
    return None


def rebuilt(x: Any, tensor: Any) -> Any:
    """`x` over `tensor` instead of its own (a copy of a wrapper or descriptor)."""
    if is_tensor(x):
        return tensor
    if is_wrapper(x):
        return type(x)(tensor, x.dtype)
    if is_descriptor(x):
        return dataclasses.replace(x, base=tensor)
    return x


@dataclass
class ArgSet:
    """Positional and keyword arguments of one launch, with tensors as private copies."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    @staticmethod
    def fresh(args: Sequence[Any], kwargs: Mapping[str, Any], seed: int = 0, random: bool = True,
              names: Sequence[str] = (), zero: Collection[str] = ()) -> "ArgSet":
        """Copies of the arguments; float tensors get random normal values if `random`,
        the arguments named in `zero` (by `names`, the kernel's argument names) zeros."""
        import torch

        generators: dict[Any, Any] = {}
        zeroed = {id(underlying(v)) for n, v in (*zip(names, args), *kwargs.items())
                  if n in zero and underlying(v) is not None}

        def fill(out: Any, original: Any) -> None:
            if id(original) in zeroed:
                out.zero_()
            elif random and out.is_floating_point() and out.numel():
                gen = generators.get(out.device)
                if gen is None:
                    gen = generators[out.device] = torch.Generator(device=out.device).manual_seed(seed)
                out.copy_(torch.randn(out.shape, generator=gen, device=out.device, dtype=torch.float32).to(out.dtype))

        return _copied(args, kwargs, fill)

    def clone(self) -> "ArgSet":
        return _copied(self.args, self.kwargs, None)

    def leaves(self, names: Sequence[str]) -> list[tuple[str, Any]]:
        """(name, tensor) for every distinct tensor the arguments hold (a descriptor's or a
        wrapper's under the argument's name); positional ones named by `names`."""
        out: list[tuple[str, Any]] = []
        seen: set[int] = set()
        for name, value in self.items(names):
            t = underlying(value)
            if t is not None and id(t) not in seen:
                seen.add(id(t))
                out.append((name, t))
        return out

    def items(self, names: Sequence[str]) -> Iterator[tuple[str, Any]]:
        for i, a in enumerate(self.args):
            yield (names[i] if i < len(names) else f"arg{i}"), a
        yield from self.kwargs.items()

    def restore_from(self, other: "ArgSet", names: Sequence[str] = ()) -> None:
        """Copy every tensor's values from `other` (a set of the same shapes)."""
        for (_, mine), (_, theirs) in zip(self.leaves(names), other.leaves(names)):
            mine.copy_(theirs)

    def named(self, names: Sequence[str]) -> dict[str, Any]:
        return {**dict(zip(names, self.args)), **self.kwargs}


def _copied(args: Sequence[Any], kwargs: Mapping[str, Any], fill: Callable[[Any, Any], None] | None) -> ArgSet:
    made: dict[int, Any] = {}  # the same tensor passed twice stays one tensor

    def copy(x: Any) -> Any:
        t = underlying(x)
        if t is None:
            return x
        if id(t) not in made:
            out = t.detach().clone()
            if fill is not None:
                fill(out, t)
            made[id(t)] = out
        return rebuilt(x, made[id(t)])

    return ArgSet(tuple(copy(a) for a in args), {k: copy(v) for k, v in kwargs.items()})


