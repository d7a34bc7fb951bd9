"""The scale guard: no statement of the SQL brokers scans the jobs or results table.

Every named statement the brokers run (the hot path, housekeeping and inspection; schema
set-up excepted) is planned against tables holding ~20,000 rows with statistics: PostgreSQL
``EXPLAIN`` after ``VACUUM ANALYZE``, SQLite ``EXPLAIN QUERY PLAN`` after ``ANALYZE``. A
sequential scan of ``potatoq_jobs`` or ``potatoq_results`` fails the test with the statement's
name: at a backlog of millions such a statement costs seconds. Plans only, nothing executes.
The Lua scripts of the claim/settle path get the matching static check: no command that
walks a whole queue or keyspace.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
import uuid
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from potatoq.brokers import create_broker
from potatoq.brokers.base import BrokerConfig

GUARDED = ("potatoq_jobs", "potatoq_results")
NOW = time.time()
# Schema set-up and bookkeeping run once per process, on tables that aren't the big ones.
SETUP = re.compile(r"^(schema_|listen$|notify_channels$)")

# Statements that take every parameter as an array (one element per row they insert).
PG_ARRAYS = {"history_insert"}

# Statements the broker runs after a SET LOCAL statement in the same transaction.
PG_SETTINGS = dict.fromkeys(
    ("stats_counts", "stats_range_ready", "stats_range_scheduled", "stats_range_parked")
    + ("stats_windows_ready", "stats_windows_scheduled", "stats_windows_parked"),
    ("queue_stats_settings",),
)

# One sample value per parameter name, shared by every statement (extra keys are ignored).
PG_PARAMS: dict[str, Any] = {
    "all": False, "batch": 5000, "cb_channels": ["c"], "cb_etas": [None], "cb_ids": ["cb-1"],
    "cb_payloads": [b"x"], "cb_priorities": [0], "cb_queues": ["q1"], "channel": "c",
    "channel_prefix": "p:", "channels": ["c"], "chord_id": "g-1", "chord_index": 0, "chord_size": 2,
    "chord_value": b"v", "dead_after": 60.0, "dead_max": 1000, "eta": None, "fire_time": NOW,
    "id": "job-17", "ids": ["job-17"], "info": "{}", "limit": 1000, "live": [1, 2], "m_etas": [None],
    "m_ids": ["new-1"], "m_payloads": [b"x"], "m_priorities": [0], "m_queues": ["q1"], "max": 1000,
    "max_deliveries": 5, "name": "entry", "names": ["entry"], "no_flush": True, "node": "node-3",
    "notify": True, "offset": 0, "payload": b"x", "periodic_keep": 86400.0, "pid": 3, "priority": 0,
    "queue": "q1", "queues": ["q1", "q2"], "reason": "boom", "record": b"r", "result": b"r",
    "result_expires": 86400.0, "result_state": "SUCCESS", "state": "SUCCESS", "task": "t",
    "task_id": "job-17", "token": str(uuid.uuid4()), "ttl": 86400.0, "uncount": 1,
    "cap": 100000, "priorities": [0], "starts": [1, 5000, 10000], "width": 8,
    "worker": "node-3",
    # task history, fenced results, due-time announcements
    "args_preview": "()", "cursor": 10**9, "cutoff": NOW - 86400, "deliveries": 1, "due_at": NOW,
    "due_channels": ["c"], "enqueued_at": NOW, "exc_message": "m", "exc_type": "E", "fence": 1,
    "finished_at": NOW, "group_id": None, "keep": 1000, "keep_ready": False, "parent_id": None,
    "ready": ["SUCCESS"], "result_preview": "1", "retries": 0, "root_id": None, "runtime": 0.1,
    "since": NOW - 3600, "started_at": NOW, "text": "boom", "until": NOW,
}  # fmt: skip

# A pass over the running index is allowed everywhere: running tasks are bounded by the
# workers' concurrency, not by the backlog (recovery walks them).
# Statements allowed a full pass over another partial index, and the plan steps that do it:
INDEX_ONLY_COUNTS = {
    # every key with limited tasks: passes over the limited and parked partial indexes
    "limit_usage": {
        "SCAN potatoq_jobs USING COVERING INDEX potatoq_jobs_limited",
        "SCAN potatoq_jobs USING COVERING INDEX potatoq_jobs_limited_ready",
        "SCAN potatoq_jobs USING INDEX potatoq_jobs_parked_queue",
    },
}

_ALIAS = re.compile(r"\b(potatoq_jobs|potatoq_results)\s+(?:AS\s+)?(\w+)", re.IGNORECASE)
_KEYWORDS = {
    "WHERE", "SET", "ON", "JOIN", "CROSS", "LEFT", "INNER", "GROUP", "ORDER", "LIMIT", "VALUES",
    "USING", "INDEXED", "NOT", "WHEN", "UNION", "RETURNING", "DEFAULT", "AND", "OR",
}  # fmt: skip

SQLITE_PARAMS: dict[str, Any] = {
    "cutoff": NOW - 86400, "dead_cutoff": NOW - 86400, "deliveries": 0, "expires_at": NOW,
    "fire_time": NOW, "group_id": "g-1", "id": "job-17", "ids": '["job-17"]', "idx": 0, "info": "{}",
    "keep": 1000, "limit": 1000, "live": "[1, 2]", "max_deliveries": 5, "name": "entry",
    "names": '["entry"]', "node": "node-3", "now": NOW, "offset": 0, "payload": b"x", "pid": 3,
    "priority": 0, "queue": "q1", "queues": '["q1", "q2"]', "reason": "boom", "run_at": NOW,
    "seq": 17, "size": 2, "state": "SUCCESS", "task": "t", "task_id": "job-17", "token": 1,
    "uncount": 1, "value": b"v", "version": 1,
}  # fmt: skip


class Samples(dict[str, Any]):
    """The sample parameters, with a stand-in for a parameter a newer statement added (a plan
    doesn't depend on a bound value's content, only on the statement's shape)."""

    def __init__(self, values: dict[str, Any], missing: Any) -> None:
        super().__init__(values)
        self.missing = missing

    def __missing__(self, key: str) -> Any:
        return self.missing


def _pg_params(statement: str) -> Samples:
    if statement in PG_ARRAYS:
        return Samples({key: [value] for key, value in PG_PARAMS.items()}, [None])
    return Samples(PG_PARAMS, None)


def _pg_seq_scans(node: dict[str, Any]) -> Iterator[str]:
    if node.get("Node Type") == "Seq Scan" and node.get("Relation Name") in GUARDED:
        yield node["Relation Name"]
    for child in node.get("Plans", ()):
        yield from _pg_seq_scans(child)


def test_no_postgres_statement_scans_the_jobs_or_results_table(pg_schema: tuple[str, str]) -> None:
    import psycopg
    from psycopg import sql

    from potatoq.brokers.postgres import PostgresBroker, statements

    url, schema = pg_schema
    broker = create_broker(BrokerConfig(url=url, transport_options={"schema": schema}))
    assert isinstance(broker, PostgresBroker)
    try:
        broker.migrate()
    finally:
        broker.close()
    s = sql.Identifier(schema)
    with psycopg.connect(url, autocommit=True) as conn:
        # a backlog of 300-byte messages: 12,000 ready, all but 1 % in one queue (an outage),
        # 6,000 far-future delayed, 2,000 running; 20,000 results, half of them expired
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.potatoq_jobs (id, queue, priority, state, run_at, payload, token,"
                " worker, pid, claimed_at, deliveries)"
                " SELECT 'job-' || i, CASE WHEN i % 100 = 0 THEN 'q1' ELSE 'q0' END, 0,"
                "  CASE WHEN i < 12000 THEN 1 WHEN i < 18000 THEN 0 ELSE 2 END,"
                "  CASE WHEN i BETWEEN 12000 AND 17999 THEN now() + interval '30 days' ELSE now() END,"
                "  convert_to(repeat('x', 300), 'UTF8'), CASE WHEN i >= 18000 THEN gen_random_uuid() END,"
                "  CASE WHEN i >= 18000 THEN 'node-' || (i % 10) END,"
                "  CASE WHEN i >= 18000 THEN i % 7 END, CASE WHEN i >= 18000 THEN now() END,"
                "  CASE WHEN i >= 18000 THEN 1 ELSE 0 END"
                " FROM generate_series(0, 19999) AS i"
            ).format(s)
        )
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.potatoq_results (task_id, state, record, expires_at)"
                " SELECT 'res-' || i, 'SUCCESS', convert_to(repeat('x', 300), 'UTF8'),"
                "  now() + (CASE WHEN i % 2 = 0 THEN -1 ELSE 1 END) * interval '1 hour'"
                " FROM generate_series(0, 19999) AS i"
            ).format(s)
        )
        for table in ("potatoq_jobs", "potatoq_results", "potatoq_workers", "potatoq_dead"):
            conn.execute(sql.SQL("VACUUM ANALYZE {}.{}").format(s, sql.Identifier(table)))
        stmts = statements.Statements(schema)
        offenders: dict[str, str] = {}
        settings = {s for run_first in PG_SETTINGS.values() for s in run_first}
        names = [
            n
            for n, body in statements.queries().items()
            if not SETUP.match(n) and "{channel}" not in body and n not in settings
        ]
        assert {"job_claim", "job_finish", "stats_counts", "maintenance_sweep", "jobs_purge"} <= set(names)
        for name in names:
            with conn.transaction():  # planned with the settings the broker runs it with
                for setting in PG_SETTINGS.get(name, ()):
                    conn.execute(stmts[setting].query)
                row = conn.execute(b"EXPLAIN (FORMAT JSON) " + stmts[name].query, _pg_params(name)).fetchone()
            assert row is not None
            plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
            scanned = sorted(set(_pg_seq_scans(plan[0]["Plan"])))
            if scanned:
                offenders[name] = ", ".join(scanned)
    assert not offenders, f"sequential scans (statement: table): {offenders}"


