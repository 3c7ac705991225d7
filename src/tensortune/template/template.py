"""Schedule templates: registration (`@te.template(name)`) and a template bound to its shapes.

A template is a function `f(cfg, *shapes)` that builds the tensor expressions for those
shapes, declares knobs on `cfg` and returns a schedule whose numbers come from them:
`(schedule, args)` (the kernel's arguments in call order) or a schedule alone (its
inputs, then its outputs) for the CPU; for the GPU, `cuda_schedule(output, **options)`
(`template.cuda`: the GPU pattern's options). `Template(*shapes)` binds it to shapes: a `TemplateTask`
with the knobs' space, the configuration -> schedule map, and the workload its records
are keyed on.

Example:
    >>> from tensortune import te
    >>> @te.template("doctest_scale")
    ... def scale(cfg, n):
    ...     A = te.placeholder((n,), name="A")
    ...     B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    ...     s = te.create_schedule(B)
    ...     cfg.define_split("split_i", s[B].loop("i"), num_outputs=2)
    ...     cfg["split_i"].apply(s, B, "i")
    ...     return s, [A, B]
    >>> task = scale(16)
    >>> task.space.size
    5
    >>> s, args = task.instantiate({"split_i_0": 4, "split_i_1": 4})
    >>> tuple(l.extent for l in s["B"].loops)
    (4, 4)
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..db import Workload
from ..space import Config, Space
from ..te.schedule import Schedule
from ..te.tensor import Tensor
from .collector import KnobCollector
from .cuda import CudaSchedule, Resolved
from .knobs import Knob, TemplateError

_REGISTRY: dict[str, Template] = {}


class Template:
    """A registered template: call it with shapes for a `TemplateTask`."""

    def __init__(self, name: str, fn: Callable[..., Any]) -> None:
        self.name = name
        self.fn = fn
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]

    def __call__(self, *shapes: Any) -> TemplateTask:
        return TemplateTask.of(self, shapes)

    def __repr__(self) -> str:
        return f"Template({self.name!r})"

    @functools.cached_property
    def source_hash(self) -> str:
        try:
            text = inspect.getsource(self.fn)
        except (OSError, TypeError):  # defined where no source is kept (an interactive prompt)
            text = getattr(self.fn, "__qualname__", self.name)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def template(name: str) -> Callable[[Callable[..., Any]], Template]:
    """Register a schedule template under `name` (`@te.template("matmul")`).

    Registering another function under a name already taken is an error; the same
    function (by module and qualified name) registered again replaces the first, as
    re-running a module does."""
    if not isinstance(name, str) or not name:
        raise TemplateError(f"a template needs a non-empty name, got {name!r}")

    def register(fn: Callable[..., Any]) -> Template:
        if not callable(fn):
            raise TemplateError(f"@template({name!r}) decorates a function, got {fn!r}")
        before = _REGISTRY.get(name)
        if before is not None and _origin(before.fn) != _origin(fn):
            raise TemplateError(f"a template named {name!r} is already registered ({_origin(before.fn)})")
        t = Template(name, fn)
        _REGISTRY[name] = t
        return t

    return register


def _origin(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', '?')}"


def get_template(name: str) -> Template:
    """The template registered under `name`."""
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise TemplateError(f"no template is registered as {name!r} (registered: {known})") from None


def registered() -> list[str]:
    return sorted(_REGISTRY)


@dataclass(frozen=True)
class Instance:
    """One run of the template: its schedule and kernel arguments (CPU) or its GPU
    pattern's options (`cuda`), and the knobs it declared."""

    schedule: Schedule | None
    args: tuple[Tensor, ...]
    knobs: Mapping[str, Knob]
    cuda: CudaSchedule | None = None


def run_template(tmpl: Template, shapes: Sequence[Any], cfg: KnobCollector) -> Instance:
    out = tmpl.fn(cfg, *shapes)
    if isinstance(out, CudaSchedule):
        return Instance(None, (), dict(cfg.knobs), out)
    if isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], Schedule):
        s, args = out
        args = tuple(args)
    elif isinstance(out, Schedule):
        s = out
        args = tuple(s.inputs) + tuple(s.outputs)
    else:
        raise TemplateError(f"template {tmpl.name!r} must return a schedule, (schedule, args) or "
                            f"cuda_schedule(output, ...), got {out!r:.200}")
    if not all(isinstance(t, Tensor) for t in args):
        raise TemplateError(f"template {tmpl.name!r}: its args must be tensors, got {list(args)!r:.200}")
    return Instance(s, args, dict(cfg.knobs))


