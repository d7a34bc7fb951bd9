"""The scale guard of task history: every page shape walks an index, never the whole table.

``broker.history()`` composes its statement from the filters a query sets (see
:mod:`potatoq.brokers.history_sql`). Each of the 128 combinations of the seven filters is
planned against ~20,000 history rows with statistics (SQLite ``EXPLAIN QUERY PLAN`` after
``ANALYZE``, PostgreSQL ``EXPLAIN`` after ``VACUUM ANALYZE``); a plan fails the test when it
scans ``potatoq_history`` whole, or when a query with a time range doesn't walk the
``finished_at`` index, or one by a rare task id, name, queue or state that column's index
(the page would read the table until it found a match: all of it for a rare one), or one
with exception text and no more selective filter the records that carry an exception. The
dashboard charts' per-minute rollups must be read, upserted and trimmed on an index too
(``potatoq_history_rollups``, filled with a week of minutes for 40 names). Plans only,
nothing executes. ``make
bench-history-scale`` times them at 10 million rows.
"""

from __future__ import annotations

import itertools
import json
import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from potatoq.brokers import create_broker
from potatoq.brokers.base import BrokerConfig, HistoryQuery
from potatoq.brokers.history_rollup import window_minutes
from potatoq.brokers.history_sql import DRIVERS, Shape, links_statement

NOW = time.time()
INDEX_OF = {"task_id": "potatoq_history_task", "name": "potatoq_history_name",
            "queue": "potatoq_history_queue", "state": "potatoq_history_state",
            "text": "potatoq_history_exc"}  # fmt: skip
# rare values (20 rows in 20,000 each): a page by one must walk its index
SAMPLE: dict[str, Any] = {
    "task_id": "task-17", "name": "tasks.rare", "queue": "q-rare", "state": "DEAD",
    "since": NOW - 7200, "until": NOW - 3600, "text": "boom",
}  # fmt: skip


def chart_params() -> Iterator[dict[str, Any]]:
    """The charts' rollup reads: the last hour (minutes) and the last week (hours), of
    every task and of one."""
    hour = NOW - NOW % 3600
    for start, step, buckets in ((NOW - 3600, 60.0, 60), (hour - 7 * 86400, 7200.0, 84)):
        for name in ("", SAMPLE["name"]):
            span, lo, hi = window_minutes(start, step, buckets)
            yield {"name": name, "span": span, "lo": lo, "hi": hi}


def every_query() -> Iterator[HistoryQuery]:
    for n in range(len(SAMPLE) + 1):
        for combo in itertools.combinations(SAMPLE, n):
            yield HistoryQuery(**{k: SAMPLE[k] for k in combo}, cursor=None)


def _window_index(query: HistoryQuery) -> str | None:
    """The index a page's window walks: finished_at for a time range (with exception text,
    the finish times of the records with an exception), else that of the first set of task
    id, a state but SUCCESS, name, queue, text (the records with an exception), SUCCESS."""
    if (query.since is not None or query.until is not None) and query.task_id is None:
        return "potatoq_history_exc_finished" if query.text else "potatoq_history_finished"
    rare_state = ("state",) if query.state not in (None, "SUCCESS") else ()
    for field in ("task_id", *rare_state, "name", "queue", "text", "state"):
        if getattr(query, field) is not None:
            return INDEX_OF[field]
    return None


# rows finished over the last 20,000 seconds: 40 names, 10 queues, 1 % failures with a
# message, and the rare values of SAMPLE
SQLITE_FILL = """
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 19999)
INSERT INTO potatoq_history (task_id, name, queue, state, finished_at, exc_type, exc_message)
SELECT 'task-' || i,
       CASE WHEN i % 1000 = 1 THEN 'tasks.rare' ELSE 'tasks.n' || (i % 40) END,
       CASE WHEN i % 1000 = 2 THEN 'q-rare' ELSE 'q' || (i % 10) END,
       CASE WHEN i % 1000 = 3 THEN 'DEAD' WHEN i % 100 = 0 THEN 'FAILURE' ELSE 'SUCCESS' END,
       :now - 20000 + i,
       CASE WHEN i % 100 = 0 THEN 'ValueError' END, CASE WHEN i % 100 = 0 THEN 'bad row ' || i END
FROM n
"""

# a week of minutes for 40 names and '' (every task), as the writes leave them
SQLITE_ROLLUP_FILL = """
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 10079)
INSERT INTO potatoq_history_rollups (name, span, minute, success, run_n, run_sum, run_hist)
SELECT CASE WHEN k.j = 40 THEN '' ELSE 'tasks.n' || k.j END, s.span,
       CAST(:now / 60 AS INTEGER) - n.i * s.span, 5, 5, 1.0, '{"60":5}'
FROM n, (WITH RECURSIVE m(j) AS (SELECT 0 UNION ALL SELECT j + 1 FROM m WHERE j < 40) SELECT j FROM m) AS k,
     (SELECT 1 AS span UNION ALL SELECT 60) AS s
WHERE s.span = 1 OR n.i < 168
"""


