"""Triton candidates built on one machine and measured on another (the Ray executor).

A build task compiles a candidate through the same path as the local compile pool, so
the binary lands in that node's Triton cache under the key a launch looks up. What it
returns travels: the compiled kernels' cache entries (`CacheEntries`, checked by digest
on arrival) and, for generated kernels, the candidate's module source. On the measuring
node `arrive()` writes them where the GPU worker's launch finds them (the node's Triton
cache, the generator's directory), so the launch is a cache hit and nothing is compiled
twice; an entry that does not match that node's key is compiled at launch instead.

Example:
    >>> entries = CacheEntries(())
    >>> entries.install() == 0
    True
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..space import Config

GROUP_PREFIX = "__grp__"  # Triton's group file: its child paths are absolute, so rewritten on arrival


def triton_cache_dir() -> Path:
    """This process's Triton cache directory (TRITON_CACHE_DIR, else Triton's default)."""
    from triton import knobs

    return Path(knobs.cache.dir)


def entry_folders(kernel_hash: str) -> tuple[str, ...]:
    """The names a cache entry's folder may have: Triton names it by its hash in base32
    (recent versions) or as it is."""
    try:
        from triton.runtime.cache import _base32

        return (_base32(kernel_hash), kernel_hash)
    except (ImportError, ValueError):
        return (kernel_hash,)


@dataclass(frozen=True)
class CacheEntries:
    """Files of Triton cache entries: (entry folder, file name, bytes, sha256) each."""

    files: tuple[tuple[str, str, bytes, str], ...]

    @staticmethod
    def pack(hashes: Sequence[str], cache_dir: str | os.PathLike[str] | None = None) -> CacheEntries:
        """The files of the entries `hashes` in this node's cache (missing entries are left out)."""
        root = Path(cache_dir) if cache_dir is not None else triton_cache_dir()
        files = []
        for h in dict.fromkeys(h for h in hashes if h):
            folder = next((root / name for name in entry_folders(h) if (root / name).is_dir()), None)
            if folder is None:
                continue
            for f in sorted(folder.iterdir()):
                if f.is_file() and f.name != "lock" and ".tmp" not in f.name:
                    data = f.read_bytes()
                    files.append((folder.name, f.name, data, hashlib.sha256(data).hexdigest()))
        return CacheEntries(tuple(files))

    def install(self, cache_dir: str | os.PathLike[str] | None = None) -> int:
        """Write the entries into this node's cache (group files last, pointing at the files
        written here), unless an entry is there whole; returns how many files were written.
        A damaged file is an error."""
        if not self.files:
            return 0
        root = Path(cache_dir) if cache_dir is not None else triton_cache_dir()
        groups = []
        written = 0
        for h, name, data, digest in self.files:
            if hashlib.sha256(data).hexdigest() != digest:
                raise ValueError(f"Triton cache file {h}/{name} arrived damaged (its digest does not match)")
            if all((root / h / n).exists() for f, n, _, _ in self.files if f == h):
                continue  # compiled on this node already (its build task ran here)
            written += 1
            if name.startswith(GROUP_PREFIX):
                groups.append((h, name, data))
            else:
                _write(root / h / name, data)
        for h, name, data in groups:
            children = json.loads(data).get("child_paths", {})
            local = {child: str(root / h / Path(path).name) for child, path in children.items()}
            _write(root / h / name, json.dumps({"child_paths": local}).encode())
        return written


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.tmp.{os.getpid()}.{uuid.uuid4().hex[:8]}")
    partial.write_bytes(data)
    os.replace(partial, path)


@dataclass(frozen=True)
class TravellingBinary:
    """A compiled Triton candidate on its way to the measuring node: the compile's result
    (`TritonBinary`, `GeneratedBinary` or None under the interpreter), its cache entries,
    and for generated kernels the module to write at `module_path`."""

    binary: Any
    entries: CacheEntries
    module_path: str = ""
    module_text: str = ""

    def arrive(self) -> Any:
        """Install what travelled on this node; the artifact the runner takes."""
        if self.module_path:
            path = Path(self.module_path)
            if not path.exists() or path.read_text() != self.module_text:
                _write(path, self.module_text.encode())
        self.entries.install()
        return self.binary


def arrive(artifact: Any) -> Any:
    """`RemoteRunner.unpack` for GPU runners: a travelling artifact installed, others as they are."""
    return artifact.arrive() if isinstance(artifact, TravellingBinary) else artifact


def kernel_hashes(binary: Any) -> tuple[str, ...]:
    """The Triton cache entries a compile result names."""
    if binary is None:
        return ()
    hashes = getattr(binary, "kernel_hashes", None)
    if hashes is not None:
        return tuple(hashes)
    one = getattr(binary, "kernel_hash", "")
    return (one,) if one else ()


def shipped_compile(compile_fn: Callable[[Config], Any], config: Config) -> TravellingBinary:
    """A build task's body for a `@tensortune.autotune` kernel: compile, then pack the entries."""
    binary = compile_fn(config)
    return TravellingBinary(binary, CacheEntries.pack(kernel_hashes(binary)))
