"""The Python snippets of README.md and docs/*.md, as a reader copies them.

A snippet is a fenced ```python block. The line right before its fence may carry a
marker, an HTML comment that the rendered page does not show:

- `<!-- snippet: continues -->`: it runs after the page's previous snippet, in the same
  script (the page builds it up step by step);
- `<!-- snippet: skip REASON -->`: it is not run here, for the REASON given (it needs a
  GPU, or takes minutes); a skip without a reason is an error. A snippet that continues
  a skipped one is skipped too.

Both may stand on consecutive lines.

Example:
    >>> [s.name for s in snippets_of("x.md", "```python\\nprint(1)\\n```\\n")]
    ['x.md:1']
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

MARKER = re.compile(r"^<!--\s*snippet:\s*(?P<kind>continues|skip)\b\s*(?P<reason>.*?)\s*-->\s*$")
FENCE = re.compile(r"^```python\s*$")


@dataclass(frozen=True)
class Snippet:
    """One python block: where it is, its code with what it continues, and whether to skip it."""

    name: str  # "FILE:LINE" of its fence
    code: str  # the script to run: the snippets it continues, then its own lines
    skip: str | None  # the reason it is not run, or None


def snippets_of(name: str, text: str) -> list[Snippet]:
    """Every python block of one markdown file, in order."""
    lines = text.splitlines()
    found: list[Snippet] = []
    previous = ""
    i = 0
    while i < len(lines):
        if not FENCE.match(lines[i]):
            i += 1
            continue
        start = i
        markers = _markers_before(lines, start)
        end = start + 1
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        own = "\n".join(lines[start + 1:end]) + "\n"
        continues = "continues" in markers
        if "skip" in markers and not markers["skip"]:
            raise ValueError(f"{name}:{start + 1}: a skipped snippet must say why (<!-- snippet: skip REASON -->)")
        if continues and not found:
            raise ValueError(f"{name}:{start + 1}: 'continues' on the page's first snippet")
        code = previous + own if continues else own
        skip = markers.get("skip") or (found[-1].skip if continues else None)
        found.append(Snippet(f"{name}:{start + 1}", code, skip))
        previous = code
        i = end + 1
    return found


def _markers_before(lines: list[str], fence: int) -> dict[str, str]:
    """The markers on the lines right above a fence (blank lines between are allowed)."""
    markers: dict[str, str] = {}
    j = fence - 1
    while j >= 0:
        line = lines[j].strip()
        if line and not (match := MARKER.match(line)):
            break
        if line:
            markers.setdefault(match["kind"], match["reason"])
        j -= 1
    return markers


def documentation_snippets(root: Path) -> list[Snippet]:
    """The snippets of README.md and every page under docs/."""
    files = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    return [s for f in files for s in snippets_of(str(f.relative_to(root)), f.read_text())]
