"""One C call runs a sequence of compiled CPU kernels.

Calling each kernel from Python costs a ctypes call, a list of pointers and the
bookkeeping of the plan's loop; in a model of small kernels (a decode step) that is a
visible share of the call. A `NativeSequence` holds the kernels' C functions and, for
each, the slots of a pointer table its arguments come from; `run()` calls them all, in
order, from one C function (`tt_run_sequence`, compiled once and cached like any kernel),
which can also time each kernel (the report's per-step times on the CPU).
Slots that hold planned buffers are filled once; the others (graph inputs, fresh outputs)
before each run.

Example (two calls of a C function through the table):
    >>> import ctypes, torch
    >>> from tensortune.backends.c_compiler import CCompiler, load_function
    >>> lib = CCompiler().compile("int twice(float* x, float* y) "
    ...                           "{ for (int i = 0; i < 4; i++) y[i] = 2 * x[i]; return 0; }")
    >>> fn = load_function(lib, "twice", ["float*", "float*"], restype="int")
    >>> address = ctypes.cast(fn, ctypes.c_void_p).value
    >>> x, y, z = torch.ones(4), torch.empty(4), torch.empty(4)
    >>> seq = NativeSequence([(address, (0, 1)), (address, (1, 2))], slots=3)
    >>> for k, t in enumerate((x, y, z)): seq.set(k, t.data_ptr())
    >>> seq.run()
    0
    >>> z.tolist()
    [4.0, 4.0, 4.0, 4.0]
    >>> failed, seconds = seq.timed()    # each kernel's wall time, measured in C
    >>> failed, len(seconds)
    (0, 2)
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

MAX_ARGS = 48  # a kernel with more arguments is called from Python


def _source(max_args: int) -> str:
    cases = []
    for n in range(1, max_args + 1):
        params = ", ".join(["void*"] * n)
        args = ", ".join(f"t[a[{k}]]" for k in range(n))
        cases.append(f"    case {n}: r = ((int (*)({params}))fns[i])({args}); break;")
    body = "\n".join(cases)
    return f"""#include <stdint.h>
#include <time.h>
static double tt_now(int thread_clock) {{
  struct timespec ts;
  clock_gettime(thread_clock ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}}
/* Calls n kernels in order; kernel i takes nargs[i] pointers, table[args[...]]. With
   `seconds`, adds each kernel's wall time (with thread_clock, the calling thread's CPU
   time) to seconds[i].
   Returns 0, i + 1 when kernel i returned non-zero, or -(i + 1) for an arity it lacks. */
int tt_run_sequence(int n, void* const* fns, const int32_t* nargs, const int32_t* args, void* const* table,
                    double* seconds, int thread_clock) {{
  const int32_t* a = args;
  void* const* t = table;
  for (int i = 0; i < n; i++) {{
    int r;
    double start = seconds ? tt_now(thread_clock) : 0.0;
    switch (nargs[i]) {{
{body}
    default: return -(i + 1);
    }}
    if (seconds) seconds[i] += tt_now(thread_clock) - start;
    if (r != 0) return i + 1;
    a += nargs[i];
  }}
  return 0;
}}
"""


@lru_cache(maxsize=1)
def _runner() -> Any:
    from ..backends.c_compiler import CCompiler, load_function
    library = CCompiler().compile(_source(MAX_ARGS))
    return load_function(library, "tt_run_sequence", ["int", "void*", "void*", "void*", "void*", "void*", "int"],
                         restype="int")


def function_address(fn: Any) -> int:
    """The address of a ctypes function (what `NativeSequence` calls)."""
    address = ctypes.cast(fn, ctypes.c_void_p).value
    if not address:
        raise ValueError(f"{fn!r} has no address")
    return address


class NativeSequence:
    """Kernels `(address, slots of its arguments)` called in order from C over a table of
    `slots` pointers (see the module docstring)."""

    def __init__(self, calls: Sequence[tuple[int, Sequence[int]]], slots: int) -> None:
        for address, args in calls:
            if not 1 <= len(args) <= MAX_ARGS:
                raise ValueError(f"a kernel of {len(args)} arguments cannot be called natively (1 to {MAX_ARGS})")
            if any(not 0 <= a < slots for a in args):
                raise ValueError(f"argument slots {list(args)} outside the table of {slots}")
        self.count = len(calls)
        self.table = (ctypes.c_void_p * max(slots, 1))()
        self._fns = (ctypes.c_void_p * max(self.count, 1))(*[a for a, _ in calls])
        self._nargs = (ctypes.c_int32 * max(self.count, 1))(*[len(s) for _, s in calls])
        flat = [k for _, s in calls for k in s]
        self._args = (ctypes.c_int32 * max(len(flat), 1))(*flat)
        self._fn = _runner()

    def set(self, slot: int, pointer: int) -> None:
        self.table[slot] = pointer

    def run(self, seconds: Any = None, thread_time: bool = False) -> int:
        """0, or k + 1 where kernel k failed (returned non-zero). `seconds`: a ctypes array
        of `count` doubles, to which each kernel's wall time is added (`thread_time`: the
        calling thread's CPU time instead, which a machine's other work does not inflate
        when the kernels run on one thread)."""
        return self._fn(self.count, self._fns, self._nargs, self._args, self.table, seconds, int(thread_time))

    def timed(self, thread_time: bool = False) -> tuple[int, list[float]]:
        """`run()`, and each kernel's time in seconds (measured in C, around each call)."""
        seconds = (ctypes.c_double * max(self.count, 1))()
        failed = self.run(seconds, thread_time)
        return failed, list(seconds)[:self.count]
