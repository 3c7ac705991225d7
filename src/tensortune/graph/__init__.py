"""Whole models: a PyTorch model in, a tuned model out.

`tensortune.compile(model, example_inputs)` or `torch.compile(model, backend="tensortune")`
capture the model's graph (dynamo, core ATen), lower it to tensor expressions, cut it into
kernels, tune every distinct kernel under one budget, and run them in order; see
docs/models.md. The modules, in the order a graph goes through them: `capture`, `lower`
(with `lowering/` rules), `simplify`, `partition`, `kernel`, `tasks`, `tune`, `targets`,
`runtime`, `check`, `report`, `compiler`, `backend`.
"""

from __future__ import annotations

from .backend import CompiledModel, compile, make_backend, tensortune_backend
from .compiler import CompiledGraph, CompileError, CompileOptions, compile_graph
from .report import CompileReport

__all__ = ["CompileError", "CompileOptions", "CompileReport", "CompiledGraph", "CompiledModel", "compile",
           "compile_graph", "make_backend", "tensortune_backend"]
