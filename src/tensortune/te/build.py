"""`te.build`: lower a schedule, generate C, compile it and call it on NumPy arrays.

Example:
    >>> import numpy as np
    >>> from tensortune import te
    >>> A = te.placeholder((3, 4), name="A")
    >>> T = te.compute((4, 3), lambda i, j: A[j, i], name="T")
    >>> f = te.build(te.create_schedule(T), [A, T])
    >>> a = np.arange(12, dtype="float32").reshape(3, 4)
    >>> bool((f(a) == a.T).all())
    True
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .arrays import as_numpy, is_torch_tensor, to_torch
from .dtype import HALF_TYPES, TEError, numpy_dtype
from .ir import LoweredFunc
from .schedule import Schedule
from .tensor import Tensor


@dataclass(frozen=True)
class Kernel:
    """A compiled program. Call it with the inputs (outputs are allocated and returned)
    or with every argument in `args` order (outputs are written in place and returned).
    Arrays are NumPy arrays (bfloat16: `ml_dtypes.bfloat16`) or torch CPU tensors, used
    in place; given only torch tensors, it returns torch tensors."""

    schedule: Schedule
    args: tuple[Tensor, ...]
    func: LoweredFunc  # the schedule lowered (the C code also splits guarded tails off full tiles)
    source: str
    library: Path
    flags: tuple[str, ...]
    _fn: Any

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return tuple(t for t in self.args if t.is_placeholder)

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        return tuple(t for t in self.args if not t.is_placeholder)

    def __call__(self, *arrays: Any) -> Any:
        if len(arrays) == len(self.args):
            names = [t.name for t in self.args]
        elif len(arrays) == len(self.inputs):
            names = [t.name for t in self.inputs]
        else:
            raise TEError(f"kernel takes its {len(self.inputs)} inputs ({', '.join(t.name for t in self.inputs)}) "
                          f"or all {len(self.args)} arguments, got {len(arrays)} arrays")
        as_torch = bool(arrays) and all(is_torch_tensor(a) for a in arrays)  # allocated outputs follow
        given = {name: as_numpy(a, f"argument {name!r}") for name, a in zip(names, arrays)}
        for t in self.outputs:
            if t.name not in given:
                given[t.name] = np.empty(t.shape, numpy_dtype(t.dtype))
        ptrs = []
        for t in self.args:
            arr = given[t.name]
            if arr.dtype != numpy_dtype(t.dtype) or arr.shape != t.shape:
                raise TEError(f"argument {t.name!r} must be {t.dtype}{list(t.shape)}, got {arr.dtype}{list(arr.shape)}")
            if not t.is_placeholder:
                if not (arr.flags.c_contiguous and arr.flags.writeable):
                    raise TEError(f"output {t.name!r} must be a writable C-contiguous array")
                for other in self.args:
                    if other is not t and np.may_share_memory(arr, given[other.name]):
                        raise TEError(f"output {t.name!r} shares memory with argument {other.name!r}")
            else:
                arr = given[t.name] = np.ascontiguousarray(arr)
            ptrs.append(arr.ctypes.data)
        if self._fn(*ptrs) != 0:
            raise MemoryError(f"kernel {self.func.name!r} could not allocate its temporaries")
        passed = dict(zip(names, arrays))
        outs = tuple(passed[t.name] if t.name in passed  # written in place: returned as given
                     else to_torch(given[t.name]) if as_torch else given[t.name] for t in self.outputs)
        return outs[0] if len(outs) == 1 else outs

    def problem(self, rtol: float | None = None, atol: float | None = None) -> Any:
        """This kernel as a `CProblem`, for timing in an isolated worker (`CRunner`) with a
        check against the NumPy interpreter on fresh random inputs."""
        from ..backends.c_kernel import ArrayArg, CProblem
        arrays = tuple(ArrayArg(t.name, t.shape, t.dtype, "in" if t.is_placeholder else "out") for t in self.args)
        tol = default_tolerance(self.args)
        return CProblem(self.source, self.func.name, arrays,
                        functools.partial(reference_outputs, self.outputs),
                        rtol=tol if rtol is None else rtol, atol=tol if atol is None else atol, flags=self.flags)


def default_tolerance(args: Sequence[Tensor]) -> float | None:
    """Programs with float16 or bfloat16 values anywhere (arguments or stages in between:
    a sum rounded to bfloat16 and then widened can land on the neighbouring value) get
    2e-2; float32 programs with reductions 1e-3 (summation order differs); else None."""
    from .tensor import graph
    tensors = graph([t for t in args if not t.is_placeholder])
    if any(t.dtype in HALF_TYPES for t in list(args) + tensors):
        return 2e-2
    if any(t.op is not None and t.op.reduce_axes for t in tensors) and any(t.dtype == "float32" for t in args):
        return 1e-3
    return None


def reference_outputs(outputs: tuple[Tensor, ...], **arrays: np.ndarray) -> dict[str, np.ndarray]:
    """The interpreter's values of `outputs` (a picklable reference for CProblem)."""
    from .interpret import evaluate
    inputs = {k: v for k, v in arrays.items() if k not in {t.name for t in outputs}}
    return dict(zip((t.name for t in outputs), evaluate(list(outputs), inputs)))


def c_source(schedule: Schedule | Tensor | Sequence[Tensor], args: Sequence[Tensor] | None = None,
             name: str = "kernel", threads: int | None = None) -> str:
    """The C source `build` would compile (compile it with `CCompiler().compile(source,
    extra_flags=c_codegen.FLAGS)`)."""
    from ..backends.c_codegen import generate_c
    if not isinstance(schedule, Schedule):
        schedule = Schedule(schedule)
    return generate_c(schedule.lower(name, args), threads)


def build(schedule: Schedule | Tensor | Sequence[Tensor], args: Sequence[Tensor] | None = None,
          target: str = "c", name: str = "kernel", compiler: Any = None, threads: int | None = None) -> Kernel:
    """Compile a schedule (or, given tensors, their default schedule) into a `Kernel`.
    `args` orders the arguments (default: inputs, then outputs); `threads` fixes the
    number of threads of parallel loops (default: every core, or $OMP_NUM_THREADS)."""
    if target not in ("c", "cpu"):
        raise TEError(f"te.build compiles C for the CPU (target='c'), not {target!r}; GPU kernels come from "
                      "te.autoschedule(..., target='cuda')")
    if not isinstance(schedule, Schedule):
        schedule = Schedule(schedule)
    if not name.isidentifier():
        raise TEError(f"kernel name {name!r} is not a C identifier")
    from ..backends.c_codegen import FLAGS, generate_c
    from ..backends.c_compiler import CCompiler, load_function
    func = schedule.lower(name, args)
    for b in func.args:
        if math.prod(b.shape) >= 2**31:
            raise TEError(f"tensor {b.name!r} has 2**31 elements or more; indices are 32-bit")
    source = generate_c(func, threads)
    compiler = compiler or CCompiler()
    library = compiler.compile(source, {}, FLAGS)
    fn = load_function(library, name, [f"{b.dtype}*" for b in func.args], restype="int")
    tensors = {t.name: t for t in list(schedule.inputs) + list(schedule.outputs)}
    return Kernel(schedule, tuple(tensors[b.name] for b in func.args), func, source, Path(library), FLAGS, fn)
