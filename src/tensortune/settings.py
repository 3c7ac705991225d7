"""Settings read from the environment once, explicitly, and passed around.

Example:
    >>> s = Settings.from_env({"TENSORTUNE_DB": "/tmp/x.db"})
    >>> str(s.db_path)
    '/tmp/x.db'
    >>> Settings.from_env({"TENSORTUNE_DB": "postgresql://tt@db.lan/records"}).db_path
    'postgresql://tt@db.lan/records'
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .db.database import default_db_path
from .db.url import looks_like_url


@dataclass(frozen=True)
class Settings:
    db_path: Path | str  # a path, or a store URL (sqlite:///..., postgresql://...) as given
    never_tune: bool = False  # production: use recorded results only, never measure
    progress: bool = True

    @staticmethod
    def from_env(env: Mapping[str, str] | None = None) -> "Settings":
        env = os.environ if env is None else env
        db = env.get("TENSORTUNE_DB")
        return Settings(
            db_path=db_location(db) if db else default_db_path(),
            never_tune=env.get("TENSORTUNE_NEVER_TUNE", "") not in ("", "0", "false"),
            progress=env.get("TENSORTUNE_PROGRESS", "1") not in ("0", "false"),
        )


def db_location(value: str) -> Path | str:
    """A `--db` or TENSORTUNE_DB value: a store URL as given (`Database` checks it), a
    path expanded."""
    return value if looks_like_url(value) else Path(value).expanduser()
