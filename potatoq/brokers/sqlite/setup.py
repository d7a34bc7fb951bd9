"""Setting up the SQLite broker: options, start-up checks and the schema.

Everything here runs before (or while) a connection is first opened: parsing
``broker_transport_options`` into :class:`SQLiteOptions`, refusing set-ups SQLite can't
serve safely (in-memory URLs, SQLite < 3.35, network filesystems) and bringing a database
file's schema up to date with the numbered migrations in ``sql/migrations/``. The
broker itself is in :mod:`potatoq.brokers.sqlite.broker`.
"""

from __future__ import annotations

import dataclasses
import os
import sqlite3
import time
from collections.abc import Mapping
from typing import Any

from potatoq.exceptions import ImproperlyConfigured, OperationalError

from .. import sqlfiles

__all__ = [
    "LATEST_VERSION",
    "MIN_SQLITE_VERSION",
    "NETWORK_FILESYSTEMS",
    "SQL",
    "SQLiteOptions",
    "apply_migrations",
    "check_local_filesystem",
    "check_sqlite_version",
    "database_path",
    "enable_wal",
    "install_schema",
    "migrate",
    "network_filesystem",
]

MIN_SQLITE_VERSION = (3, 35, 0)  # UPDATE … RETURNING

# Filesystem types (as /proc/mounts names them) on which SQLite's locking and WAL's shared
# memory don't work reliably.
NETWORK_FILESYSTEMS = frozenset(
    {
        "nfs", "nfs4", "cifs", "smb", "smb3", "smbfs", "ncpfs", "afs", "coda", "9p",
        "ceph", "glusterfs", "lustre", "gpfs", "davfs", "fuse.sshfs", "sshfs",
        "fuse.glusterfs", "fuse.ceph", "fuse.s3fs", "fuse.rclone", "fuse.gcsfuse", "fuse.davfs2",
    }
)  # fmt: skip


SQL = sqlfiles.load_directory("potatoq.brokers.sqlite", "sql")
_INSTALL = tuple(sqlfiles.load_file("potatoq.brokers.sqlite", "sql/install/current.sql").items())
_MIGRATIONS = sqlfiles.load_migrations("potatoq.brokers.sqlite", "sql/migrations")
LATEST_VERSION = len(_MIGRATIONS)

# ----------------------------------------------------------------------------- options


