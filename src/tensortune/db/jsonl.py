"""Export records to JSON lines and import them back, to ship tuned results.

Example:
    >>> import tempfile, os
    >>> db = Database(":memory:")
    >>> path = os.path.join(tempfile.mkdtemp(), "records.jsonl")
    >>> export_jsonl(db, path)
    0
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

from .database import Database, DatabaseError
from .records import Record


def export_jsonl(db: Database, path: str | os.PathLike[str], workload_prefix: str | None = None) -> int:
    """Write every record (or those of matching workloads) as one JSON object per line."""
    n = 0
    try:
        with open(path, "w", encoding="utf-8") as f:
            for rec in db.all_records():
                if workload_prefix and not rec.workload.id_text.startswith(workload_prefix):
                    continue
                f.write(json.dumps(rec.to_json(), sort_keys=True) + "\n")
                n += 1
    except OSError as exc:  # a missing folder, a full disk
        raise DatabaseError(f"cannot write {path}: {exc.strerror or exc}") from exc
    return n


MAX_LINE = 4 << 20  # characters of one record's line: no record tensortune writes comes near


def read_jsonl(path: str | os.PathLike[str]) -> Iterator[Record]:
    """The records of a JSON-lines file, each checked (`records.check_record`): a line that
    is not one names its number and the problem (a time that is not finite and positive,
    a value too long or nested too deep, a field of the wrong type)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = list(iter(lambda: f.readline(MAX_LINE + 1), ""))
    except UnicodeDecodeError as exc:
        raise DatabaseError(f"{path}: not a JSON-lines file of records (not UTF-8 text: {exc.reason})") from exc
    except OSError as exc:
        raise DatabaseError(f"cannot read {path}: {exc.strerror or exc}") from exc
    for lineno, line in enumerate(lines, 1):
        if len(line) > MAX_LINE:
            raise DatabaseError(f"{path}:{lineno}: a line longer than {MAX_LINE} characters is not a record")
        if not line.strip():
            continue
        try:
            yield Record.from_json(json.loads(line))
        except RecursionError:
            raise DatabaseError(f"{path}:{lineno}: not a tensortune record (nested too deep)") from None
        except (ValueError, KeyError, TypeError) as exc:
            what = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)[:300]
            raise DatabaseError(f"{path}:{lineno}: not a tensortune record ({what})") from exc


def import_jsonl(db: Database, path: str | os.PathLike[str]) -> int:
    """Add the records of a JSON-lines file; returns how many were new. The whole file is
    checked first: one bad line imports nothing."""
    return db.import_records(list(read_jsonl(path)))
