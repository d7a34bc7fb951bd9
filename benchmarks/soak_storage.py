"""What ``benchmarks.soak`` samples of each broker's storage, every interval of the soak.

One class per broker; each makes fresh storage for a phase of the run (a file, a schema, a
key prefix on a Redis server of the run's own, a queue prefix on a RabbitMQ node of its
own), gives the app module its settings, samples what the storage holds and removes it at
the end. A sample is a flat dict of numbers; ``BYTES`` names the one whose plateau the soak
checks (what the broker spends: disk, or server memory), ``COUNTS`` the rows/keys/messages
(results, dead letters, heartbeats, the RabbitMQ queue registry) checked beside it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from benchmarks.scale_rabbitmq import Node

# The counts whose plateau is checked, when a broker has them (None: it has no such thing).
COUNTS = ("results", "dead", "heartbeats", "registry", "history")


class Storage:
    """Fresh storage for one phase; ``settings`` go into the app module."""

    name = ""
    BYTES = ""  # the sample key that is this broker's storage size

    def settings(self) -> dict[str, Any]:
        """``broker``, ``broker_transport_options``, ``result_backend`` and its options."""
        raise NotImplementedError

    def sample(self) -> dict[str, float]:
        raise NotImplementedError

    def close(self) -> None:
        """Remove what the phase stored."""


# -- SQLite ---------------------------------------------------------------------------------


class SQLiteStorage(Storage):
    name = "SQLite"
    BYTES = "file+wal bytes"

    def __init__(self, tmp: Path, tag: str) -> None:
        self.path = tmp / f"soak-{tag}.sqlite3"

    def settings(self) -> dict[str, Any]:
        # the worker logs each new longest write transaction of its processes past 20 ms
        # (the broker's own timing, beside the probe's wait: soak.Run.worker prints them)
        return {"broker": f"sqlite:///{self.path}", "broker_transport_options": {"slow_write_ms": 20}}

    def sample(self) -> dict[str, float]:
        import sqlite3

        out: dict[str, float] = {
            "file bytes": _size(self.path),
            "wal bytes": _size(Path(f"{self.path}-wal")),
        }
        out[self.BYTES] = out["file bytes"] + out["wal bytes"]
        conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=30)
        try:
            for key, table in TABLES.items():
                out[key] = int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
            out["free pages"] = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
        finally:
            conn.close()
        return out

    def close(self) -> None:
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{self.path}{suffix}")


TABLES = {
    "results": "potatoq_results",
    "dead": "potatoq_dead",
    "heartbeats": "potatoq_workers",
    "history": "potatoq_history",
    "jobs": "potatoq_jobs",
}


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


# -- PostgreSQL -------------------------------------------------------------------------------


class PostgresStorage(Storage):
    name = "PostgreSQL"
    BYTES = "tables bytes"

    def __init__(self, url: str, tag: str) -> None:
        self.url = url
        self.schema = f"pq_soak_{tag}"

    def settings(self) -> dict[str, Any]:
        return {"broker": self.url, "broker_transport_options": {"schema": self.schema}}

    def sample(self) -> dict[str, float]:
        import psycopg

        out: dict[str, float] = {}
        with psycopg.connect(self.url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT relname, pg_total_relation_size(relid), pg_relation_size(relid),"
                " n_live_tup, n_dead_tup, autovacuum_count, autoanalyze_count"
                " FROM pg_stat_user_tables WHERE schemaname = %s",
                (self.schema,),
            ).fetchall()
            for name, total, heap, live, dead, vacuums, analyzes in rows:
                short = name.removeprefix("potatoq_")
                out[f"{short} bytes"] = total
                out[f"{short} heap bytes"] = heap
                out[f"{short} live tuples"] = live
                out[f"{short} dead tuples"] = dead
                out[f"{short} autovacuums"] = vacuums
                out[f"{short} autoanalyzes"] = analyzes
            out[self.BYTES] = sum(total for _, total, *_ in rows)
            for key, table in TABLES.items():
                if f"{table.removeprefix('potatoq_')} bytes" in out:
                    (count,) = conn.execute(f'SELECT count(*) FROM "{self.schema}".{table}').fetchone()
                    out[key] = count
        return out

    def close(self) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')


# -- Redis --------------------------------------------------------------------------------------


class RedisServer:
    """A ``redis-server`` of the run's own (no persistence), so that ``used_memory`` is only
    the soak's; stopped at the end."""

    def __init__(self, tmp: Path) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        command = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1"]
        self.proc = subprocess.Popen(
            [*command, "--save", "", "--appendonly", "no"],
            cwd=tmp,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        import redis

        self.client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 30
        while True:
            try:
                self.client.ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def close(self) -> None:
        self.client.close()
        self.proc.terminate()
        self.proc.wait(30)


def redis_counts(client: Any, prefix: str) -> dict[str, float]:
    """Keys under ``prefix`` by kind, and the sizes of the dead-letter, heartbeat, registry
    and history structures (key names: potatoq.brokers.redis.keys)."""
    kinds: dict[str, int] = {}
    for key in client.scan_iter(match=f"{prefix}:*", count=5000):
        kind = key.decode().removeprefix(f"{prefix}:").split(":", 1)[0]
        kinds[kind] = kinds.get(kind, 0) + 1
    pipe = client.pipeline(transaction=False)
    pipe.zcard(f"{prefix}:dead")
    pipe.hlen(f"{prefix}:workers")
    pipe.scard(f"{prefix}:queues")
    pipe.xlen(f"{prefix}:history")
    dead, heartbeats, registry, history = pipe.execute()
    return {
        "results": kinds.get("result", 0),
        "job keys": kinds.get("job", 0),
        "keys": sum(kinds.values()),
        "dead": dead,
        "heartbeats": heartbeats,
        "registry": registry,
        "history": history,
    }


class RedisStorage(Storage):
    name = "Redis"
    BYTES = "used_memory"

    def __init__(self, server: RedisServer, tag: str) -> None:
        self.server = server
        self.prefix = f"soak-{tag}"

    def settings(self) -> dict[str, Any]:
        # Results are opt-in on Redis: "broker" stores them in the settle's own Lua call.
        return {
            "broker": self.server.url,
            "broker_transport_options": {"global_keyprefix": self.prefix},
            "result_backend": "broker",
        }

    def sample(self) -> dict[str, float]:
        client = self.server.client
        memory = client.info("memory")
        out: dict[str, float] = {
            self.BYTES: int(memory["used_memory"]),
            "used_memory_rss": int(memory["used_memory_rss"]),
        }
        out.update(redis_counts(client, self.prefix))
        return out

    def close(self) -> None:
        from benchmarks.scale_redis import delete_prefix

        delete_prefix(self.server.client, self.prefix + ":")


# -- RabbitMQ 4 (with a Redis result backend) -------------------------------------------------


class RabbitMQStorage(Storage):
    """Queues under a prefix of their own on a RabbitMQ 4 node of the run's own; results,
    heartbeats and dead-letter records' results in a Redis result backend (the run's own
    server). The sample has both: the node's queues (messages, memory), its data directory
    and its Erlang VM's RSS, and the backend's keys and ``used_memory``."""

    name = "RabbitMQ"
    BYTES = "node bytes"

    def __init__(self, url: str, ctl: str, server: RedisServer, tag: str) -> None:
        self.url = url
        self.node = Node(url, ctl)
        self.server = server
        self.prefix = f"soak{tag}-"
        self.backend_prefix = f"soak-rmq-{tag}"

    def settings(self) -> dict[str, Any]:
        return {
            "broker": self.url,
            "broker_transport_options": {"queue_prefix": self.prefix},
            "result_backend": self.server.url,
            "result_backend_transport_options": {"global_keyprefix": self.backend_prefix},
        }

    def sample(self) -> dict[str, float]:
        out: dict[str, float] = {}
        queues = self.node.queues() or {}
        mine = {name: value for name, value in queues.items() if name.startswith(self.prefix)}
        cascade = {name: value for name, value in queues.items() if name.startswith("potatoq.delay.")}
        out["registry"] = mine.get(f"{self.prefix}potatoq.queues", (0, 0))[0]
        out["dead"] = sum(m for name, (m, _) in mine.items() if name.endswith(".dlq"))
        out["queues"] = len(mine)
        out["queue messages"] = sum(m for m, _ in mine.values())
        out["queue memory"] = sum(b for _, b in mine.values())
        out["cascade messages"] = sum(m for m, _ in cascade.values())
        out["cascade memory"] = sum(b for _, b in cascade.values())
        out["data dir bytes"] = self.node.disk() or 0
        out["node rss"] = _node_rss(self.url)
        out[self.BYTES] = out["queue memory"] + out["cascade memory"] + out["data dir bytes"]
        client = self.server.client
        out["backend used_memory"] = int(client.info("memory")["used_memory"])
        counts = redis_counts(client, self.backend_prefix)
        out["results"] = counts["results"]
        out["heartbeats"] = counts["heartbeats"]
        out["backend keys"] = counts["keys"]
        out["history"] = counts["history"]
        return out

    def close(self) -> None:
        import pika

        from benchmarks.scale_redis import delete_prefix

        queues = self.node.queues() or {}
        connection = pika.BlockingConnection(pika.URLParameters(self.url))
        try:
            channel = connection.channel()
            for name in queues:
                if name.startswith(self.prefix):
                    channel.queue_delete(name)
        finally:
            connection.close()
        delete_prefix(self.server.client, self.backend_prefix + ":")


def _node_rss(url: str) -> float:
    """RSS in bytes of the Erlang VM of the node on the URL's port, found by its own epmd
    port (AMQP port - 1303, scripts/services/rabbitmq4.sh); 0 when not found."""
    from urllib.parse import urlparse

    needle = f"\0-epmd_port\0{(urlparse(url).port or 5672) - 1303}\0".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if needle in (entry / "cmdline").read_bytes() and b"beam" in (entry / "comm").read_bytes():
                for line in (entry / "status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) * 1024
    return 0
