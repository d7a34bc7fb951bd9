"""The four servers a benchmark run uses, each handing out empty storage and removing it.

A system gets fresh storage for each phase (the one-call-each enqueue, then the batched
enqueue that the workers go on to process), and everything it created is removed at the
end, on success or failure:

* SQLite: a file in the run's temporary directory, deleted with its -wal/-shm files;
* Redis: one database number that the benchmark owns (default 9), flushed;
* PostgreSQL: a database per system (``bench_potatoq``, ``bench_procrastinate``), created
  and dropped through an admin connection;
* RabbitMQ: potatoq gets a queue prefix of its own and drops its queues; Celery's and
  Dramatiq's fixed queue and exchange names are deleted by name.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent


class Server:
    """Storage for one broker kind; ``fresh`` returns the env a system's processes get."""

    name = ""

    def __init__(self, url: str, tmp: Path) -> None:
        self.url = url
        self.tmp = tmp

    def fresh(self, system: str, phase: str) -> dict[str, str]:
        raise NotImplementedError

    def drop(self, system: str, env: dict[str, str]) -> None:
        raise NotImplementedError

    def version(self) -> str:
        raise NotImplementedError

    def close(self) -> None:
        """Called once at the end of the run."""


class SQLiteServer(Server):
    name = "sqlite"

    def fresh(self, system: str, phase: str) -> dict[str, str]:
        path = self.tmp / f"{system}-{phase}.sqlite3"
        self._remove(path)
        return {"BENCH_URL": f"sqlite:///{path}"}

    def drop(self, system: str, env: dict[str, str]) -> None:
        self._remove(Path(env["BENCH_URL"].removeprefix("sqlite:///")))

    @staticmethod
    def _remove(path: Path) -> None:
        for suffix in ("", "-wal", "-shm", "-journal"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{path}{suffix}")

    def version(self) -> str:
        import sqlite3

        return f"SQLite {sqlite3.sqlite_version} (Python's sqlite3)"


class RedisServer(Server):
    name = "redis"

    def __init__(self, url: str, tmp: Path) -> None:
        super().__init__(url, tmp)
        import redis

        self.client = redis.Redis.from_url(url)
        self.client.ping()

    def fresh(self, system: str, phase: str) -> dict[str, str]:
        self.client.flushdb()
        return {"BENCH_URL": self.url}

    def drop(self, system: str, env: dict[str, str]) -> None:
        self.client.flushdb()

    def version(self) -> str:
        info = self.client.info("server")
        name = "Valkey" if "valkey_version" in info else "Redis"
        return f"{name} {info.get('valkey_version') or info['redis_version']}"

    def close(self) -> None:
        self.client.flushdb()
        self.client.close()


class PostgresServer(Server):
    """``url`` is an admin connection (any database); each system gets ``bench_<system>``
    (``$POTATOQ_BENCH_POSTGRES_PREFIX<system>`` when set)."""

    name = "postgres"

    def _admin(self) -> object:
        import psycopg

        return psycopg.connect(self.url, autocommit=True)

    def _database_url(self, database: str) -> str:
        parts = urlsplit(self.url)
        return urlunsplit(parts._replace(path=f"/{database}"))

    def fresh(self, system: str, phase: str) -> dict[str, str]:
        # another prefix keeps concurrent runs on one server apart (each drops its databases)
        database = os.environ.get("POTATOQ_BENCH_POSTGRES_PREFIX", "bench_") + system
        with self._admin() as conn:  # type: ignore[attr-defined]
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{database}"')
        env = {"BENCH_URL": self._database_url(database)}
        if system == "procrastinate":  # its documented set-up step, as a user would run it
            _run_tool(
                [_tool("procrastinate"), "--app=benchmarks.peers.procrastinate_app.app", "schema", "--apply"],
                env,
            )
        elif system == "potatoq":  # `potatoq migrate`: tables exist before the timing starts
            _run_tool(
                [sys.executable, "-m", "potatoq.cli", "-A", "benchmarks.peers.potatoq_app", "migrate"], env
            )
        return env

    def drop(self, system: str, env: dict[str, str]) -> None:
        database = urlsplit(env["BENCH_URL"]).path.lstrip("/")
        with self._admin() as conn:  # type: ignore[attr-defined]
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')

    def version(self) -> str:
        with self._admin() as conn:  # type: ignore[attr-defined]
            (version,) = conn.execute("SHOW server_version").fetchone()
        return f"PostgreSQL {version}"


# Queues and exchanges that Celery and Dramatiq declare (their queue is named
# potatoq_bench, see benchmarks/peers/; the other names are Celery's defaults).
RABBITMQ_NAMES = {
    "celery": (["potatoq_bench"], ["potatoq_bench", "celery.pidbox", "celeryev", "reply.celery.pidbox"]),
    "dramatiq": (["potatoq_bench", "potatoq_bench.DQ", "potatoq_bench.XQ"], []),
}


class RabbitMQServer(Server):
    name = "rabbitmq"

    def fresh(self, system: str, phase: str) -> dict[str, str]:
        env = {"BENCH_URL": self.url}
        if system == "potatoq":
            env["BENCH_TRANSPORT_OPTIONS"] = json.dumps({"queue_prefix": f"bench{os.getpid()}{phase}_"})
        else:
            self._delete(*RABBITMQ_NAMES[system])
        return env

    def drop(self, system: str, env: dict[str, str]) -> None:
        if system == "potatoq":
            from potatoq.brokers import create_broker
            from potatoq.brokers.base import BrokerConfig

            options = json.loads(env["BENCH_TRANSPORT_OPTIONS"])
            broker = create_broker(BrokerConfig(url=self.url, transport_options=options))
            try:
                broker.drop_all()  # type: ignore[attr-defined]
            finally:
                broker.close()
        else:
            self._delete(*RABBITMQ_NAMES[system])

    def _delete(self, queues: list[str], exchanges: list[str]) -> None:
        import pika

        connection = pika.BlockingConnection(pika.URLParameters(self.url))
        try:
            for queue in queues:
                channel = connection.channel()
                with contextlib.suppress(pika.exceptions.ChannelClosed):
                    channel.queue_delete(queue)
            for exchange in exchanges:
                channel = connection.channel()
                with contextlib.suppress(pika.exceptions.ChannelClosed):
                    channel.exchange_delete(exchange)
        finally:
            connection.close()

    def version(self) -> str:
        import pika

        connection = pika.BlockingConnection(pika.URLParameters(self.url))
        try:
            props = connection._impl.server_properties
            version = props.get("version", b"?")
            return f"RabbitMQ {version.decode() if isinstance(version, bytes) else version}"
        finally:
            connection.close()


SERVERS: dict[str, type[Server]] = {
    "sqlite": SQLiteServer,
    "redis": RedisServer,
    "postgres": PostgresServer,
    "rabbitmq": RabbitMQServer,
}


def _tool(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def _run_tool(cmd: list[str], env: dict[str, str]) -> None:
    full = {**os.environ, **env, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(cmd, env=full, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
