"""The records database and its JSON-lines import/export."""

from .database import SCHEMA_VERSION, DamagedRecords, Database, DatabaseError, default_db_path
from .jsonl import export_jsonl, import_jsonl, read_jsonl
from .records import Record, Target, Workload

__all__ = [
    "DamagedRecords", "Database", "DatabaseError", "Record", "SCHEMA_VERSION", "Target", "Workload",
    "default_db_path", "export_jsonl", "import_jsonl", "read_jsonl",
]
