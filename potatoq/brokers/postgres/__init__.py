"""The PostgreSQL broker (``postgresql://``, ``postgres://``)."""

from __future__ import annotations

from .broker import PostgresBroker, PostgresOptions

__all__ = ["PostgresBroker", "PostgresOptions"]
