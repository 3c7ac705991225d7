"""GPU templates: knobs over the GPU patterns' options, for `target="cuda"`.

The GPU path does not lower te schedules: it recognises the graph's pattern (contraction,
attention, rows, grouped convolution, elementwise) and generates Triton from the
pattern's options (block sizes, warps, stages, group size, split-K, tail split, TMA, ...;
`backends.triton.sketches`). A GPU template therefore builds its tensor expressions,
declares knobs as a CPU template does, and returns `cuda_schedule(output, **options)`:
the pattern's options computed from the knobs' values. An option it leaves out takes
the value of the pattern's first rule-of-thumb configuration for this shape (the
sketch's first seed). Every candidate's options must be a configuration of the
pattern's sketch (its values and constraints: shared memory, registers, which variants
the shape allows); one that is not is that candidate's build failure, named.

Example:
    >>> from tensortune import te
    >>> A = te.placeholder((32, 32), "float16", "A"); B = te.placeholder((32, 32), "float16", "B")
    >>> k = te.reduce_axis(32, "k")
    >>> C = te.compute((32, 32), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    >>> resolved = resolve(cuda_schedule(C, BLOCK_M=16, BLOCK_N=32, num_warps=2))
    >>> resolved.plan.kind, resolved.config["BLOCK_N"], resolved.config["SPLIT_K"]
    ('contraction', 32, 1)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..space import Config, SpaceError
from ..te.dtype import TEError
from ..te.tensor import Tensor
from .knobs import TemplateError


@dataclass(frozen=True)
class CudaSchedule:
    """What a GPU template returns: its one output tensor and the pattern's options."""

    output: Tensor
    options: Mapping[str, Any] = field(default_factory=dict)


def cuda_schedule(output: Any, **options: Any) -> CudaSchedule:
    """The GPU pattern's options for `output` (a tensor, or a `te.workloads` computation):
    `cuda_schedule(C, BLOCK_M=cfg["bm"], num_warps=cfg["warps"])`."""
    from ..backends.triton.tune import output_of
    try:
        out = output_of(output)
    except TEError as exc:
        raise TemplateError(f"cuda_schedule: {exc}") from None
    return CudaSchedule(out, dict(options))


_SKETCHES: dict[tuple[str, Any, int], Any] = {}


def sketch_of(plan: Any, sms: int | None = None) -> Any:
    """The pattern's sketch for these shapes, made once per graph and device (a template
    runs once per candidate, and a contraction's sketch takes a second to enumerate)."""
    from ..backends.triton.sketches import sketch
    sms = sms or multiprocessors()
    key = (plan.describe(), gen_options(), sms)
    found = _SKETCHES.get(key)
    if found is None:
        found = _SKETCHES[key] = sketch(plan, gen_options(), sms)
    return found


def pattern_options(output: Any) -> dict[str, list[Any]]:
    """The values each option of `output`'s GPU pattern offers for its shapes (before the
    pattern's constraints), for a template to choose its knobs' values from:
    `pattern_options(C)["BLOCK_M"]` -> [16, 32, 64, 128, 256]."""
    from ..backends.triton.patterns import analyze
    try:
        plan = analyze(cuda_schedule(output).output)
    except TEError as exc:
        raise TemplateError(f"the template's graph has no GPU pattern: {exc}") from None
    space = sketch_of(plan).space
    return {p.names[0]: list(p.values) for p in space.params}  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Resolved:
    """A GPU template's candidate: the graph's pattern and a configuration of its sketch."""

    plan: Any  # backends.triton.patterns.GpuPlan
    config: Config
    sketch: Any  # backends.triton.sketches.Sketch
    sms: int  # the multiprocessors the sketch was made for


def gen_options() -> Any:
    """How GPU templates are generated: float16 stored as float16, no TF32; the
    interpreter's work-arounds when TRITON_INTERPRET is set."""
    from ..backends.triton.kernel import interpreting
    from ..backends.triton.source import GenOptions
    return GenOptions("float16", interpreting(), False)


def multiprocessors() -> int:
    """The current GPU's multiprocessors (the sketch offers split-K, persistence and the
    tail split by them); an H100's count under the interpreter or without a GPU."""
    from ..backends.triton.kernel import interpreting
    from ..backends.triton.sketches import H100_SMS
    if interpreting():
        return H100_SMS
    try:
        import torch
    except ImportError:
        return H100_SMS
    if not torch.cuda.is_available():
        return H100_SMS
    return int(torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count)