@dataclass(frozen=True)
class TemplateTask:
    """A template bound to its shapes: the knobs' space and configuration -> schedule."""

    template: Template
    shapes: tuple[Any, ...]
    knobs: Mapping[str, Knob]
    space: Space
    outputs: tuple[Tensor, ...]  # the expressions built with every knob at its first option: the reference
    args: tuple[Tensor, ...]
    workload: Workload
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    cuda: Resolved | None = field(default=None, compare=False)  # a GPU template: its first option's pattern

    @property
    def target(self) -> str:
        """"c" (a te schedule compiled to C for the CPU) or "cuda" (Triton from a GPU pattern)."""
        return "c" if self.cuda is None else "cuda"

    @staticmethod
    def of(tmpl: Template, shapes: Sequence[Any]) -> TemplateTask:
        from ..autoschedule.api import graph_text
        cfg = KnobCollector.collecting()
        inst = run_template(tmpl, shapes, cfg)
        space = cfg.space()
        cuda = None
        if inst.cuda is not None:  # a GPU template: the graph's pattern, checked with every knob at its first option
            from .cuda import resolve
            cuda = resolve(inst.cuda)
            outputs: tuple[Tensor, ...] = (inst.cuda.output,)
            args = tuple(cuda.plan.inputs) + outputs
        else:
            assert inst.schedule is not None
            outputs, args = tuple(inst.schedule.outputs), inst.args
        try:
            shape_key = json.loads(json.dumps(list(shapes)))
        except TypeError:
            raise TemplateError(f"template {tmpl.name!r}: its arguments {shapes!r} must be numbers, strings or "
                                "lists of them (they key its records)") from None
        key = {"shapes": shape_key, "args": [[t.name, list(t.shape), t.dtype] for t in args],
               "knobs": sorted(space.names)}
        if cuda is not None:
            key["target"] = "cuda"
        source = tmpl.source_hash + "\n" + graph_text(outputs)
        workload = Workload.make(f"template:{tmpl.name}", source, key)
        return TemplateTask(tmpl, tuple(shapes), inst.knobs, space, outputs, args, workload, cuda=cuda)

    @property
    def name(self) -> str:
        return self.template.name

    def instantiate(self, config: Mapping[str, Any]) -> tuple[Schedule, tuple[Tensor, ...]]:
        """(schedule, kernel arguments) of one configuration of a CPU template's space."""
        if self.cuda is not None:
            raise TemplateError(f"template {self.name!r} is a GPU template: its configurations resolve to GPU "
                                "pattern options (task.resolve(config)), not te schedules")
        inst = run_template(self.template, self.shapes, KnobCollector.applying(self.knobs, self._checked(config)))
        assert inst.schedule is not None
        return inst.schedule, inst.args

    def resolve(self, config: Mapping[str, Any]) -> Resolved:
        """A GPU template's configuration as its pattern and a configuration of the pattern's
        sketch; a `TemplateError` when the options do not make one, or the graph is not the
        one its first option built."""
        from .cuda import resolve
        if self.cuda is None:
            raise TemplateError(f"template {self.name!r} is a CPU template (it returns a te schedule); "
                                "task.instantiate(config) builds its configurations")
        inst = run_template(self.template, self.shapes, KnobCollector.applying(self.knobs, self._checked(config)))
        if inst.cuda is None:
            raise TemplateError(f"template {self.name!r} returned a te schedule for {dict(config)!r:.200} and "
                                "cuda_schedule(...) for its first options; it must return one kind")
        out = resolve(inst.cuda, self.cuda.sms)
        ref = [(t.name, t.shape, t.dtype) for t in self.args]
        got = [(t.name, t.shape, t.dtype) for t in tuple(out.plan.inputs) + (inst.cuda.output,)]
        if got != ref:
            raise TemplateError(f"template {self.name!r}: the kernel's arguments {got} differ from those of its "
                                f"first options {ref}; every configuration must compute the same graph's output")
        return out

    def _checked(self, config: Mapping[str, Any]) -> Config:
        config = config if isinstance(config, Config) else Config(dict(config))
        if not self.space.is_valid(config):
            raise TemplateError(f"template {self.name!r}: {config.to_json()[:300]} is not a configuration of its "
                                "space")
        return config

    @property
    def flops(self) -> float:
        from ..autoschedule.analysis import analyze
        return float(analyze(list(self.outputs)).flops)

    def tune(self, budget: Any = None, db: Any = None, **options: Any) -> Any:
        """Tune the knobs (`template.tune.tune`); a `TunedTemplate`."""
        from .tune import tune
        return tune(self, budget, db, **options)

    def load_best(self, db: Any = None) -> Any:
        """The best recorded configuration rebuilt without measuring (`template.tune.load_best`)."""
        from .tune import load_best
        return load_best(self, db)
