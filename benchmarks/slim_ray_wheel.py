"""Rewrite wheels without what the tools on a machine without a package index never use, so
that Ray, SQLAlchemy and XGBoost fit the device machine's 64 MiB transfer beside the
working tree (benchmarks/ray_scaling.py, benchmarks/multi_gpu.py).

- Ray: the Java jars, the dashboard's web client, and the RLlib, Data, Serve, Tune, Train
  and LLM libraries (the executor uses Ray Core alone).
- SQLAlchemy: its compiled speedups (`*_cy.*.so`), each shipped beside the pure-Python
  module it speeds up, which SQLAlchemy imports instead when they are absent.

Other wheels are rewritten at the highest compression level only.

Usage:
    python3 benchmarks/slim_ray_wheel.py .whl-ray/ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl \
        .whl-ray/sqlalchemy-2.1.9-cp312-*.whl
"""

from __future__ import annotations

import os
import sys
import zipfile

RAY_DROPPED = ("ray/jars/", "ray/dashboard/client/build/", "ray/rllib/", "ray/data/", "ray/serve/", "ray/tune/",
               "ray/train/", "ray/llm/")


def dropped(wheel: str, name: str) -> bool:
    """Whether the file `name` of `wheel` is left out."""
    package = os.path.basename(wheel).split("-")[0].lower()
    if package == "ray":
        return name.startswith(RAY_DROPPED)
    if package == "sqlalchemy":
        return name.startswith("sqlalchemy/") and "_cy." in name and name.endswith(".so")
    return False


def slim(path: str) -> None:
    partial = path + ".part"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as dst:
        for item in src.infolist():
            if dropped(path, item.filename):
                continue
            data = src.read(item.filename)
            if item.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines()
                data = ("\n".join(line for line in lines if not dropped(path, line.split(",")[0])) + "\n").encode()
            dst.writestr(item, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
    before, after = os.path.getsize(path), os.path.getsize(partial)
    os.replace(partial, path)
    print(f"{os.path.basename(path)}: {before / 2**20:.1f} MiB -> {after / 2**20:.1f} MiB")


if __name__ == "__main__":
    for wheel in sys.argv[1:]:
        slim(wheel)
