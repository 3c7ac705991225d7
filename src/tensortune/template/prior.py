"""A cost model to start a template's search from: fitted on records of the same computation.

Records of another template of the same expressions, or of the auto-scheduler, describe
programs by the same loop-nest features (`autoschedule.features`), so a model fitted on
them ranks this template's candidates before any is measured. On the GPU the columns are
the pattern's options (`template.cuda.PatternFeatures`), shared with other GPU templates
of the graph and with the GPU auto-scheduler's records of it. Each source's records are
one ranking group (times are compared within a source, never across: the sources may be
other shapes or other runs). A record whose program cannot be rebuilt (a template edited
since, a sketch whose steps no longer replay) is left out.

Example:
    >>> from tensortune.template.examples import matmul
    >>> prior_model(matmul(32, 32, 32), ":memory:", [matmul(16, 16, 16)]) is None  # nothing recorded
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..autoschedule.features import FEATURE_NAMES, program_features
from ..db import Database, Target
from ..model.xgb_rank import XGBRankModel
from ..te.dtype import TEError
from ..te.schedule import Schedule
from .cuda import PatternFeatures
from .knobs import TemplateError
from .search import TemplateFeatures
from .template import TemplateTask

AUTOSCHEDULE = "autoschedule"  # a source: the auto-scheduler's records of the task's expressions
MIN_RECORDS = 4  # a source with fewer working records teaches no ranking


def _database(db: Any) -> Database:
    from .tune import open_db
    return open_db(db)


def template_rows(source: TemplateTask, db: Database, target: Target) -> tuple[np.ndarray, np.ndarray]:
    records = [r for r in db.records(source.workload, target) if r.ok and source.space.is_valid(r.config)]
    feats: Any = TemplateFeatures(source) if source.cuda is None else PatternFeatures(source)
    rows = [(feats.config_row(r.config), min(r.times)) for r in records]
    rows = [(x, t) for x, t in rows if not np.isnan(x[0])]
    return _stack(rows)


def autoschedule_rows(task: TemplateTask, db: Database, target: Target) -> tuple[np.ndarray, np.ndarray]:
    """The auto-scheduler's records of the task's expressions, features from their replayed steps."""
    from ..autoschedule.api import Problem
    problem = Problem.of(list(task.outputs), args=list(task.args))
    rows = []
    for r in db.records(problem.workload, target):
        steps = r.extra.get("steps")
        if not r.ok or not steps or "same_source_as" in r.extra or r.strategy == "confirm":
            continue
        try:
            s = Schedule.from_steps(list(task.outputs), steps)
            rows.append((program_features(s.lower("kernel", list(task.args))), min(r.times)))
        except (TEError, KeyError, ValueError, TypeError):
            continue  # steps of a rewritten graph (rfactor) or of other rules: not this program
    return _stack(rows)


def autoschedule_cuda_rows(task: TemplateTask, db: Database, target: Target) -> tuple[np.ndarray, np.ndarray]:
    """The GPU auto-scheduler's records of the task's graph: their configurations are the
    pattern's options already, the columns of `PatternFeatures`."""
    from ..backends.triton.tune import cuda_workload
    from .cuda import gen_options
    assert task.cuda is not None
    space = task.cuda.sketch.space
    feats = PatternFeatures(task).extractor
    records = [r for r in db.records(cuda_workload(task.cuda.plan, gen_options()), target)
               if r.ok and r.strategy != "confirm" and space.is_valid(r.config)]
    if not records:
        return np.zeros((0, feats.width)), np.zeros(0)
    return feats.configs([r.config for r in records]), np.asarray([min(r.times) for r in records])


def _stack(rows: list[tuple[np.ndarray, float]]) -> tuple[np.ndarray, np.ndarray]:
    if not rows:
        return np.zeros((0, len(FEATURE_NAMES))), np.zeros(0)
    return np.stack([x for x, _ in rows]), np.asarray([t for _, t in rows])


def prior_model(task: TemplateTask, db: Any, sources: Sequence[TemplateTask | str],
                seed: int = 0) -> XGBRankModel | None:
    """A ranking model on the records of `sources` (other `TemplateTask`s of the same
    computation, or `"autoschedule"`), or None when they hold too few records."""
    database = _database(db)
    if task.cuda is not None:
        from .cuda_tune import cuda_target
        target = cuda_target()
        names = PatternFeatures(task).names
    else:
        target, names = Target.cpu(), list(FEATURE_NAMES)
    blocks = []
    for source in sources:
        if source == AUTOSCHEDULE:
            X, t = autoschedule_rows(task, database, target) if task.cuda is None else \
                autoschedule_cuda_rows(task, database, target)
        elif isinstance(source, TemplateTask):
            if source.target != task.target:
                raise TemplateError(f"a prior's template runs on {source.target!r}, this one on {task.target!r}: "
                                    "their features differ")
            if source.cuda is not None and PatternFeatures(source).names != names:
                raise TemplateError(f"template {source.name!r} {list(source.shapes)} resolves to another GPU pattern "
                                    "than this one; its records cannot rank this template's candidates")
            X, t = template_rows(source, database, target)
        else:
            raise TemplateError(f"a prior's source is a TemplateTask or {AUTOSCHEDULE!r}, got {source!r}")
        if len(t) >= MIN_RECORDS:
            blocks.append((X, t))
    if not blocks:
        return None
    model = XGBRankModel(seed=seed, feature_names=names)
    model.fit(np.concatenate([X for X, _ in blocks]), np.concatenate([t for _, t in blocks]),
              groups=[len(t) for _, t in blocks])
    return model
