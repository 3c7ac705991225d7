"""`tensortune report`: one workload's dashboard as a single static HTML file, with the
data embedded and the same plots drawn by the same script, for sharing.

Example:
    >>> import os, tempfile
    >>> from tensortune.db import Database, Target, Workload
    >>> from tensortune.measure import MeasureResult
    >>> from tensortune.space import Config
    >>> folder = tempfile.mkdtemp()
    >>> db = Database(os.path.join(folder, "t.db"))
    >>> w = Workload.make("saxpy")
    >>> _ = db.add(w, Target.make("cpu", "test"), MeasureResult(Config(a=1), (2e-3,)))
    >>> path = write_report(db, w, os.path.join(folder, "r.html"))
    >>> "tt-data" in path.read_text()
    True
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ..db import Database, Workload
from .page import page_html
from .views import workload_id, workload_view


def write_report(db: Database, workload: Workload, path: str | os.PathLike[str], top: int = 10,
                 label: str = "") -> Path:
    """Write the report of `workload` to `path` (its folder must exist) and return the path."""
    data = workload_view(db, workload_id(workload), top)
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    data["database"] = {"label": f"{label or getattr(db, 'path', '')} · written {stamp}",
                        "read_only": False, "damaged": len(getattr(db, "damaged", {}))}
    out = Path(path)
    out.write_text(page_html(data, title=f"{workload.name}: tensortune report"), encoding="utf-8")
    return out
