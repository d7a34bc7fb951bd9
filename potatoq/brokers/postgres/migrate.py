"""Installing and upgrading the PostgreSQL broker's schema.

A schema records the migrations applied to it in ``potatoq_migrations``. On first use (or
``potatoq migrate``) the broker takes a transaction-level advisory lock keyed on the schema
name, so any number of processes starting at once install it exactly once; in that same
transaction it either runs ``install/current.sql`` (an empty schema: the fresh install,
recorded as every migration) or applies the missing numbered migrations in order. The lock
is ``pg_advisory_xact_lock``: released by COMMIT or ROLLBACK, never left behind by a crash.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from potatoq.exceptions import ImproperlyConfigured

from . import statements

log = logging.getLogger("potatoq.brokers.postgres")


MIN_SERVER_VERSION = 130000  # 13: gen_random_uuid() in core, and the schema's storage options


def require_server_version(server_version: int) -> None:
    """Refuse a PostgreSQL server older than 13 (``server_version`` as libpq reports it:
    ``150004`` for 15.4, ``90624`` for 9.6.24) with a one-line error."""
    if server_version < MIN_SERVER_VERSION:
        raise ImproperlyConfigured(
            f"the PostgreSQL server is version {_version_text(server_version)}; "
            "potatoq's PostgreSQL broker needs 13 or newer"
        )


def _version_text(server_version: int) -> str:
    if server_version >= 100000:  # 10 and later: major * 10000 + minor
        return f"{server_version // 10000}.{server_version % 10000}"
    major, rest = divmod(server_version, 10000)  # 9.x: major * 10000 + minor * 100 + patch
    return f"{major}.{rest // 100}.{rest % 100}"


def latest_version() -> int:
    return statements.migrations()[-1].number


def applied_versions(conn: psycopg.Connection[Any], stmts: statements.Statements) -> list[int]:
    """Versions applied to the schema, or ``[]`` when it isn't installed."""
    row = conn.execute(stmts["schema_installed"].query, {"schema": stmts.schema}).fetchone()
    if row is None or not row[0]:
        return []
    return [r[0] for r in conn.execute(stmts["schema_applied"].query)]


def upgrade(
    conn: psycopg.Connection[Any], stmts: statements.Statements, *, fresh_install: bool = True
) -> list[int]:
    """Bring the schema up to date; return the versions applied now (``[]``: it was current).

    ``fresh_install=False`` takes the numbered migrations even on an empty schema; the
    migration test compares the two paths.
    """
    applied = applied_versions(conn, stmts)
    if applied and max(applied) >= latest_version():
        _refuse_newer(stmts, max(applied))
        return []
    with conn.transaction():
        conn.execute(stmts["schema_lock"].query, {"schema": stmts.schema})
        conn.execute(stmts["schema_create_schema"].query)
        conn.execute(stmts["schema_create_versions"].query)
        done = {r[0] for r in conn.execute(stmts["schema_applied"].query)}  # again, under the lock
        todo = [m for m in statements.migrations() if m.number not in done]
        if todo and not done and fresh_install:
            for statement in stmts.install():
                conn.execute(statement.query)
        else:
            for migration in todo:
                for statement in stmts.migration(migration):
                    conn.execute(statement.query)
        for migration in todo:
            conn.execute(stmts["schema_record"].query, {"version": migration.number, "name": migration.name})
    if done:
        _refuse_newer(stmts, max(done))
    if todo:
        log.info("schema %r: applied migrations %s", stmts.schema, [m.number for m in todo])
    return [m.number for m in todo]


def _refuse_newer(stmts: statements.Statements, version: int) -> None:
    if version > latest_version():
        raise ImproperlyConfigured(
            f"the PostgreSQL schema {stmts.schema!r} is at migration {version}, newer than this "
            f"potatoq knows ({latest_version()}); upgrade potatoq"
        )
