"""The records database (SQLite or PostgreSQL, by path or URL) and its JSON-lines import/export."""

from .database import SCHEMA_VERSION, DamagedRecords, Database, DatabaseError, default_db_path
from .errors import StoreURLError
from .jsonl import export_jsonl, import_jsonl, read_jsonl
from .records import Record, Target, Workload
from .url import StoreLocation, store_location

__all__ = [
    "DamagedRecords", "Database", "DatabaseError", "Record", "SCHEMA_VERSION", "StoreLocation", "StoreURLError",
    "Target", "Workload", "default_db_path", "export_jsonl", "import_jsonl", "read_jsonl", "store_location",
]