def test_every_sqlite_history_page_walks_an_index(tmp_path: Path) -> None:
    from potatoq.brokers.sqlite import SQLiteBroker
    from potatoq.brokers.sqlite.setup import SQL

    path = tmp_path / "plans.sqlite3"
    broker = create_broker(BrokerConfig(url=f"sqlite:///{path}"))
    assert isinstance(broker, SQLiteBroker)
    conn = sqlite3.connect(path)
    try:
        broker.migrate()
        with conn:
            conn.execute(SQLITE_FILL, {"now": NOW})
            conn.execute(SQLITE_ROLLUP_FILL, {"now": NOW})
        conn.execute("ANALYZE")
        full_scan = re.compile(r"^SCAN potatoq_history\b")
        offenders: dict[str, list[str]] = {}
        for query in every_query():
            text, params = broker._history_statement(query)
            plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + text, params)]
            index = _window_index(query)
            bad = [step for step in plan if full_scan.match(step)]
            if index is not None and not any(f"INDEX {index} " in step for step in plan):
                bad.append(f"doesn't use {index}")
            if bad:
                offenders[repr(Shape.of(query))] = bad
        rollup_scan = re.compile(r"^SCAN potatoq_history_rollups\b")
        for params in chart_params():
            plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + SQL["history_rollups"], params)]
            if not any("USING PRIMARY KEY" in step for step in plan) or any(
                rollup_scan.match(s) for s in plan
            ):
                offenders[f"history_rollups {params}"] = plan
        key = ("tasks.n1", 1, int(NOW // 60))
        put = (*key, 1, 0, 0, 0, 0, 1, 0.5, '{"60":1}', 0, 0.0, "{}")
        for name, params in (("history_rollup_get", key), ("history_rollup_put", put)):
            plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + SQL[name], params)]
            if any(full_scan.match(step) or rollup_scan.match(step) for step in plan):
                offenders[name] = plan
        plan = [
            row[3]
            for row in conn.execute("EXPLAIN QUERY PLAN " + SQL["history_rollups_trim"], {"cutoff": NOW})
        ]
        if any(full_scan.match(step) or rollup_scan.match(step) for step in plan):
            offenders["history_rollups_trim"] = plan
    finally:
        conn.close()
        broker.close()
    assert not offenders, f"history pages that read the table: {offenders}"


PG_FILL = """
INSERT INTO {schema}.potatoq_history (task_id, name, queue, state, finished_at, exc_type, exc_message)
SELECT 'task-' || i,
       CASE WHEN i %% 1000 = 1 THEN 'tasks.rare' ELSE 'tasks.n' || (i %% 40) END,
       CASE WHEN i %% 1000 = 2 THEN 'q-rare' ELSE 'q' || (i %% 10) END,
       CASE WHEN i %% 1000 = 3 THEN 'DEAD' WHEN i %% 100 = 0 THEN 'FAILURE' ELSE 'SUCCESS' END,
       %(now)s - 20000 + i,
       CASE WHEN i %% 100 = 0 THEN 'ValueError' END, CASE WHEN i %% 100 = 0 THEN 'bad row ' || i END
FROM generate_series(0, 19999) AS i
"""

PG_ROLLUP_FILL = """
INSERT INTO {schema}.potatoq_history_rollups (name, span, minute, success, run_n, run_sum, run_hist)
SELECT CASE WHEN k = 40 THEN '' ELSE 'tasks.n' || k END, span, floor(%(now)s / 60)::bigint - i * span,
       5, 5, 1.0, '{{"60": 5}}'
FROM generate_series(0, 10079) AS i, generate_series(0, 40) AS k, (VALUES (1), (60)) AS s(span)
WHERE span = 1 OR i < 168
"""


def _history_seq_scan(node: dict[str, Any]) -> bool:
    return node["Node Type"] == "Seq Scan" and node.get("Relation Name") == "potatoq_history"


def _pg_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from _pg_nodes(child)


