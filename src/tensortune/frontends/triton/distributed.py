"""Ranks of a torch.distributed job agree on one configuration per key.

`triton.autotune` lets every rank time candidates on its own GPU, and noise makes
ranks pick different winners (Megatron-LM saw 13 of 22 keys disagree). Here:

- `broadcast` (the default when a process group with more than one rank exists): rank 0
  decides (reads the records or tunes) and broadcasts the configuration; the others
  measure nothing. Every rank must launch the key, as in any collective.
- `shared-db`: every rank decides on its own; use it when all ranks read one database
  file that is already tuned (e.g. shipped records in never-tune mode), so no collective
  is needed.
- `off`: each process decides alone.

A failure on rank 0 is sent to the others, which raise it too instead of waiting.

Example:
    >>> from tensortune.space import Config
    >>> agree(lambda: (Config(BLOCK=64), "tuned"), "auto")
    (Config(BLOCK=64), 'tuned')
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from ...space import Config

Decide = Callable[[], tuple[Config, str]]


class AgreementError(RuntimeError):
    """Rank 0 could not decide a configuration; raised on every rank."""


def process_group_size() -> int:
    """The world size of an initialised default process group, else 1 (torch not imported: 1)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return 1
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return 1
    return dist.get_world_size()


def agree(decide: Decide, mode: str = "auto", broadcast: Callable[[list[Any], int], None] | None = None,
          rank: int | None = None) -> tuple[Config, str]:
    """Decide on rank 0 and share the decision with every rank (see the module doc)."""
    if mode in ("off", "shared-db"):
        return decide()
    if broadcast is None:
        if process_group_size() <= 1:
            return decide()
        import torch.distributed as dist

        rank = dist.get_rank()
        broadcast = _torch_broadcast
    assert rank is not None
    box: list[Any] = [None]
    if rank == 0:
        try:
            config, source = decide()
            box[0] = ("ok", config.to_json(), source)
        except Exception as exc:
            box[0] = ("error", f"{type(exc).__name__}: {exc}", "")
            broadcast(box, 0)
            raise
    broadcast(box, 0)
    status, payload, source = box[0]
    if status != "ok":
        raise AgreementError(f"rank 0 failed to choose a configuration: {payload}")
    return Config.from_json(payload), source if rank == 0 else "agreed"


def _torch_broadcast(box: list[Any], src: int) -> None:
    import torch.distributed as dist

    dist.broadcast_object_list(box, src=src)
