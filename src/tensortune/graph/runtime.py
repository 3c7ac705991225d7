"""Running a compiled graph: kernels in order over buffers planned once.

A `Plan` is the list of steps of one call: tuned kernels (C functions on the CPU, Triton
launches on the GPU), kernels evaluated by torch (a graph the target has no kernel
pattern for), ATen calls for ops outside coverage, reshapes that reuse a buffer, and
dtype conversions where torch's values (int64, bool) meet kernels' storage (int32).
Every intermediate value written by a kernel gets a buffer allocated once, reused by
values whose lifetimes do not overlap (same dtype and size); graph outputs are fresh
tensors at every call, so a caller may keep them. Constants are converted to the
kernels' storage once; a graph input is converted once per call, however many kernels
read it. Consecutive C kernels (CPU) run from one C call over a pointer table
(`native.NativeSequence`), with no Python between them.

Example (`compile` builds plans; a plan runs like the graph it came from):
    >>> import torch
    >>> from tensortune.graph.ir import Graph, Node, OutputRef, ValueInfo
    >>> g = Graph()
    >>> x = g.add(Node(0, "input", "x", (), ValueInfo((3,), "float32")))
    >>> y = g.add(Node(0, "torch", "neg", (x,), ValueInfo((3,), "float32"), call=torch.neg))
    >>> g.outputs = (OutputRef(y),)
    >>> Plan.of(g, [], "cpu")(torch.ones(3))
    (tensor([-1., -1., -1.]),)
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .interpret import as_logical, as_stored, torch_dtype
from .ir import Graph, map_outputs, te_dtype


@dataclass(frozen=True)
class NativeCall:
    """A kernel's C function: its address and, per argument, the read it takes (`-1`: the output)."""

    address: int
    order: tuple[int, ...]


@dataclass
class KernelStep:
    """A kernel: `run(inputs, out)` on tensors in its storage types. `native`: the C
    function `run` calls, which a plan may call directly instead (only while `run` is the
    function that carries it as its `native` attribute: a replaced `run` is respected)."""

    name: str
    root: int
    reads: tuple[int, ...]
    run: Callable[[Sequence[Any], Any], None]
    task: str = ""
    kind: str = "kernel"  # kernel | reference
    native: NativeCall | None = None

    @property
    def runs_natively(self) -> bool:
        return self.native is not None and getattr(self.run, "native", None) is self.native


