"""Where a Triton kernel runs: the record's target.

On a GPU the target is the device name and compute capability with the CUDA, Triton and
tensortune versions; a record tuned under another of these is not reused. Under Triton's
interpreter (TRITON_INTERPRET=1, the CPU) it is the interpreter with the CPU's name.

Example:
    >>> t = interpreter_target()
    >>> t.kind, sorted(t.versions)
    ('triton-interpreter', ['tensortune', 'triton'])
"""

from __future__ import annotations

from functools import lru_cache

from ...db import Target


@lru_cache(maxsize=1)
def interpreter_target() -> Target:
    import triton

    from ... import __version__

    cpu = Target.cpu().device
    return Target.make("triton-interpreter", cpu, "cpu",
                       {"triton": triton.__version__, "tensortune": __version__})


@lru_cache(maxsize=16)
def gpu_target(device_index: int) -> Target:
    import torch
    import triton

    from ... import __version__

    props = torch.cuda.get_device_properties(device_index)
    versions = {"triton": triton.__version__, "tensortune": __version__}
    if torch.version.cuda:
        versions["cuda"] = torch.version.cuda
    if getattr(torch.version, "hip", None):
        versions["hip"] = torch.version.hip
        return Target.make("rocm", props.name, getattr(props, "gcnArchName", ""), versions)
    return Target.make("cuda", props.name, f"sm_{props.major}{props.minor}", versions)


def current_target(interpreted: bool) -> Target:
    """The target of the next launch: the interpreter, or the current CUDA device."""
    if interpreted:
        return interpreter_target()
    import torch

    return gpu_target(torch.cuda.current_device())
