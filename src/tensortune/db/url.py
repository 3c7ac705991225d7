"""Where the records live: a path or a URL, parsed into a `StoreLocation`.

`sqlite:///relative.db`, `sqlite:////absolute.db` and a plain path name an SQLite file
(`:memory:` or `sqlite://` one in memory); `postgresql://user:password@host:port/db`
(or `postgres://`, `postgresql+psycopg://`) names a PostgreSQL database that many
hosts share. Anything else that looks like a URL is an error naming the problem, never
a file or folder named after it.

Example:
    >>> store_location("sqlite:///runs/t.db").path
    PosixPath('runs/t.db')
    >>> store_location("postgresql://tt:secret@db.lan/records").shown
    'postgresql://tt:***@db.lan/records'
    >>> store_location("mysql://db.lan/records")
    Traceback (most recent call last):
    ...
    tensortune.db.errors.StoreURLError: records store mysql://db.lan/records: unknown scheme 'mysql'; use a path, sqlite:///PATH or postgresql://USER@HOST/DATABASE
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import StoreURLError

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):")
_KNOWN = ("sqlite", "postgresql", "postgres")
_USE = "use a path, sqlite:///PATH or postgresql://USER@HOST/DATABASE"
POSTGRES_DRIVER = "postgresql+psycopg"


@dataclass(frozen=True)
class StoreLocation:
    """A parsed records store: `kind` is "sqlite" or "postgresql"; `path` is the SQLite
    file (":memory:" for none), `url` the SQLAlchemy URL of a server; `shown` is what
    messages print (a password is never shown)."""

    kind: str
    path: Path | None = None
    url: str = ""
    shown: str = ""

    @property
    def is_server(self) -> bool:
        return self.kind == "postgresql"


def looks_like_url(text: str) -> bool:
    """Whether `text` starts with a URL scheme (two letters or more, so a path such as
    `C:` or `a:b.db` with a one-letter prefix is still a path)."""
    m = _SCHEME.match(text)
    return bool(m) and len(m.group(1)) > 1 and (text[m.end():].startswith("//") or
                                                 m.group(1).split("+")[0].lower() in _KNOWN)


def store_location(value: str | os.PathLike[str]) -> StoreLocation:
    """The store `value` names (a path or a URL); a `StoreURLError` if it cannot be used."""
    text = os.fspath(value)
    if isinstance(value, os.PathLike) or not looks_like_url(text):
        if text == ":memory:":
            return StoreLocation("sqlite", Path(":memory:"), shown=":memory:")
        path = Path(text).expanduser()
        return StoreLocation("sqlite", path, shown=str(path))
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    scheme = _SCHEME.match(text).group(1).lower()
    base, _, driver = scheme.partition("+")
    if base not in _KNOWN:
        raise StoreURLError(f"records store {_hidden(text)}: unknown scheme {scheme!r}; {_USE}")
    try:
        url = make_url(text)
    except (ArgumentError, ValueError) as exc:
        raise StoreURLError(f"records store {_hidden(text)}: not a valid URL ({exc}); {_USE}") from None
    if base == "sqlite":
        if driver not in ("", "pysqlite"):
            raise StoreURLError(f"records store {text}: driver {driver!r} is not supported; use sqlite:///PATH")
        if url.host or url.username or url.port:
            raise StoreURLError(f"records store {text}: an SQLite URL names a file, not a host; write "
                                "sqlite:///relative/path.db or sqlite:////absolute/path.db")
        if not url.database or url.database == ":memory:":
            return StoreLocation("sqlite", Path(":memory:"), shown=":memory:")
        path = Path(url.database).expanduser()
        return StoreLocation("sqlite", path, shown=str(path))
    if driver not in ("", "psycopg"):
        raise StoreURLError(f"records store {_hidden(text)}: driver {driver!r} is not supported; "
                            "use postgresql:// (through psycopg)")
    if not url.database:
        raise StoreURLError(f"records store {_hidden(text)}: names no database; write "
                            "postgresql://USER@HOST:PORT/DATABASE")
    url = url.set(drivername=POSTGRES_DRIVER)
    shown = url.set(drivername="postgresql").render_as_string(hide_password=True)
    return StoreLocation("postgresql", None, url.render_as_string(hide_password=False), shown)


def _hidden(text: str) -> str:
    """`text` with any password replaced by ***."""
    return re.sub(r"(//[^/:@]*:)[^@/]*@", r"\1***@", text)