@dataclass
class Plan:
    """The steps of one call and the buffers they use (see the module docstring)."""

    graph: Graph
    steps: list[Any]
    device: str
    buffers: dict[int, Any] = field(default_factory=dict)  # node id -> planned tensor
    aliases: dict[int, int] = field(default_factory=dict)  # alias node -> node it reshapes
    native: bool = True  # consecutive C kernels run from one C call (`run` without record/override/around)
    _constants: dict[int, Any] | None = field(default=None, repr=False)
    _segments: list[Any] | None = field(default=None, repr=False)
    _values: dict[int, Any] | None = field(default=None, repr=False)
    _cast_to: dict[int, Any] | None = field(default=None, repr=False)
    _lock: Any = field(default_factory=threading.Lock, repr=False)  # calls share the planned buffers

    @staticmethod
    def of(graph: Graph, kernels: Sequence[KernelStep], device: str, aliases: set[int] | None = None) -> "Plan":
        """A plan running `kernels` (in dependence order) and the graph's torch nodes."""
        by_root = {k.root: k for k in kernels}
        steps: list[Any] = []
        alias_of = {a: graph.nodes[a].inputs[0] for a in (aliases or set())}
        for n in graph:
            if n.id in by_root:
                steps.append(by_root[n.id])
            elif n.id in alias_of:
                steps.append(("alias", n.id))
            elif n.kind == "torch":
                steps.append(("torch", n.id))
        plan = Plan(graph, steps, device, aliases=alias_of)
        plan._plan_buffers()
        return plan

    # -- memory ------------------------------------------------------------------------------------
    def _base(self, i: int) -> int:
        while i in self.aliases:
            i = self.aliases[i]
        return i

    def _plan_buffers(self) -> None:
        import torch

        graph = self.graph
        outputs = {self._base(i) for i in graph.output_ids()}
        last_use: dict[int, int] = {}
        for pos, s in enumerate(self.steps):
            reads = s.reads if isinstance(s, KernelStep) else graph.nodes[s[1]].inputs
            for r in reads:
                last_use[self._base(r)] = pos
        free: dict[tuple[str, tuple[int, ...]], list[Any]] = {}
        pending: list[tuple[int, tuple[str, tuple[int, ...]], Any]] = []
        for pos, s in enumerate(self.steps):
            if not isinstance(s, KernelStep):
                continue
            for end, key, buf in list(pending):
                if end < pos:
                    free.setdefault(key, []).append(buf)
                    pending.remove((end, key, buf))
            root = s.root
            if root in outputs:  # allocated at every call, so a caller may keep it
                continue
            info = graph.nodes[root].info
            assert info is not None
            key = (te_dtype(info.dtype), _shape(info.shape))
            buf = free[key].pop() if free.get(key) else torch.empty(key[1], dtype=torch_dtype(key[0]),
                                                                    device=self.device)
            self.buffers[root] = buf
            pending.append((last_use.get(root, pos), key, buf))

    @property
    def planned_bytes(self) -> int:
        seen = {id(b): b.numel() * b.element_size() for b in self.buffers.values()}
        return sum(seen.values())

    # -- running -----------------------------------------------------------------------------------
    def __call__(self, *args: Any) -> Any:
        return self.run(args)

    def run(self, args: Sequence[Any], record: dict[int, Any] | None = None,
            override: dict[int, Any] | None = None, around: Callable[[int], Any] | None = None,
            seconds: dict[int, float] | None = None, thread_time: bool = False) -> Any:
        """The graph's outputs; `record` collects every value; `override` feeds given
        values (in torch form) to the steps instead of computed ones; `around(k)` is a
        context manager each step k runs in. Without these three, consecutive C kernels
        run from one C call. `seconds`: each step's wall time (`thread_time`: the calling
        thread's CPU time) is added to it, by position (C kernels of a sequence timed in C).
        Calls from several threads run one at a time: they share the planned buffers."""
        with self._lock:
            return self._run(args, record, override, around, seconds, thread_time)

    def _run(self, args: Sequence[Any], record: dict[int, Any] | None, override: dict[int, Any] | None,
             around: Callable[[int], Any] | None, seconds: dict[int, float] | None, thread_time: bool) -> Any:
        graph = self.graph
        vals: dict[int, Any] = graph.bind(args)
        vals.update(self._constant_values())
        stored: set[int] = set()
        converted: dict[int, Any] = dict(self.stored_constants()) if override is None else {}
        casts = self._casts()

        def torch_form(i: int) -> Any:
            if override is not None and i in override:
                return override[i]
            v = vals[i]
            info = graph.nodes[i].info
            return as_logical(v, info.dtype) if i in stored and info is not None else v

        def kernel_form(i: int) -> Any:
            overridden = override is not None and i in override
            if overridden:
                v, was_stored = override[i], False  # type: ignore[index]
            else:
                v = converted.get(i)
                if v is not None:
                    return v
                v, was_stored = vals[i], i in stored
            if not was_stored:
                cast = casts[i]
                if cast is not None and v.dtype != cast:
                    v = v.to(cast)
                if not v.is_contiguous():
                    v = v.contiguous()
            if v.dim() == 0:
                v = v.reshape(1)
            if not overridden:
                converted[i] = v
            return v

        if record is None and override is None and around is None and self.native and self.device == "cpu":
            for pos, item in self.segments():
                if isinstance(item, _Segment):
                    item.run(self, vals, stored, kernel_form, seconds, thread_time)
                elif seconds is None:
                    self._step(item, vals, stored, kernel_form, torch_form)
                else:
                    with _timed(seconds, pos, thread_time):
                        self._step(item, vals, stored, kernel_form, torch_form)
        else:
            for pos, s in enumerate(self.steps):
                with around(pos) if around is not None else contextlib.nullcontext():
                    if seconds is None:
                        self._step(s, vals, stored, kernel_form, torch_form)
                    else:
                        with _timed(seconds, pos, thread_time):
                            self._step(s, vals, stored, kernel_form, torch_form)
        if record is not None:
            for i in vals:
                record[i] = torch_form(i)
        return map_outputs(graph.outputs, lambda r: torch_form(r.node))

    def _constant_values(self) -> dict[int, Any]:
        if self._values is None:
            self._values = {n.id: n.value for n in self.graph if n.kind == "constant"}
        return self._values

    def _casts(self) -> dict[int, Any]:
        """Per node, the dtype its kernels store it in where that differs from torch's (int32), else None."""
        if self._cast_to is None:
            import torch
            self._cast_to = {n.id: torch.int32 if n.info is not None and te_dtype(n.info.dtype) == "int32" else None
                             for n in self.graph}
        return self._cast_to

    def stored_constants(self) -> dict[int, Any]:
        """Constants read by kernels, in the kernels' storage (converted once)."""
        if self._constants is None:
            graph = self.graph
            read = {r for s in self.steps if isinstance(s, KernelStep) for r in s.reads}
            out = {}
            for i in read:
                n = graph.nodes[i]
                if n.kind == "constant" and n.info is not None:
                    v = as_stored(n.value, n.info.dtype).contiguous()
                    out[i] = v.reshape(_shape(n.info.shape)) if v.dim() == 0 else v
            self._constants = out
        return self._constants

    def segments(self) -> list[tuple[int, Any]]:
        """(position, step) for the steps, with each run of consecutive C kernels (and
        reshapes between them) as one `_Segment` (at its first step's position). A kernel
        of more arguments than the sequence takes is called from Python."""
        if self._segments is None:
            from .native import MAX_ARGS
            out: list[tuple[int, Any]] = []
            run: list[tuple[int, Any]] = []
            for pos, s in enumerate(self.steps + [None]):
                native = isinstance(s, KernelStep) and s.runs_natively and len(s.native.order) <= MAX_ARGS
                if s is not None and (native or (isinstance(s, tuple) and s[0] == "alias" and run)):
                    run.append((pos, s))
                    continue
                trailing: list[tuple[int, Any]] = []
                while run and isinstance(run[-1][1], tuple):
                    trailing.insert(0, run.pop())
                if run:
                    out.append((run[0][0], _Segment.of(self, run)))
                out.extend(trailing)
                run = []
                if s is not None:
                    out.append((pos, s))
            self._segments = out
        return self._segments

    def _step(self, s: Any, vals: dict[int, Any], stored: set[int], kernel_form: Any, torch_form: Any) -> None:
        import torch

        graph = self.graph
        if isinstance(s, KernelStep):
            info = graph.nodes[s.root].info
            assert info is not None
            out = self.buffers.get(s.root)
            if out is None:
                out = torch.empty(_shape(info.shape), dtype=torch_dtype(te_dtype(info.dtype)), device=self.device)
            s.run([kernel_form(r) for r in s.reads], out)
            vals[s.root] = out.reshape(info.shape) if not info.shape else out
            stored.add(s.root)
        elif s[0] == "alias":
            a, src = s[1], self.aliases[s[1]]
            info = graph.nodes[a].info
            assert info is not None
            vals[a] = vals[src].reshape(info.shape if info.shape else ())
            if src in stored:
                stored.add(a)
        else:
            n = graph.nodes[s[1]]
            vals[n.id] = n.call(*[torch_form(i) for i in n.inputs])