@dataclasses.dataclass(frozen=True, slots=True)
class SQLiteOptions:
    """``broker_transport_options`` understood by the SQLite broker."""

    #: synchronous=FULL instead of NORMAL: also survive an OS crash or power loss, slower.
    durable: bool = False
    #: milliseconds a writer waits for the write lock before failing.
    busy_timeout: int = 30000
    #: bytes the WAL file is truncated to after a checkpoint.
    journal_size_limit: int = 64 * 1024 * 1024
    #: skip the refusal of NFS/SMB/sshfs… mounts (only if you know locking works there).
    allow_network_filesystem: bool = False
    #: log a write transaction that held the write lock this long (ms), when it is the
    #: longest of its process so far (see holds.py).
    slow_write_ms: int = 100

    @classmethod
    def from_transport_options(cls, options: Mapping[str, Any]) -> SQLiteOptions:
        """Parse and check ``options``; an unknown name or a wrong type is a clear error."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for name, value in options.items():
            field = fields.get(name)
            if field is None:
                known = ", ".join(sorted(fields))
                raise ImproperlyConfigured(
                    f"unknown SQLite broker_transport_options key {name!r}; known options: {known}"
                )
            kind = bool if field.type == "bool" else int
            if not isinstance(value, kind) or (kind is int and (isinstance(value, bool) or value < 0)):
                expected = "True or False" if kind is bool else "a non-negative integer"
                raise ImproperlyConfigured(
                    f"SQLite broker_transport_options[{name!r}] must be {expected}, got {value!r}"
                )
        return cls(**dict(options))


# ----------------------------------------------------------------------------- start-up checks


def database_path(url: str) -> str:
    """The absolute database path of ``sqlite:///relative`` or ``sqlite:////absolute`` URLs.

    In-memory databases are refused: worker processes each need to open the same database.
    """
    prefix = "sqlite://"
    if not url.lower().startswith(prefix):
        raise ImproperlyConfigured(f"not a SQLite URL: {url!r} (use sqlite:///path/to/file.sqlite3)")
    rest = url[len(prefix) :]
    path = rest[1:] if rest.startswith("/") else ""
    if rest and not rest.startswith("/"):
        raise ImproperlyConfigured(
            f"SQLite URL {url!r} has a host part; use sqlite:///relative/path or sqlite:////absolute/path"
        )
    if not path or path == ":memory:" or path.startswith("file::memory:") or "mode=memory" in path:
        raise ImproperlyConfigured(
            f"SQLite URL {url!r} names no database file; in-memory databases can't be shared with "
            "worker processes. Use sqlite:///path/to/file.sqlite3 (or memory:// for tests)"
        )
    if "?" in path:
        raise ImproperlyConfigured(
            f"SQLite URL {url!r} has a query string; pass options in broker_transport_options"
        )
    return os.path.abspath(path)


def check_sqlite_version(version: tuple[int, int, int], text: str | None = None) -> None:
    """Refuse SQLite libraries older than 3.35 (no ``RETURNING``), naming the version found."""
    if tuple(version) < MIN_SQLITE_VERSION:
        found = text or ".".join(map(str, version))
        need = ".".join(map(str, MIN_SQLITE_VERSION))
        raise ImproperlyConfigured(
            f"the SQLite broker needs SQLite {need} or newer, but Python's sqlite3 module uses "
            f"SQLite {found}; use a Python built with a newer SQLite (python.org, uv and most "
            "distributions' recent Pythons bundle one)"
        )


def _unescape_mount(field: str) -> str:
    """/proc/mounts writes space, tab, newline and backslash as octal escapes."""
    for escaped, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(escaped, char)
    return field


def network_filesystem(directory: str, mounts: str) -> str | None:
    """The network filesystem type ``directory`` is on, per a /proc/mounts text, or None.

    A pure function: ``mounts`` is the table's text, so it is testable without mounting NFS.
    The longest mount point containing ``directory`` wins (later lines win ties: they are
    mounted on top).
    """
    best_point, best_type = "", ""
    for line in mounts.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        point, fstype = _unescape_mount(parts[1]), parts[2]
        inside = point in ("/", directory) or directory.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best_point):
            best_point, best_type = point, fstype
    return best_type if best_type in NETWORK_FILESYSTEMS else None


def check_local_filesystem(path: str, mounts: str | None = None) -> None:
    """Refuse a database on a network filesystem (detected through /proc/mounts on Linux)."""
    if mounts is None:
        try:
            with open("/proc/mounts", encoding="utf-8", errors="replace") as f:
                mounts = f.read()
        except OSError:  # not Linux: nothing to detect with
            return
    directory = os.path.dirname(os.path.realpath(path))
    fstype = network_filesystem(directory, mounts)
    if fstype is not None:
        raise ImproperlyConfigured(
            f"the SQLite database {path!r} is on a network filesystem ({fstype}); SQLite's locks "
            "and WAL mode don't work there and the database can be corrupted. Put it on a local "
            "disk, or use the PostgreSQL or Redis broker to share a queue between hosts"
        )


# ----------------------------------------------------------------------------- WAL


def enable_wal(conn: sqlite3.Connection, timeout: float) -> None:
    """Put the file in WAL mode (persistent: only the first connection ever changes it).

    Changing the journal mode needs a lock that the busy timeout doesn't wait for: two
    processes opening a brand-new file at once saw "database is locked" at once. So the
    mode is read first (every open after the first finds WAL and asks for nothing), and
    the switch on a new file is retried until ``timeout``.
    """
    mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
    deadline = time.monotonic() + timeout
    while mode != "wal":
        try:
            mode = str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]).lower()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)
            continue
        if mode != "wal":
            raise OperationalError(f"the SQLite database refused WAL mode (journal_mode is {mode!r})")


# ----------------------------------------------------------------------------- schema


def install_schema(conn: sqlite3.Connection, now: float) -> None:
    """Create the current schema in an empty database (inside the caller's transaction)."""
    for _name, sql in _INSTALL:
        conn.execute(sql)
    for migration in _MIGRATIONS:
        conn.execute(
            SQL["schema_record_migration"],
            {"version": migration.number, "name": migration.name, "now": now},
        )


def apply_migrations(conn: sqlite3.Connection, start: int, now: float) -> None:
    """Apply migrations ``start + 1 … latest`` in order (inside the caller's transaction)."""
    for migration in _MIGRATIONS[start:]:
        for _name, sql in migration.statements:
            conn.execute(sql)
        conn.execute(
            SQL["schema_record_migration"],
            {"version": migration.number, "name": migration.name, "now": now},
        )


def _schema_version(conn: sqlite3.Connection) -> int:
    try:
        row = conn.execute(SQL["schema_version"]).fetchone()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return 0
        raise
    return int(row[0])


def migrate(conn: sqlite3.Connection, now: float) -> None:
    """Bring the file's schema up to date; many processes may race here, one does the work."""
    if _schema_version(conn) == LATEST_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(SQL["schema_create_migrations"])
        version = int(conn.execute(SQL["schema_version"]).fetchone()[0])
        if version > LATEST_VERSION:
            raise ImproperlyConfigured(
                f"the SQLite database has schema version {version}, newer than this potatoq "
                f"knows ({LATEST_VERSION}); upgrade potatoq"
            )
        if version == 0 and not conn.execute(SQL["schema_has_jobs_table"]).fetchone()[0]:
            install_schema(conn, now)
        else:
            apply_migrations(conn, version, now)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