def test_no_sqlite_statement_scans_the_jobs_or_results_table(tmp_path: Path) -> None:
    from potatoq.brokers.sqlite import SQLiteBroker
    from potatoq.brokers.sqlite.setup import SQL

    path = tmp_path / "plans.sqlite3"
    broker = create_broker(BrokerConfig(url=f"sqlite:///{path}"))
    assert isinstance(broker, SQLiteBroker)
    try:
        broker.migrate()
    finally:
        broker.close()
    conn = sqlite3.connect(path)
    try:
        with conn:
            conn.execute(
                "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 19999)"
                " INSERT INTO potatoq_jobs (id, queue, priority, state, run_at, payload, token, worker,"
                " pid, claimed_at)"
                " SELECT 'job-' || i, CASE WHEN i % 100 = 0 THEN 'q1' ELSE 'q0' END, 0,"
                "  CASE WHEN i < 12000 THEN 1 WHEN i < 18000 THEN 0 ELSE 2 END,"
                "  CASE WHEN i BETWEEN 12000 AND 17999 THEN :now + 2592000 ELSE :now END, zeroblob(300),"
                "  CASE WHEN i >= 18000 THEN i END, CASE WHEN i >= 18000 THEN 'node-' || (i % 10) END,"
                "  CASE WHEN i >= 18000 THEN i % 7 END, CASE WHEN i >= 18000 THEN :now END FROM n",
                {"now": NOW},
            )
            conn.execute(
                "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 19999)"
                " INSERT INTO potatoq_results (task_id, state, payload, expires_at)"
                " SELECT 'res-' || i, 'SUCCESS', zeroblob(300),"
                "  :now + (CASE WHEN i % 2 = 0 THEN -3600 ELSE 3600 END)"
                " FROM n",
                {"now": NOW},
            )
        conn.execute("ANALYZE")
        offenders: dict[str, str] = {}
        names = [n for n in SQL if not SETUP.match(n)]
        assert {"job_claim", "job_promote_due", "stats_counts", "housekeeping_results", "job_purge"} <= set(
            names
        )
        # a full scan of the table, or of one of its indexes (O(N) just the same)
        full_scan = re.compile(r"^SCAN (?P<table>\w+)(?: AS \w+)?(?: USING (?:COVERING )?INDEX .*)?$")
        for name in names:
            # the plan names a table by its alias when it has one
            guarded = set(GUARDED) | {
                m[2] for m in _ALIAS.finditer(SQL[name]) if m[2].upper() not in _KEYWORDS
            }
            # statements with positional parameters (the history insert) get NULLs
            positional = re.sub(r"--[^\n]*", "", SQL[name]).count("?")
            params = (None,) * positional if positional else Samples(SQLITE_PARAMS, NOW)
            for row in conn.execute("EXPLAIN QUERY PLAN " + SQL[name], params):
                match = full_scan.match(row[3])
                if (
                    match
                    and match["table"] in guarded
                    and row[3] not in INDEX_ONLY_COUNTS.get(name, ())
                    and not row[3].endswith("USING INDEX potatoq_jobs_running")
                ):
                    offenders[name] = row[3]
    finally:
        conn.close()
    assert not offenders, f"full table scans (statement: plan step): {offenders}"