class _Segment:
    """Consecutive C kernels of a plan (and reshapes of their outputs) run by one C call.

    Each value the kernels read or write has a slot in the sequence's pointer table.
    Planned buffers and constants fill theirs once; per call, fresh outputs (graph
    outputs) are allocated and the values made before the segment (graph inputs, torch
    steps' results) are converted, and their slots filled."""

    def __init__(self, kernels: list[KernelStep], positions: list[int], aliases: list[tuple[int, int]],
                 sequence: Any, fixed_values: dict[int, Any], fresh: list[tuple[int, int, Any]],
                 incoming: list[tuple[int, int]]) -> None:
        self.kernels, self.positions, self.aliases, self.sequence = kernels, positions, aliases, sequence
        self.fixed_values = fixed_values  # node id -> its value (torch form of the stored tensor)
        self.fresh = fresh  # (root, slot, (shape, dtype)) allocated per call
        self.incoming = incoming  # (node id, slot) converted per call

    @staticmethod
    def of(plan: Plan, placed: list[tuple[int, Any]]) -> "_Segment":
        from .native import NativeSequence

        steps = [s for _, s in placed]
        positions = [pos for pos, s in placed if isinstance(s, KernelStep)]
        graph = plan.graph
        slots: dict[int, int] = {}
        constants = plan.stored_constants()
        fixed: dict[int, Any] = {}  # slot -> tensor whose pointer is filled once
        fixed_values: dict[int, Any] = {}
        fresh: list[tuple[int, int, Any]] = []
        incoming: list[tuple[int, int]] = []
        written: set[int] = set()
        calls = []
        kernels = [s for s in steps if isinstance(s, KernelStep)]
        aliases = [(s[1], plan.aliases[s[1]]) for s in steps if isinstance(s, tuple)]

        def slot(i: int) -> int:
            base = plan._base(i)
            if base not in slots:
                slots[base] = len(slots)
                if base in plan.buffers:
                    fixed[slots[base]] = plan.buffers[base]
                elif base in constants:
                    fixed[slots[base]] = constants[base]
                elif base not in written:
                    incoming.append((i, slots[base]))
            return slots[base]

        for s in steps:
            if not isinstance(s, KernelStep):
                continue
            args = [slot(s.reads[k]) if k >= 0 else -1 for k in s.native.order]
            if s.root not in plan.buffers:
                info = graph.nodes[s.root].info
                slots[s.root] = len(slots)
                fresh.append((s.root, slots[s.root], (_shape(info.shape), torch_dtype(te_dtype(info.dtype)))))
            written.add(s.root)
            out = slot(s.root) if s.root in plan.buffers else slots[s.root]
            calls.append((s.native.address, [out if a < 0 else a for a in args]))
        sequence = NativeSequence(calls, len(slots))
        for k, t in fixed.items():
            sequence.set(k, t.data_ptr())
        for s in kernels:
            if s.root in plan.buffers:
                info = graph.nodes[s.root].info
                buf = plan.buffers[s.root]
                fixed_values[s.root] = buf.reshape(info.shape) if not info.shape else buf
        for a, src in aliases:
            if plan._base(a) in plan.buffers:
                info = graph.nodes[a].info
                fixed_values[a] = plan.buffers[plan._base(a)].reshape(info.shape if info.shape else ())
        return _Segment(kernels, positions, aliases, sequence, fixed_values, fresh, incoming)

    def run(self, plan: Plan, vals: dict[int, Any], stored: set[int], kernel_form: Any,
            seconds: dict[int, float] | None = None, thread_time: bool = False) -> None:
        import torch

        seq = self.sequence
        keep = []
        for i, slot in self.incoming:
            v = kernel_form(i)
            keep.append(v)
            seq.set(slot, v.data_ptr())
        fresh = {}
        for root, slot, (shape, dtype) in self.fresh:
            out = torch.empty(shape, dtype=dtype, device=plan.device)
            fresh[root] = out
            seq.set(slot, out.data_ptr())
        if seconds is None:
            failed = seq.run()
        else:
            failed, times = seq.timed(thread_time)
            for pos, t in zip(self.positions, times):
                seconds[pos] = seconds.get(pos, 0.0) + t
        if failed:
            k = abs(failed) - 1
            if failed < 0:
                raise RuntimeError(f"kernel {self.kernels[k].name} could not be called from the sequence")
            raise MemoryError(f"kernel {self.kernels[k].name} could not allocate its temporaries")
        vals.update(self.fixed_values)
        graph = plan.graph
        for root, out in fresh.items():
            info = graph.nodes[root].info
            vals[root] = out.reshape(info.shape) if not info.shape else out
        for s in self.kernels:
            stored.add(s.root)
        for a, src in self.aliases:
            if a not in self.fixed_values:
                info = graph.nodes[a].info
                vals[a] = vals[src].reshape(info.shape if info.shape else ())
            stored.add(a)


@contextlib.contextmanager
def _timed(seconds: dict[int, float], pos: int, thread_time: bool = False) -> Any:
    now = time.thread_time if thread_time else time.perf_counter
    start = now()
    yield
    seconds[pos] = seconds.get(pos, 0.0) + now() - start


def _shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(shape) if shape else (1,)
