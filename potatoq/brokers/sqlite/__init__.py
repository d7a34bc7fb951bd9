"""The SQLite broker, the embedded default (``sqlite:///path/to/file.sqlite3``)."""

from __future__ import annotations

from .broker import SQLiteBroker
from .setup import SQLiteOptions

__all__ = ["SQLiteBroker", "SQLiteOptions"]
