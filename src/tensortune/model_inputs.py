"""A model and its example inputs from text: a `MODULE:NAME` factory and input specs.

What `tensortune model tune` and the fleet's `model` jobs share. An input spec is a
shape, a dtype and, for integers, the range of its values (`1x128:int64:0-50257`;
floats are drawn from a normal distribution). The factory returns a model, or
(model, example_inputs).

Example:
    >>> parse_input("2x128:int64:0-1000")
    ((2, 128), 'int64', (0, 1000))
    >>> parse_input("4x64")
    ((4, 64), 'float32', (0, 100))
"""

from __future__ import annotations

import os
from typing import Any

InputSpec = tuple[tuple[int, ...], str, tuple[int, int]]


def parse_input(text: str) -> InputSpec:
    """`2x128:int64:0-1000` -> ((2, 128), "int64", (0, 1000)); dtype defaults to float32."""
    parts = text.split(":")
    try:
        shape = tuple(int(s) for s in parts[0].lower().split("x") if s)
    except ValueError:
        raise ValueError(f"--input {text!r}: the shape must be numbers joined by x, e.g. 2x128") from None
    if not shape or any(s <= 0 for s in shape):
        raise ValueError(f"--input {text!r}: the shape must be positive numbers")
    dtype = parts[1] if len(parts) > 1 and parts[1] else "float32"
    low, high = 0, 100
    if len(parts) > 2:
        try:
            low, high = (int(v) for v in parts[2].split("-"))
        except ValueError:
            raise ValueError(f"--input {text!r}: the range must be LOW-HIGH, e.g. 0-50257") from None
        if high <= low:
            raise ValueError(f"--input {text!r}: the range is empty")
    return shape, dtype, (low, high)


def make_input(spec: InputSpec, device: str) -> Any:
    import torch
    shape, dtype, (low, high) = spec
    dt = getattr(torch, dtype, None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r}")
    if dt.is_floating_point:
        return torch.randn(shape, device=device).to(dt)
    if dt == torch.bool:
        return torch.rand(shape, device=device) < 0.5
    return torch.randint(low, high, shape, device=device, dtype=dt)


def tensors_device(target: str) -> str:
    """Where the tensors of a model compiled for `target` live: the GPU target under
    Triton's interpreter (TRITON_INTERPRET=1) runs on CPU tensors."""
    interpreted = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
    return "cpu" if target in ("cuda", "gpu") and interpreted else target


def load_model(factory: str, inputs: list[str] | tuple[str, ...], device: str) -> tuple[Any, list[Any]]:
    """Import `factory`, build its model in eval mode on `device` and its example inputs
    (the factory's own, else made from `inputs`). A ValueError, ImportError,
    AttributeError, FileNotFoundError or TypeError says what is wrong."""
    import torch

    from .frontends.triton.offline import load_object

    specs = [parse_input(text) for text in inputs]
    make = load_object(factory)
    if not callable(make):
        raise TypeError(f"FACTORY {factory!r} is a {type(make).__name__}, not a function that returns a model")
    made = make()
    model, examples = (made[0], list(made[1])) if isinstance(made, (tuple, list)) else (made, None)
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"FACTORY {factory!r} returned a {type(model).__name__}, not a torch.nn.Module")
    if examples is None:
        if not specs:
            raise ValueError("FACTORY returned a model alone: describe its inputs with --input")
        examples = [make_input(spec, device) for spec in specs]
    model = model.to(device).eval()
    return model, [x.to(device) if isinstance(x, torch.Tensor) else x for x in examples]