# Commands that walk a whole list, sorted set, set, hash or keyspace.
_WHOLE_RANGE = re.compile(
    r"""['"](?:zrange|zrevrange|lrange|zrangebyscore|zrevrangebyscore)['"]\s*,[^)]*?,\s*0\s*,\s*-1\b"""
    r"""|['"](?:keys|scan|smembers|hgetall|hkeys|hvals|sscan|hscan|zscan)['"]""",
    re.IGNORECASE,
)
# The scripts an idle or busy worker runs per task: claim, settle, extend, heartbeat, enqueue.
HOT_SCRIPTS = (
    "claim.lua", "settle_and_claim.lua", "complete.lua", "retry.lua", "requeue.lua", "enqueue.lua",
    "extend.lua", "heartbeat.lua", "dead_letter.lua", "result_store.lua", "chord_join.lua", "_lib.lua",
    "wait_plan.lua", "wait_release.lua",
)  # fmt: skip


# Functions allowed a whole pass, and why.
AMORTIZED = {
    "renumber_ready": "runs once per 2^40 sequence numbers",
}
_AMORTIZED_BODY = re.compile(
    r"^local function (?:" + "|".join(AMORTIZED) + r")\b.*?^end\b", re.MULTILINE | re.DOTALL
)


@pytest.mark.parametrize("script", HOT_SCRIPTS)
def test_hot_path_lua_never_walks_a_whole_queue(script: str) -> None:
    source = resources.files("potatoq.brokers.redis").joinpath("lua", script).read_text()
    code = "\n".join(line.split("--", 1)[0] for line in source.splitlines())
    code = _AMORTIZED_BODY.sub("", code)
    found = [m.group(0) for m in _WHOLE_RANGE.finditer(code)]
    assert not found, f"{script} walks a whole collection: {found}"


def test_the_lua_guard_catches_a_whole_range() -> None:
    assert _WHOLE_RANGE.search("redis.call('ZRANGE', KEYS[1], 0, -1)")
    assert _WHOLE_RANGE.search('redis.call("lrange", q, 0, -1)')
    assert _WHOLE_RANGE.search("redis.call('KEYS', 'x*')")
    assert not _WHOLE_RANGE.search("redis.call('ZRANGE', KEYS[1], 0, 0)")
