"""Named SQL blocks read from ``.sql`` files shipped next to a broker.

A file holds one statement per block; a block starts with a ``-- name: <identifier>`` line
and runs until the next one::

    -- name: job_claim
    -- Comments right after the name line document the statement and stay in its text.
    UPDATE potatoq_jobs SET state = 2 WHERE ...;

Text before the first name line may only be comments (a file header). Comment-only lines at
the end of a block are dropped, so a comment written just above the next ``-- name:`` line
never becomes part of the previous statement. Names must be unique, across all the files of
a directory too, so a broker refers to each statement by one name.

Migrations are files named ``NNNN_description.sql`` in their own directory; their blocks
run in file order. Shared by the SQLite and PostgreSQL brokers; it only parses text.
"""

from __future__ import annotations

import dataclasses
import re

from potatoq.utils.package_files import files as package_files

__all__ = ["Migration", "SQLFileError", "load_directory", "load_file", "load_migrations", "parse_blocks"]

_NAME_LINE = re.compile(r"^--\s*name:\s*(?P<name>\S+)\s*$")
_IDENTIFIER = re.compile(r"^[a-z][a-z0-9_]*$")
_MIGRATION_FILE = re.compile(r"^(?P<number>\d{4})_(?P<name>[a-z0-9_]+)\.sql$")


class SQLFileError(ValueError):
    """A ``.sql`` file shipped with potatoq is malformed (a packaging bug, never user input)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Migration:
    """One numbered schema change: its statements run in order, in one transaction."""

    number: int
    name: str
    statements: tuple[tuple[str, str], ...]  # (block name, SQL) in file order


def parse_blocks(text: str, *, source: str = "<sql>") -> dict[str, str]:
    """The named blocks of ``text`` in file order: ``{name: sql}``."""
    blocks: dict[str, str] = {}
    name: str | None = None
    lines: list[str] = []

    def finish() -> None:
        if name is None:
            return
        while lines and (not lines[-1].strip() or lines[-1].lstrip().startswith("--")):
            lines.pop()
        body = "\n".join(lines).strip()
        if not any(line.strip() and not line.lstrip().startswith("--") for line in lines):
            raise SQLFileError(f"{source}: block {name!r} has no SQL")
        blocks[name] = body

    for number, line in enumerate(text.splitlines(), start=1):
        match = _NAME_LINE.match(line.strip())
        if match:
            finish()
            name, lines = match["name"], []
            if not _IDENTIFIER.match(name):
                raise SQLFileError(f"{source}:{number}: block name {name!r} is not a lower_snake identifier")
            if name in blocks:
                raise SQLFileError(f"{source}:{number}: block {name!r} is defined twice")
        elif name is None:
            if line.strip() and not line.lstrip().startswith("--"):
                raise SQLFileError(f"{source}:{number}: SQL before the first '-- name:' line")
        else:
            lines.append(line)
    finish()
    return blocks


def load_file(package: str, path: str) -> dict[str, str]:
    """The blocks of one file, ``package/path`` (e.g. ``"sql/install/current.sql"``)."""
    text = package_files(package).joinpath(path).read_text(encoding="utf-8")
    return parse_blocks(text, source=f"{package}/{path}")


def load_directory(package: str, directory: str) -> dict[str, str]:
    """Every block of every ``*.sql`` file directly in ``package/directory``, by name."""
    root = package_files(package).joinpath(directory)
    found: dict[str, str] = {}
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if not entry.is_file() or not entry.name.endswith(".sql"):
            continue
        source = f"{package}/{directory}/{entry.name}"
        for name, sql in parse_blocks(entry.read_text(encoding="utf-8"), source=source).items():
            if name in found:
                raise SQLFileError(f"{source}: block {name!r} is also defined in another file")
            found[name] = sql
    if not found:
        raise SQLFileError(f"no SQL blocks found in {package}/{directory}")
    return found


def load_migrations(package: str, directory: str) -> list[Migration]:
    """The ``NNNN_name.sql`` files of ``package/directory``, numbered 1, 2, 3 … without gaps."""
    root = package_files(package).joinpath(directory)
    migrations: list[Migration] = []
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if not entry.is_file() or not entry.name.endswith(".sql"):
            continue
        match = _MIGRATION_FILE.match(entry.name)
        source = f"{package}/{directory}/{entry.name}"
        if match is None:
            raise SQLFileError(f"{source}: migration files are named NNNN_description.sql")
        blocks = parse_blocks(entry.read_text(encoding="utf-8"), source=source)
        migrations.append(Migration(int(match["number"]), match["name"], tuple(blocks.items())))
    for expected, migration in enumerate(migrations, start=1):
        if migration.number != expected:
            raise SQLFileError(
                f"{package}/{directory}: migration {expected:04d} is missing (found {migration.number:04d})"
            )
    return migrations