def test_every_postgres_history_page_walks_an_index(pg_schema: tuple[str, str]) -> None:
    import psycopg
    from psycopg import sql

    from potatoq.brokers.history_rollup import Keyed, Rollup, rollup_values
    from potatoq.brokers.history_sql import COLUMNS
    from potatoq.brokers.postgres import PostgresBroker, statements

    url, schema = pg_schema
    broker = create_broker(BrokerConfig(url=url, transport_options={"schema": schema}))
    assert isinstance(broker, PostgresBroker)
    try:
        broker.migrate()
        table = sql.SQL("{}.potatoq_history").format(sql.Identifier(schema))
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL(PG_FILL).format(schema=sql.Identifier(schema)), {"now": NOW})
            conn.execute(sql.SQL(PG_ROLLUP_FILL).format(schema=sql.Identifier(schema)), {"now": NOW})
            conn.execute(sql.SQL("VACUUM ANALYZE {}").format(table))
            conn.execute(sql.SQL("VACUUM ANALYZE {}.potatoq_history_rollups").format(sql.Identifier(schema)))
            offenders: dict[str, list[str]] = {}
            for query in every_query():
                text, params = broker._history_statement(query)
                row = conn.execute(("EXPLAIN (FORMAT JSON) " + text).encode(), params).fetchone()
                assert row is not None
                plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
                nodes = list(_pg_nodes(plan[0]["Plan"]))
                bad = [
                    "Seq Scan"
                    for node in nodes
                    if node["Node Type"] == "Seq Scan" and node.get("Relation Name") == "potatoq_history"
                ]
                # the planner may walk the index of any of the rare values the query sets
                # (exception text: the records with an exception, 1 % here)
                indexes = {INDEX_OF[f] for f in DRIVERS if getattr(query, f) is not None}
                if Shape.of(query).by_time:
                    indexes.discard("potatoq_history_exc")
                    indexes.add(_window_index(query) or "")
                if indexes and not any(node.get("Index Name") in indexes for node in nodes):
                    bad.append(f"uses none of {sorted(indexes)}")
                if bad:
                    offenders[repr(Shape.of(query))] = bad
            stmts = statements.Statements(schema)
            minute = int(NOW // 60)
            rollup = Keyed(1, minute, "tasks.n1", Rollup([1, 0, 0, 0, 0], 1, 0.5, {60: 1}))
            rollup_runs: list[tuple[str, dict[str, Any]]] = [
                *(("history_rollups", p) for p in chart_params()),
                ("history_rollups_trim", {"cutoff": NOW}),
                (
                    "history_insert",
                    {
                        **{c: [None] for c in COLUMNS},
                        "task_id": ["t"], "queue": ["q"], "state": ["SUCCESS"], "finished_at": [NOW],
                        "deliveries": [1], "retries": [0],
                        **rollup_values([rollup]),
                    },
                ),
            ]  # fmt: skip
            for name, params in rollup_runs:
                text = stmts[name].text
                # EXPLAIN of a write runs nothing (no ANALYZE); text form: no binary arrays
                row = conn.execute(("EXPLAIN (FORMAT JSON) " + text).encode(), params).fetchone()
                assert row is not None
                plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
                nodes = list(_pg_nodes(plan[0]["Plan"]))
                scans = [
                    n["Relation Name"]
                    for n in nodes
                    if n["Node Type"] == "Seq Scan"
                    and n.get("Relation Name") in ("potatoq_history", "potatoq_history_rollups")
                ]
                if scans:
                    offenders[f"{name} {params.get('name', '')}"] = scans
    finally:
        broker.close()
    assert not offenders, f"history pages that read the table: {offenders}"


def test_the_drivers_are_the_indexed_columns() -> None:
    assert set(DRIVERS) == set(INDEX_OF)


# The task page's links (Broker.history_links): a chain's children and a group's members,
# each by its partial index. Half the rows have a parent, a tenth a group.
LINKS = {
    "potatoq_history_parent": links_statement("task-17", None),
    "potatoq_history_group": links_statement(None, "group-3"),
}
LINKS_FILL = """
UPDATE {table} SET parent_id = CASE WHEN seq % 2 = 0 THEN 'task-' || (seq / 2) END,
                   group_id = CASE WHEN seq % 10 = 0 THEN 'group-' || (seq / 100) END
"""


def test_the_sqlite_link_reads_walk_their_index(tmp_path: Path) -> None:
    from potatoq.brokers.sqlite.setup import SQL

    path = tmp_path / "links.sqlite3"
    broker = create_broker(BrokerConfig(url=f"sqlite:///{path}"))
    conn = sqlite3.connect(path)
    try:
        broker.migrate()
        with conn:
            conn.execute(SQLITE_FILL, {"now": NOW})
            conn.execute(LINKS_FILL.format(table="potatoq_history"))
        conn.execute("ANALYZE")
        for index, (name, params) in LINKS.items():
            plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + SQL[name], params)]
            assert any(f"INDEX {index} " in step for step in plan), (name, plan)
            assert not any(step.startswith("SCAN potatoq_history") for step in plan), (name, plan)
    finally:
        conn.close()
        broker.close()


def test_the_postgres_link_reads_walk_their_index(pg_schema: tuple[str, str]) -> None:
    import psycopg
    from psycopg import sql

    from potatoq.brokers.postgres import statements

    url, schema = pg_schema
    broker = create_broker(BrokerConfig(url=url, transport_options={"schema": schema}))
    try:
        broker.migrate()
        table = sql.SQL("{}.potatoq_history").format(sql.Identifier(schema))
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL(PG_FILL).format(schema=sql.Identifier(schema)), {"now": NOW})
            conn.execute(sql.SQL(LINKS_FILL).format(table=table))
            conn.execute(sql.SQL("VACUUM ANALYZE {}").format(table))
            for index, (name, params) in LINKS.items():
                stmt = statements.Statements(schema)[name].query
                row = conn.execute(b"EXPLAIN (FORMAT JSON) " + stmt, params).fetchone()
                assert row is not None
                plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
                nodes = list(_pg_nodes(plan[0]["Plan"]))
                assert any(n.get("Index Name") == index for n in nodes), (name, nodes)
                assert not any(_history_seq_scan(n) for n in nodes), (name, nodes)
    finally:
        broker.close()
