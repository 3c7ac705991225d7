"""Curves of mean score against budget: one panel per dataset and one for their mean.

Example:
    >>> import tempfile, os
    >>> summary = {"d": {"random": {"20": {"mean": 0.8, "p10": 0.7}, "50": {"mean": 0.9, "p10": 0.8}}}}
    >>> path = os.path.join(tempfile.mkdtemp(), "curves.png")
    >>> plot_curves(summary, path)
    >>> os.path.getsize(path) > 0
    True
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

from .replay import mean_over_datasets


def plot_curves(summary: Mapping[str, Any], path: str | os.PathLike[str],
                reference: Mapping[str, Mapping[str, float]] | None = None) -> None:
    """Write a PNG; `reference` adds dashed curves to the mean panel (published peer figures)."""
    from ..extras import needs_extra

    with needs_extra("a plot of the curves"):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

    panels = list(summary) + ["mean over datasets"]
    cols = min(4, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    means = mean_over_datasets(summary)
    for ax, name in zip(axes.flat, panels):
        curves = means if name == "mean over datasets" else {
            st: {b: v["mean"] for b, v in per.items()} for st, per in summary[name].items()}
        for st, per_budget in sorted(curves.items()):
            budgets = sorted(per_budget, key=int)
            ax.plot([int(b) for b in budgets], [per_budget[b] for b in budgets], marker="o", label=st)
        if name == "mean over datasets" and reference:
            measured = {int(b) for per_budget in curves.values() for b in per_budget}
            for label, per_budget in reference.items():
                budgets = sorted((b for b in per_budget if int(b) in measured), key=int)
                ax.plot([int(b) for b in budgets], [per_budget[b] for b in budgets], "--", marker="x",
                        label=label)
        ax.set_title(name, fontsize=10)
        ax.set_xscale("log")
        ticks = sorted({int(b) for per_budget in curves.values() for b in per_budget})
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("measurements")
        ax.set_ylabel("t_opt / t_best (mean)")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    axes.flat[len(panels) - 1].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=72)
    plt.close(fig)
