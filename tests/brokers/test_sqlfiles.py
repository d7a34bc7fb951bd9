"""The ``-- name:`` block parser shared by the SQL brokers."""

from __future__ import annotations

import pytest

from potatoq.brokers import sqlfiles


def test_blocks_in_order_with_header_and_trailing_comments_dropped() -> None:
    text = """\
-- File header: what these statements are for.

-- name: first_thing
-- documents first_thing, stays with it
SELECT 1;

-- This comment introduces second_thing; it is not part of first_thing.
-- name: second_thing
UPDATE t SET x = 1
WHERE y = 2;
"""
    blocks = sqlfiles.parse_blocks(text)
    assert list(blocks) == ["first_thing", "second_thing"]
    assert blocks["first_thing"] == "-- documents first_thing, stays with it\nSELECT 1;"
    assert blocks["second_thing"] == "UPDATE t SET x = 1\nWHERE y = 2;"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("SELECT 1;\n-- name: a\nSELECT 2;", "before the first"),
        ("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;", "defined twice"),
        ("-- name: a\n-- only a comment\n", "has no SQL"),
        ("-- name: Not-An-Identifier\nSELECT 1;", "identifier"),
    ],
)
def test_malformed_files_are_refused_with_the_reason(text: str, problem: str) -> None:
    with pytest.raises(sqlfiles.SQLFileError, match=problem):
        sqlfiles.parse_blocks(text, source="x.sql")


def test_sqlite_files_load_with_unique_names_and_numbered_migrations() -> None:
    queries = sqlfiles.load_directory("potatoq.brokers.sqlite", "sql")
    assert {"job_claim", "job_insert", "result_upsert", "chord_fire", "periodic_claim"} <= set(queries)
    migrations = sqlfiles.load_migrations("potatoq.brokers.sqlite", "sql/migrations")
    assert [m.number for m in migrations] == list(range(1, len(migrations) + 1))
    assert migrations[0].statements[0][0] == "create_jobs"
