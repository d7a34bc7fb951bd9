"""The PostgreSQL broker's options (``broker_transport_options``), its URL check, and which
connection errors mean "reconnect and retry" (with the fix when a standby was reached)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import psycopg

from potatoq.exceptions import ImproperlyConfigured
from potatoq.utils import mask_url

from . import statements


@dataclasses.dataclass(frozen=True, slots=True)
class PostgresOptions:
    """``broker_transport_options`` understood by the PostgreSQL broker."""

    #: schema holding potatoq's tables (created if missing); None: the connection's current schema.
    schema: str | None = None
    #: LISTEN/NOTIFY wake-ups. False for PgBouncer in transaction mode: workers poll instead.
    notify: bool = True
    #: seconds of the NOTIFY debounce window: a process sends at most ``notify_burst``
    #: NOTIFYs per queue at once, then one per ``notify_debounce / notify_burst`` (a token
    #: bucket). Enqueues beyond that are announced by one trailing NOTIFY, never left to the
    #: fallback poll. 0: one NOTIFY per enqueue.
    notify_debounce: float = 0.05
    #: NOTIFYs per queue a process sends inline within one window before it coalesces; a
    #: trickle below this rate is announced at once (the size of the token bucket).
    notify_burst: int = 5
    #: seconds between safety-net polls of an idle worker, and between promotions of due
    #: scheduled tasks by each worker process.
    poll_interval: float = 1.0
    #: application_name of potatoq's connections (visible in pg_stat_activity).
    application_name: str = "potatoq"
    #: server-side prepared statements for hot statements (psycopg prepares a statement on
    #: its 5th use). False for PgBouncer older than 1.21 in transaction mode.
    prepared_statements: bool = True

    @classmethod
    def from_transport_options(cls, options: Mapping[str, Any]) -> PostgresOptions:
        """Parse and check ``options``; an unknown name or a wrong type is a clear error."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for name, value in options.items():
            field = fields.get(name)
            if field is None:
                known = ", ".join(sorted(fields))
                raise ImproperlyConfigured(
                    f"unknown PostgreSQL broker_transport_options key {name!r}; known options: {known}"
                )
            if name == "schema":
                if value is not None:
                    statements.validate_schema_name(value)
            elif field.type == "bool":
                if not isinstance(value, bool):
                    raise ImproperlyConfigured(
                        f"PostgreSQL broker_transport_options[{name!r}] must be True or False, got {value!r}"
                    )
            elif field.type == "float":
                if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                    raise ImproperlyConfigured(
                        f"PostgreSQL broker_transport_options[{name!r}] must be a number of seconds >= 0, "
                        f"got {value!r}"
                    )
            elif field.type == "int":
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise ImproperlyConfigured(
                        f"PostgreSQL broker_transport_options[{name!r}] must be an integer >= 1, "
                        f"got {value!r}"
                    )
            elif not isinstance(value, str):
                raise ImproperlyConfigured(
                    f"PostgreSQL broker_transport_options[{name!r}] must be a string, got {value!r}"
                )
        parsed = cls(**dict(options))
        if parsed.poll_interval <= 0:
            raise ImproperlyConfigured("PostgreSQL broker_transport_options['poll_interval'] must be > 0")
        return parsed


def libpq_url(url: str) -> str:
    """The URL as libpq takes it: ``postgresql+psycopg://`` (SQLAlchemy style) loses its ``+…``."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.split("+", 1)[0].lower() not in ("postgresql", "postgres"):
        raise ImproperlyConfigured(f"not a PostgreSQL URL: {mask_url(url)!r} (use postgresql://host/dbname)")
    return f"postgresql://{rest}"


#: Errors after which a statement is retried on a new connection, as in an outage. A
#: read-only server is a standby (or a primary demoted under a connection), reached by a URL
#: without target_session_attrs=read-write.
RECONNECT_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError, psycopg.errors.ReadOnlySqlTransaction)


def connection_failure(url: str, exc: BaseException) -> str:
    """The message of the OperationalError raised for ``exc`` (one of RECONNECT_ERRORS)."""
    where = f"PostgreSQL broker at {mask_url(url)}"
    if not isinstance(exc, psycopg.errors.ReadOnlySqlTransaction):
        return f"{where}: {exc}"
    return (
        f"{where} reached a read-only server (a standby?): {exc}; list every host in the URL "
        "and add ?target_session_attrs=read-write so that connections go to the primary"
    )
