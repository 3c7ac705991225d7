"""The dashboard's one HTML page, self-contained: its style sheet and script are
inlined, and its Content-Security-Policy lets it load nothing from anywhere else (the
live page fetches only its own API). A report is the same page with the data embedded.

Example:
    >>> html = page_html()
    >>> "<script>" in html and "http://" not in html.split("<script>")[0]
    True
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources
from typing import Any

_CONTROLS = ('<label><input type="checkbox" id="live"> live (every 3 s)</label>\n'
             '<button id="refresh">Refresh</button>')


@cache
def _static(name: str) -> str:
    return resources.files(__package__).joinpath("static", name).read_text(encoding="utf-8")


def embed_json(obj: Any) -> str:
    """JSON safe inside a <script> element: no character of it can end the element or
    open a comment there."""
    text = json.dumps(obj, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def page_html(data: dict[str, Any] | None = None, title: str = "tensortune dashboard") -> str:
    """The live dashboard (no `data`: it reads the API), or a static report of `data`
    (a `views.workload_view`)."""
    report = data is not None
    parts = {
        "@TITLE@": _escape(title),
        "@HEADING@": "report" if report else "dashboard",
        "@CONTROLS@": "" if report else _CONTROLS,
        "@DATA@": f'<script type="application/json" id="tt-data">{embed_json(data)}</script>' if report else "",
        "@CSS@": _static("dashboard.css"),
        "@JS@": _static("dashboard.js"),
    }
    # one pass over the template: a mark inside inserted text (the data) stays as it is
    return re.sub("|".join(parts), lambda m: parts[m.group(0)], _static("page.html"))
