"""Every python snippet of README.md and docs/ runs as written, as a script of its own.

Each runs in a fresh interpreter from an empty folder (with docs/ in it, as in a clone)
and its own records database, so
a snippet that needs an `if __name__ == "__main__":` guard, a file or an import it does
not show fails here as it would for a reader.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from docs_snippets import documentation_snippets, snippets_of

ROOT = Path(__file__).resolve().parents[1]
SNIPPETS = documentation_snippets(ROOT)


@pytest.mark.slow
@pytest.mark.parametrize("snippet", SNIPPETS, ids=[s.name for s in SNIPPETS])
def test_snippet_runs_as_written(snippet, tmp_path):
    if snippet.skip:
        pytest.skip(snippet.skip)
    script = tmp_path / "snippet.py"
    script.write_text(snippet.code)
    (tmp_path / "docs").symlink_to(ROOT / "docs")  # paths as from the root of a clone
    env = {**os.environ, "TENSORTUNE_DB": str(tmp_path / "tuning.db"),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, f"{snippet.name} failed:\n{snippet.code}\n--- output ---\n{proc.stdout}\n{proc.stderr}"


def test_the_pages_have_snippets_that_run():
    assert len([s for s in SNIPPETS if not s.skip]) >= 10


def test_markers_are_read():
    page = ("```python\nx = 1\n```\n<!-- snippet: continues -->\n```python\nprint(x)\n```\n"
            "<!-- snippet: skip needs a GPU -->\n\n```python\nimport torch\n```\n")
    first, second, third = snippets_of("p.md", page)
    assert second.code == "x = 1\nprint(x)\n" and second.skip is None
    assert third.skip == "needs a GPU" and third.code == "import torch\n"
    with pytest.raises(ValueError, match="must say why"):
        snippets_of("p.md", "<!-- snippet: skip -->\n```python\npass\n```\n")
