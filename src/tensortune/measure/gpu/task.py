"""What a GPU worker runs: a launch function, described arguments, a reference, a timer.

`GpuTask` is small and picklable: it travels to the worker once per worker start, and
the worker makes the arguments itself from their descriptions. Functions are given
either as module-level callables (pickled by reference) or as "module:qualname"
strings, resolved in the worker.

`launch(config, *args)` starts the candidate's GPU work (it need not synchronise), e.g.

    def launch(config, a, b, c, M, N, K):
        grid = (triton.cdiv(M, config["BLOCK_M"]) * triton.cdiv(N, config["BLOCK_N"]),)
        matmul_kernel[grid](a, b, c, M, N, K, **config)

`reference(*args)` computes the right answer from the same (fresh, unmodified)
arguments: it either returns the expected value of each checked argument (one tensor,
or a tuple in argument order) or writes them in place and returns None. Without a
reference, the first configuration whose outputs are all finite becomes the reference
for the others.

Example:
    >>> from tensortune.measure.gpu import TensorArg
    >>> task = GpuTask("tensortune.measure.gpu.fakes:launch",
    ...                (TensorArg((8,)), TensorArg((8,), output=True)),
    ...                reference="tensortune.measure.gpu.fakes:reference", device="cpu")
    >>> len(task.digest)
    16
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..cuda_timer import CudaTimer
from .args import TensorArg


@dataclass(frozen=True)
class GpuTask:
    """One kernel with one set of arguments, to run candidates of in a worker."""

    launch: Callable[..., Any] | str
    args: tuple[Any, ...]
    reference: Callable[..., Any] | str | None = None
    seed: int = 0
    device: str = "cuda"  # "cpu" for TRITON_INTERPRET=1 and tests
    rtol: float | None = None
    atol: float | None = None
    timer: Any = field(default_factory=CudaTimer)
    check_after_timing: bool = True  # compare outputs again after the timed runs
    health_check: Callable[[], bool] | str | None = None  # None: a CUDA synchronise and allocation
    name: str = ""
    # the kernel does not say which arguments it writes: find out (measure.agreement), compare only
    # the elements the reference wrote, and without a reference elect one from the first candidates
    infer_roles: bool = False
    arg_names: tuple[str, ...] = ()  # names of the arguments, for messages

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", tuple(self.args))
        if not (callable(self.launch) or isinstance(self.launch, str)):
            raise TypeError(f"launch must be a callable or 'module:name', got {self.launch!r}")
        if not any(isinstance(a, TensorArg) and a.checked for a in self.args):
            raise ValueError("a GpuTask needs at least one TensorArg with output=, restore= or zero= "
                             "set, so results can be checked")

    @property
    def checked_indices(self) -> tuple[int, ...]:
        return tuple(i for i, a in enumerate(self.args) if isinstance(a, TensorArg) and a.checked)

    @property
    def digest(self) -> str:
        """Identifies the arguments and functions (same digest: same inputs and outputs)."""
        text = repr((_name_of(self.launch), self.args, _name_of(self.reference), self.seed, self.device,
                     self.infer_roles))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _name_of(fn: Any) -> str:
    if fn is None or isinstance(fn, str):
        return str(fn)
    module = getattr(fn, "__module__", "")
    qualname = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return f"{module}:{qualname}:{fn!r}" if not hasattr(fn, "__qualname__") else f"{module}:{qualname}"


def resolve(ref: Callable[..., Any] | str) -> Callable[..., Any]:
    """A callable from itself or from "package.module:name.attr"."""
    if callable(ref):
        return ref
    module_name, sep, qualname = ref.partition(":")
    if not sep or not qualname:
        raise ValueError(f"expected 'module:name', got {ref!r}")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj
