"""Bulk-fill task history for ``benchmarks.history_scale``: SQL for SQLite and PostgreSQL,
pipelined stream adds for Redis.

The rows are made by the database itself (one ``INSERT ... SELECT`` per chunk), from
pseudo-random numbers that are a function of the row number: the same rows every run, and
no Python per row. The spread is what a busy deployment keeps for a week:

* 40 task names, the most common in about a third of the rows, the least in about 1 %, and
  one rare name (``RARE_NAME``) in about 1 row in 100,000;
* states: 93 % SUCCESS, 3 % RETRY, 3 % FAILURE, 0.5 % DEAD, 0.5 % REVOKED;
* six queues, from 60 % (``default``) down to 2 %;
* finish times evenly over ``SPAN`` seconds ending now (with jitter), in insert order;
* an exception on failures, retries and dead letters: one of eight texts with numbers in
  them, ``COMMON_TEXT`` in about 1 in 8 of those, ``RARE_TEXT`` in about 1 row in 1,000,000.

The per-minute rollups the charts read (:mod:`potatoq.brokers.history_rollup`) are made
from the filled records by the brokers' own code: :func:`fill_rollups` reads the rows back
in chunks and upserts their rollups (SQL); Redis gets its rollup hashes with the records.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from typing import Any

from potatoq.brokers.history import HistoryRecord
from potatoq.brokers.history_rollup import Keyed, Rollup, rollup_fields, rollups_of, sample_of

SPAN = 6 * 86400.0  # seconds of history (inside the default 7-day max_age)
CHUNK = 500_000  # rows per INSERT ... SELECT
PRIME = 1_000_003  # the modulus of the row-number hash

NAME_COUNT = 40
RARE_NAME = "app.tasks.rare_report"
COMMON_TEXT = "timeout"
RARE_TEXT = "checksum mismatch"
QUEUES = (
    ("default", 0.60),
    ("emails", 0.75),
    ("reports", 0.85),
    ("billing", 0.93),
    ("media", 0.98),
)  # cumulative
LAST_QUEUE = "low"  # the remaining 2 %
STATES = (("SUCCESS", 0.93), ("RETRY", 0.96), ("FAILURE", 0.99), ("DEAD", 0.995))  # cumulative
LAST_STATE = "REVOKED"
ERRORS = (
    ("TimeoutError", "timeout after 30 s waiting for upstream api-"),
    ("ConnectionError", "connection refused by db-"),
    ("ValueError", "invalid literal for int() with base 10: 'row-"),
    ("KeyError", "'customer_"),
    ("RuntimeError", "worker ran out of memory processing batch "),
    ("PermissionError", "access denied to bucket reports-"),
    ("HTTPError", "502 Bad Gateway from payments service, request "),
    ("IntegrityError", "duplicate key value violates unique constraint, id "),
)


@functools.cache
def names() -> list[tuple[str, float]]:
    """(name, cumulative share) for the 40 names: share of name k ~ 1 / (k + 1)."""
    weights = [1.0 / (k + 1) for k in range(NAME_COUNT)]
    total = sum(weights)
    out, acc = [], 0.0
    for k, w in enumerate(weights):
        acc += w / total
        out.append((f"app.tasks.{_WORDS[k % len(_WORDS)]}_{k}", acc))
    return out


_WORDS = ("send_email", "resize_image", "charge_card", "sync_crm", "build_report", "index_doc",
          "notify", "cleanup", "import_csv", "export_pdf")  # fmt: skip


def _u(k: int) -> str:
    """SQL: a pseudo-random number in [0, 1) from the row number ``i`` (the k-th one)."""
    a = (7919, 104729, 15485863, 32452843, 49979687, 67867967, 86028121, 122949823)[k]
    return f"((i * {a} + {k * 977}) % {PRIME}) / {PRIME}.0"


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _case(u: str, cumulative: list[tuple[str, float]] | tuple[tuple[str, float], ...], last: str) -> str:
    whens = " ".join(f"WHEN {u} < {p!r} THEN '{v}'" for v, p in cumulative)
    return f"CASE {whens} ELSE '{last}' END"


def select_sql(dialect: str, start: float, total: int) -> str:
    """The SELECT of rows ``i`` (bound as the ``lo`` and ``hi`` parameters) for ``dialect``
    (``sqlite`` or ``postgres``) of ``total``; ``start`` is the first finish time."""
    ns = names()
    name = f"CASE WHEN i % 100000 = 77 THEN '{RARE_NAME}' ELSE {_case(_u(0), ns[:-1], ns[-1][0])} END"
    state = _case(_u(1), STATES, LAST_STATE)
    queue = _case(_u(2), QUEUES, LAST_QUEUE)
    step = SPAN / total
    finished = f"({start!r} + i * {step!r} + {_u(3)} * 2.0)"
    runtime = f"({_u(4)} * {_u(4)} * 2.0)"
    latency = f"({_u(5)} * {_u(5)} * 0.5)"
    err = f"CAST({_u(6)} * {len(ERRORS)} AS INTEGER)"
    exc_type = "CASE " + " ".join(f"WHEN {err} = {j} THEN '{t}'" for j, (t, _) in enumerate(ERRORS)) + " END"
    message = (
        "CASE " + " ".join(f"WHEN {err} = {j} THEN {_lit(m)}" for j, (_, m) in enumerate(ERRORS)) + " END"
    )
    if dialect == "postgres":
        task_id = "md5(i::text)"
        as_text = "(i % 9973)::text"
        rows = "FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) AS g(i)"
        worker = "'worker-' || (i % 16)::text || '@host-' || (i % 4)::text"
    else:
        task_id = (
            "printf('%08x-%04x-4%03x-8%03x-%012x',"
            " i * 2654435761 % 4294967296, i % 65536, i % 4096, i % 4093, i)"
        )
        as_text = "CAST(i % 9973 AS TEXT)"
        rows = (
            "FROM (WITH RECURSIVE s(i) AS (SELECT :lo UNION ALL SELECT i + 1 FROM s WHERE i < :hi)"
            " SELECT i FROM s)"
        )
        worker = "'worker-' || (i % 16) || '@host-' || (i % 4)"
    failed = f"({state}) IN ('RETRY', 'FAILURE', 'DEAD')"
    full_message = (
        f"CASE WHEN i % 1000000 = 4242 THEN 'payload {RARE_TEXT} on shard ' || {as_text} "
        f"ELSE {message} || {as_text} END"
    )
    body = f"""