def resolve(schedule: CudaSchedule, sms: int | None = None) -> Resolved:
    """The pattern of the schedule's graph and its options as a configuration of the
    pattern's sketch; a `TemplateError` naming an unknown option, a value the sketch does
    not offer, or the constraint the options break."""
    from ..backends.triton.patterns import analyze

    try:
        plan = analyze(schedule.output)
    except TEError as exc:
        raise TemplateError(f"the template's graph has no GPU pattern: {exc}") from None
    sms = sms or multiprocessors()
    sk = sketch_of(plan, sms)
    names = list(sk.space.names)
    unknown = sorted(set(schedule.options) - set(names))
    if unknown:
        raise TemplateError(f"option(s) {unknown} are not options of the {plan.kind} pattern for these shapes "
                            f"(its options: {', '.join(names)})")
    missing = [n for n in names if n not in schedule.options]
    if missing and not sk.seeds:
        raise TemplateError(f"the {plan.kind} pattern has no default configuration for these shapes; the template "
                            f"must set {missing}")
    default = dict(sk.seeds[0])
    if "GEMV" in names and not schedule.options.get("GEMV", False):  # a tiled template: the tiled kernel's defaults
        default = dict(next((s for s in sk.seeds if not s["GEMV"]), default), GEMV=False, VECTOR_TILE=False)
    values = {n: schedule.options[n] if n in schedule.options else default[n] for n in names}
    try:
        config = sk.space.config(values)
    except SpaceError as exc:
        raise TemplateError(f"the options are not a configuration of the {plan.kind} pattern: {exc}") from None
    return Resolved(plan, config, sk, sms)


class PatternFeatures:
    """Feature rows of a GPU template's configurations: the columns of the pattern's sketch
    (`model.features.FeatureExtractor` over its space) for the options each one resolves
    to, so a model fitted on one template's records ranks another template's candidates
    of the same graph, or the GPU auto-scheduler's. A configuration that does not resolve
    gets a row of NaN."""

    def __init__(self, task: Any) -> None:
        from ..model.features import FeatureExtractor
        self.task = task
        self.space = task.space
        self.extractor = FeatureExtractor(task.cuda.sketch.space)
        self.names = list(self.extractor.names)
        self._cache: dict[Config, np.ndarray] = {}

    @property
    def width(self) -> int:
        return len(self.names)

    def config_row(self, config: Config) -> np.ndarray:
        row = self._cache.get(config)
        if row is None:
            try:
                row = self.extractor.configs([self.task.resolve(config).config])[0]
            except TemplateError:
                row = np.full(self.width, np.nan)
            self._cache[config] = row
        return row

    def configs(self, configs: Any) -> np.ndarray:
        if len(configs) == 0:
            return np.zeros((0, self.width))
        return np.stack([self.config_row(c) for c in configs])

    def points(self, points: Any) -> np.ndarray:
        return self.configs([self.space.to_config(p) for p in points])


@dataclass(frozen=True)
class InterpreterReference:
    """The GPU runner's reference for a template: the NumPy interpreter of the template's
    expressions on the worker's inputs (computed once per worker), as a torch tensor of
    the output's type on the inputs' device."""

    output: Tensor
    names: tuple[str, ...]

    def __call__(self, *args: Any) -> Any:
        from ..te.arrays import to_torch
        from ..te.interpret import evaluate
        inputs = {n: _host(a) for n, a in zip(self.names, args)}
        out = args[len(self.names)]
        value = np.ascontiguousarray(evaluate(self.output, inputs))
        return to_torch(value).to(device=out.device, dtype=out.dtype)

    def __repr__(self) -> str:
        return f"InterpreterReference({self.output.name}, {list(self.names)})"


def _host(x: Any) -> np.ndarray:
    from ..te.arrays import as_numpy
    return as_numpy(x.detach().cpu() if x.device.type != "cpu" else x, "a reference input")


def default_cache_dir() -> str:
    """Where GPU templates' candidate modules are written: ~/.cache/tensortune/template_cuda."""
    from ..backends.triton.kernel import default_cache_dir as cuda_cache
    return str(cuda_cache().parent / "template_cuda")
