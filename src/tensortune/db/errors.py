"""What the records store raises and warns.

Example:
    >>> issubclass(StoreURLError, DatabaseError)
    True
"""

from __future__ import annotations


class DatabaseError(RuntimeError):
    """The records store cannot be used; the message names it and the reason."""


class StoreURLError(DatabaseError, ValueError):
    """A `--db` / TENSORTUNE_DB value the tool cannot use; the message says why."""


class DamagedRecords(UserWarning):
    """Some records could not be read and were skipped; the message names them."""