SELECT {task_id}, {name}, {queue}, {state}, {finished}, {finished} - {runtime},
       {finished} - {runtime} - {latency}, NULL, {runtime}, {worker}, 1000 + i % 64, 1,
       CASE WHEN ({state}) = 'RETRY' THEN 1 ELSE 0 END,
       CASE WHEN {failed} THEN {exc_type} END,
       CASE WHEN {failed} THEN {full_message} END,
       '(' || {as_text} || ', ''customer-' || {as_text} || ''')',
       CASE WHEN ({state}) = 'SUCCESS' THEN '{{''ok'': True, ''rows'': ' || {as_text} || '}}' END,
       NULL, CASE WHEN i % 20 = 0 THEN {task_id} END, NULL
"""
    if dialect == "postgres":
        body = body.replace("%", "%%")  # psycopg: a literal % next to bound parameters
    return body + rows


INSERT_COLUMNS = (
    "task_id, name, queue, state, finished_at, started_at, enqueued_at, due_at, runtime, worker, "
    "pid, deliveries, retries, exc_type, exc_message, args_preview, result_preview, parent_id, "
    "root_id, group_id"
)


def chunks(total: int) -> Iterator[tuple[int, int]]:
    for lo in range(1, total + 1, CHUNK):
        yield lo, min(total, lo + CHUNK - 1)


def fill_sql(
    execute: Callable[[str, dict[str, Any]], None],
    table: str,
    dialect: str,
    total: int,
    log: Callable[[str], None],
) -> None:
    """Insert ``total`` rows into ``table`` chunk by chunk (``execute(sql, params)`` commits)."""
    start = time.time() - SPAN
    insert = f"INSERT INTO {table} ({INSERT_COLUMNS}) {select_sql(dialect, start, total)}"
    began = time.monotonic()
    for lo, hi in chunks(total):
        execute(insert, {"lo": lo, "hi": hi})
        log(f"  {hi:,} rows, {time.monotonic() - began:.0f} s")


ROLLUP_CHUNK = 500_000  # history rows read back per rollup upsert


def rollup_source(dialect: str, table: str) -> str:
    """The samples (history_rollup.Sample) of the rows with seq in [lo, hi]."""
    most = "GREATEST" if dialect == "postgres" else "max"
    lo, hi = ("%(lo)s", "%(hi)s") if dialect == "postgres" else (":lo", ":hi")
    return (
        f"SELECT name, state, finished_at, CASE WHEN started_at IS NOT NULL THEN runtime END,"
        f" CASE WHEN started_at IS NOT NULL AND enqueued_at IS NOT NULL"
        f" THEN {most}(0.0, started_at - {most}(enqueued_at, coalesce(due_at, 0.0))) END"
        f" FROM {table} WHERE seq >= {lo} AND seq <= {hi}"
    )


def fill_rollups(
    fetch: Callable[[int, int], list[Any]],
    write: Callable[[list[Keyed]], None],
    low: int,
    high: int,
    log: Callable[[str], None],
) -> None:
    """The rollups of the rows with seq in [low, high]: ``fetch(lo, hi)`` gives a chunk's
    samples, ``write`` upserts their rollups (merged with those already written)."""
    began = time.monotonic()
    for lo in range(low, high + 1, ROLLUP_CHUNK):
        hi = min(high, lo + ROLLUP_CHUNK - 1)
        write(rollups_of(fetch(lo, hi)))
        log(f"  rollups of {hi - low + 1:,} rows, {time.monotonic() - began:.0f} s")


# -- Redis -------------------------------------------------------------------------------------


def _record(i: int, start: float, total: int) -> HistoryRecord:
    """Row ``i`` as a record, the same spread as the SQL (Python's own arithmetic)."""

    def u(k: int) -> float:
        a = (7919, 104729, 15485863, 32452843, 49979687, 67867967, 86028121, 122949823)[k]
        return ((i * a + k * 977) % PRIME) / PRIME

    def pick(x: float, cumulative: Any, last: str) -> str:
        return next((v for v, p in cumulative if x < p), last)

    ns = names()
    name = RARE_NAME if i % 100_000 == 77 else pick(u(0), ns[:-1], ns[-1][0])
    state = pick(u(1), STATES, LAST_STATE)
    queue = pick(u(2), QUEUES, LAST_QUEUE)
    finished = start + i * SPAN / total + u(3) * 2.0
    runtime, latency = u(4) * u(4) * 2.0, u(5) * u(5) * 0.5
    failed = state in ("RETRY", "FAILURE", "DEAD")
    exc_type, message = ERRORS[int(u(6) * len(ERRORS))]
    tail = str(i % 9973)
    text = f"payload {RARE_TEXT} on shard {tail}" if i % 1_000_000 == 4242 else message + tail
    task_id = f"{i * 2654435761 % 4294967296:08x}-{i % 65536:04x}-4{i % 4096:03x}-8{i % 4093:03x}-{i:012x}"
    return HistoryRecord(
        task_id=task_id, name=name, queue=queue, state=state, finished_at=finished,
        started_at=finished - runtime, enqueued_at=finished - runtime - latency, due_at=None,
        runtime=runtime, worker=f"worker-{i % 16}@host-{i % 4}", pid=1000 + i % 64, deliveries=1,
        retries=1 if state == "RETRY" else 0, exc_type=exc_type if failed else None,
        exc_message=text if failed else None, args_preview=f"({tail}, 'customer-{tail}')",
        result_preview=f"{{'ok': True, 'rows': {tail}}}" if state == "SUCCESS" else None,
        parent_id=None, root_id=task_id if i % 20 == 0 else None, group_id=None,
    )  # fmt: skip


def task_bucket_size(max_count: int) -> int:
    """Tasks per bucket of the task index, as history_append.lua picks it."""
    return min(65536, max(1024, max_count // 8))


def fill_redis(
    client: Any, prefix: str, total: int, log: Callable[[str], None], bucket_size: int = 65536
) -> None:
    """``total`` records into ``<prefix>history``, its index streams and the task index, as
    history_append.lua lays them out (field ``r``: the record; index entries: the record's
    id, field ``i``; task buckets of ``bucket_size`` tasks), but with ids set to the finish
    times (so time ranges find them) and no cap."""
    hk = f"{prefix}history"
    start = time.time() - SPAN
    began = time.monotonic()
    registered: set[str] = set()
    bucket, in_bucket = "", bucket_size
    last_ms, seq = -1, 0
    batch: list[tuple[Any, ...]] = []
    minutes: dict[tuple[int, int, str], Rollup] = {}  # the rollups, written once at the end
    for i in range(1, total + 1):
        record = _record(i, start, total)
        _roll_up(minutes, record)
        ms = int(record.finished_at * 1000)
        if ms <= last_ms:  # the jitter can step back: keep ids increasing, like XADD '*'
            ms, seq = last_ms, seq + 1
        else:
            seq = 0
        last_ms, entry_id = ms, f"{ms}-{seq}"
        batch.append(("XADD", hk, entry_id, "r", record.encode()))
        keys = [f"{hk}:q:{record.queue}", f"{hk}:n:{record.name}"]
        if record.state != "SUCCESS":  # no SUCCESS index (history_append.lua)
            keys.append(f"{hk}:s:{record.state}")
        for key in keys:
            batch.append(("XADD", key, entry_id, "i", ""))
            if key not in registered:
                registered.add(key)
                batch.append(("SADD", f"{hk}:indexes", key))
        if in_bucket >= bucket_size:  # every task id is new: one field each
            bucket, in_bucket = f"{hk}:tasks:{entry_id}", 0
            batch.append(("ZADD", f"{hk}:tasks", ms, bucket))
        batch.append(("HSET", bucket, record.task_id, entry_id))
        in_bucket += 1
        if i % 2000 == 0 or i == total:
            _send(client, batch)
            batch = []
        if i % 50_000 == 0:
            log(f"  {i:,} records, {time.monotonic() - began:.0f} s")
    write_redis_rollups(client, hk, minutes, log)


def _roll_up(minutes: dict[tuple[int, int, str], Rollup], record: HistoryRecord) -> None:
    for span, minute, name, rollup in rollups_of([sample_of(record)]):
        into = minutes.get((span, minute, name))
        if into is None:
            minutes[span, minute, name] = rollup
        else:
            into.merge(rollup)


def write_redis_rollups(
    client: Any, hk: str, minutes: dict[tuple[int, int, str], Rollup], log: Callable[[str], None]
) -> None:
    """As history_append.lua lays them out: HASH <hk>:m<span>:<minute>:<name>, by minute."""
    ttl = 7 * 86400 + 120
    batch: list[tuple[Any, ...]] = []
    for n, ((span, minute, name), rollup) in enumerate(minutes.items(), 1):
        key = f"{hk}:m{span}:{minute}:{name}"
        batch += [
            ("HSET", key, *rollup_fields(rollup)),
            ("EXPIRE", key, ttl),
            ("ZADD", f"{hk}:minutes", minute, key),
        ]
        if n % 2000 == 0 or n == len(minutes):
            _send(client, batch)
            batch = []
    log(f"  {len(minutes):,} rollup hashes")


def fill_redis_rollups(client: Any, hk: str, log: Callable[[str], None]) -> None:
    """The rollups of the records already in ``hk`` (a stream filled by :func:`fill_redis`
    before it wrote rollups): read back and written once."""
    minutes: dict[tuple[int, int, str], Rollup] = {}
    low = "-"
    while True:
        entries = client.xrange(hk, low, "+", count=10_000)
        for _, fields in entries:
            _roll_up(minutes, HistoryRecord.decode(fields[b"r"]))
        if len(entries) < 10_000:
            break
        low = "(" + entries[-1][0].decode()
    write_redis_rollups(client, hk, minutes, log)


def _send(client: Any, commands: list[tuple[Any, ...]]) -> None:
    """``commands`` in one pipeline; sent again while the (shared) server is busy running
    someone's script. An XADD that went through the first time is refused the second
    (its id is no longer above the stream's last): that is fine."""
    while True:
        pipe = client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        replies = pipe.execute(raise_on_error=False)
        errors = [r for r in replies if isinstance(r, Exception)]
        if not any("BUSY" in str(e) or "LOADING" in str(e) for e in errors):
            bad = [e for e in errors if "equal or smaller" not in str(e)]
            if bad:
                raise bad[0]
            return
        time.sleep(1.0)
