"""Rewrite a Ray wheel without what the Ray executor never uses (the Java jars and the
dashboard's web client), so that it fits a 64 MiB transfer to a machine without a
package index (the device machine of benchmarks/ray_scaling.py).

Usage:
    python3 benchmarks/slim_ray_wheel.py .whl/ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl
"""

from __future__ import annotations

import os
import sys
import zipfile

DROPPED = ("ray/jars/", "ray/dashboard/client/build/", "ray/rllib/", "ray/data/", "ray/serve/", "ray/tune/", "ray/train/",
           "ray/llm/")


def slim(path: str) -> None:
    partial = path + ".part"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as dst:
        for item in src.infolist():
            if item.filename.startswith(DROPPED):
                continue
            data = src.read(item.filename)
            if item.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines()
                data = ("\n".join(line for line in lines if not line.startswith(DROPPED)) + "\n").encode()
            dst.writestr(item, data)
    before, after = os.path.getsize(path), os.path.getsize(partial)
    os.replace(partial, path)
    print(f"{os.path.basename(path)}: {before / 2**20:.1f} MiB -> {after / 2**20:.1f} MiB")


if __name__ == "__main__":
    for wheel in sys.argv[1:]:
        slim(wheel)
