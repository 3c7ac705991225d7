"""Schedule templates with knobs, as AutoTVM has them: the expert writes the schedule's
shape, the tuner fills in its numbers.

A template is a function `f(cfg, *shapes)` that builds tensor expressions, declares knobs
on `cfg` (`define_split`, `define_reorder`, `define_annotate`, `define_knob`), applies
their values to a te schedule and returns it. `@te.template(name)` registers it; calling
it with shapes gives a `TemplateTask` whose knobs are a `tt.Space`, tuned through the
loop (`task.tune(budget, db)`: parallel compiles, checked and isolated runs, records,
model-guided search on loop-nest features) and rebuilt from records (`task.load_best(db)`).
A GPU template returns `cuda_schedule(output, **options)` instead: the GPU pattern's
options (block sizes, warps, stages, ...) from its knobs, tuned as Triton on the GPU.
Names are imported on first use.

Example:
    >>> from tensortune.template import KnobCollector
    >>> cfg = KnobCollector.collecting()
    >>> cfg.define_split("tile", 16, num_outputs=3)
    >>> cfg.space().size
    15
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .collector import KnobCollector
    from .cuda import CudaSchedule, PatternFeatures, cuda_schedule, pattern_options
    from .knobs import AnnotateValue, OrderValue, SplitValue, TemplateError
    from .prior import prior_model
    from .search import TemplateFeatures, TemplateSearch
    from .template import Template, TemplateTask, get_template, registered, template
    from .tune import TunedTemplate, load_best, tune

_LAZY = {
    "template": "template", "Template": "template", "TemplateTask": "template", "get_template": "template",
    "registered": "template", "KnobCollector": "collector", "TemplateError": "knobs", "SplitValue": "knobs",
    "OrderValue": "knobs", "AnnotateValue": "knobs", "TemplateSearch": "search", "TemplateFeatures": "search",
    "TunedTemplate": "tune", "tune": "tune", "load_best": "tune", "prior_model": "prior",
    "cuda_schedule": "cuda", "CudaSchedule": "cuda", "pattern_options": "cuda", "PatternFeatures": "cuda",
}


__all__ = [
    "AnnotateValue",
    "CudaSchedule",
    "KnobCollector",
    "OrderValue",
    "PatternFeatures",
    "SplitValue",
    "Template",
    "TemplateError",
    "TemplateFeatures",
    "TemplateSearch",
    "TemplateTask",
    "TunedTemplate",
    "cuda_schedule",
    "get_template",
    "load_best",
    "pattern_options",
    "prior_model",
    "registered",
    "template",
    "tune",
]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

