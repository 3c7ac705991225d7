"""The documentation site builds in strict mode (a broken link, a missing anchor, a page
left out of the navigation or an unresolved API reference fails), and it documents every
public name, every command and every benchmark file."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# the modules whose `__all__` is the public API, each with a page under docs/reference/api/
PUBLIC_MODULES = ["tensortune.space", "tensortune.db", "tensortune.measure", "tensortune.search",
                  "tensortune.model", "tensortune.backends", "tensortune.frontends.triton", "tensortune.te",
                  "tensortune.backends.triton", "tensortune.tasks", "tensortune.graph", "tensortune.datasets",
                  "tensortune.dashboard"]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def inventory(site: Path) -> set[str]:
    """The identifiers mkdocstrings rendered (Sphinx's objects.inv, version 2)."""
    raw = (site / "objects.inv").read_bytes()
    body = zlib.decompress(raw.split(b"\n", 4)[4]).decode()
    return {line.split(" ", 1)[0] for line in body.splitlines()}


@pytest.mark.slow
def test_the_site_documents_every_public_name(site):
    rendered = inventory(site)
    # a function that shares its name with its module (te.build) is rendered under the module's name
    missing = [f"{m}.{name}" for m in PUBLIC_MODULES for name in importlib.import_module(m).__all__
               if f"{m}.{name}" not in rendered and f"{m}.{name}.{name}" not in rendered]
    assert not missing
    import tensortune
    top = [f"{module}.{name}" for name, module in tensortune._LAZY.items() if f"{module}.{name}" not in rendered]
    assert not top
    index = (ROOT / "docs" / "reference" / "api" / "index.md").read_text()
    assert not [name for name in tensortune._LAZY if f"`tt.{name}`" not in index]


@pytest.mark.slow
def test_the_site_documents_every_command(site):
    from tensortune.cli.main import cli

    page = (site / "reference" / "cli" / "index.html").read_text()
    for name, command in cli.commands.items():
        assert f"tensortune {name}" in page
        for sub in getattr(command, "commands", {}):
            assert f"tensortune {name} {sub}" in page


def test_the_benchmarks_index_links_every_file():
    bench = ROOT / "docs" / "benchmarks"
    index = (bench / "index.md").read_text()
    linked = set(re.findall(r"\]\(([^)#]+)", index))
    files = {p.relative_to(bench).as_posix() for p in bench.rglob("*") if p.is_file() and p.name != "index.md"}
    assert not sorted(files - linked)


def test_every_page_is_in_the_navigation():
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert not sorted(p for p in pages if p not in nav)
