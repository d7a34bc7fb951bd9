"""The PostgreSQL broker's SQL, rendered for one schema.

The statements live in ``potatoq/brokers/postgres/sql/*.sql`` as named blocks (read by the
shared :mod:`potatoq.brokers.sqlfiles` loader), the fresh install in
``sql/install/current.sql`` and the numbered migrations in ``sql/migrations/``.
Every file writes ``{schema}`` where the schema name goes; :func:`render` replaces it with
the name quoted as an identifier (psycopg's ``sql.Identifier``), so a hostile schema name
is only ever an odd but harmless identifier. Values are always bound parameters
(``%(name)s``), never spliced into the text.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping
from typing import Any

from psycopg import sql

from potatoq.exceptions import ImproperlyConfigured

from .. import sqlfiles

PACKAGE = "potatoq.brokers.postgres"
NAMEDATALEN = 63  # the longest identifier PostgreSQL keeps, in bytes


@functools.cache
def queries() -> Mapping[str, str]:
    return sqlfiles.load_directory(PACKAGE, "sql")


@functools.cache
def install_blocks() -> tuple[tuple[str, str], ...]:
    return tuple(sqlfiles.load_file(PACKAGE, "sql/install/current.sql").items())


@functools.cache
def migrations() -> tuple[sqlfiles.Migration, ...]:
    return tuple(sqlfiles.load_migrations(PACKAGE, "sql/migrations"))


def validate_schema_name(schema: object) -> str:
    """Any name PostgreSQL can hold (it is always quoted); refuse what it would truncate."""
    if not isinstance(schema, str) or not schema:
        raise ImproperlyConfigured(
            f"broker_transport_options['schema'] must be a non-empty string, got {schema!r:.60}"
        )
    if "\x00" in schema:
        raise ImproperlyConfigured("broker_transport_options['schema'] contains a NUL character")
    if len(schema.encode()) > NAMEDATALEN:
        raise ImproperlyConfigured(
            f"schema name {schema!r:.80} is longer than PostgreSQL's {NAMEDATALEN}-byte identifier limit"
        )
    return schema


def render(template: str, **identifiers: str) -> str:
    """``template`` with each ``{name}`` replaced by ``identifiers[name]``, quoted."""
    quoted = {name: sql.Identifier(value) for name, value in identifiers.items()}
    return sql.SQL(template).format(**quoted).as_string(None)


def compact(text: str) -> str:
    """``text`` without whole-line comments and blank lines.

    The comments document the .sql files; sent to the server they only make statements
    longer, and psycopg caches the parsing of queries up to 4 KiB only: the settle statement
    with its comments was longer and was parsed again on every settle.
    """
    return "\n".join(
        line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("--")
    )


# An array parameter with an explicit cast (``%(m_ids)s::text[]``): psycopg 3 may send it in
# binary. Its text dumper quotes and escapes every element in Python, about 30 us per
# message of a batch (bytea payloads are the worst); the binary one about 2 us. Without
# the cast the server would need the text form to infer the type, so only these change.
_CAST_ARRAY_PARAM = re.compile(rb"%\((\w+)\)s(::\w+\[\])")


@dataclasses.dataclass(frozen=True, slots=True)
class Statement:
    """One rendered statement, in the two forms the drivers take."""

    name: str
    text: str  # for DB-API drivers that take str (psycopg 2)
    query: bytes  # for psycopg 3, which takes bytes as an already-composed query

    @classmethod
    def of(cls, name: str, text: str) -> Statement:
        return cls(name, text, _CAST_ARRAY_PARAM.sub(rb"%(\1)b\2", text.encode()))


class Statements:
    """Every named statement rendered for one schema, looked up by name."""

    def __init__(self, schema: str) -> None:
        self.schema = validate_schema_name(schema)
        self._by_name = {
            name: Statement.of(name, compact(render(body, schema=self.schema)))
            for name, body in queries().items()
            if "{channel}" not in body
        }

    def __getitem__(self, name: str) -> Statement:
        return self._by_name[name]

    def listen(self, channel: str) -> bytes:
        return render(queries()["listen"], channel=channel).encode()

    def install(self) -> list[Statement]:
        return [Statement.of(name, render(body, schema=self.schema)) for name, body in install_blocks()]

    def migration(self, migration: sqlfiles.Migration) -> list[Statement]:
        return [Statement.of(name, render(body, schema=self.schema)) for name, body in migration.statements]


def first_int(row: tuple[Any, ...] | None) -> int:
    """The count in a one-column result row (0 for no row or NULL)."""
    return int(row[0]) if row and row[0] is not None else 0


def promotion(row: tuple[Any, ...] | None) -> tuple[int, float | None]:
    """job_promote's row: how many tasks it made ready, and seconds until the next is due."""
    if not row:
        return 0, None
    return first_int(row), (None if row[2] is None else float(row[2]))
