"""Private broker servers a test starts, stops and restarts itself, on free loopback ports.

* :class:`PrivateRedis`: ``redis-server`` with ``--save ""`` (no snapshots) and an
  append-only file fsynced on every write, so a restart, even after SIGKILL, keeps every
  acknowledged write.
* :class:`PrivatePostgres`: a PostgreSQL 15 cluster made by ``initdb`` in a temporary folder
  owned by the ``postgres`` user (``initdb`` refuses to run as root), run with ``pg_ctl``.

Both listen on 127.0.0.1 only. :func:`available` says why one can't run here (a missing
binary), so the test can skip (or fail under ``CI=true``) with that reason.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from .harness import free_port, wait_for

PG_BIN = Path(os.environ.get("POTATOQ_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))


def available(kind: str) -> str | None:
    """None when a private ``kind`` server can run here, else the reason it can't."""
    if kind == "redis":
        return None if shutil.which("redis-server") else "redis-server is not on PATH"
    if kind == "postgres":
        if not (PG_BIN / "initdb").exists():
            return f"{PG_BIN}/initdb not found (set POTATOQ_TEST_PG_BIN)"
        if os.geteuid() == 0 and not shutil.which("runuser"):
            return "running as root without runuser (initdb refuses root)"
        return None
    return f"no private {kind} server"


class PrivateRedis:
    def __init__(self, password: str | None = None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="potatoq-redis-"))
        self.port = free_port()
        self.password = password
        self.proc: subprocess.Popen[bytes] | None = None
        self._log = (self.dir / "redis.log").open("ab")

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> None:
        args = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        args += ["--appendonly", "yes", "--appendfsync", "always", "--dir", str(self.dir)]
        if self.password:
            args += ["--requirepass", self.password]
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT)
        wait_for(self._answers, 20, f"redis-server on port {self.port}")

    def _answers(self) -> bool:
        import redis

        client = redis.Redis(host="127.0.0.1", port=self.port, password=self.password, socket_timeout=1)
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    def stop(self, how: str = "clean") -> None:
        """``clean``: SIGTERM (redis writes and fsyncs before exiting); ``kill``: SIGKILL."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM if how == "clean" else signal.SIGKILL)
            self.proc.wait(20)
        self.proc = None

    def close(self) -> None:
        self.stop("kill")
        self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class PrivatePostgres:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="potatoq-pg-"))
        self.data = self.dir / "data"
        self.port = free_port()
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        self._as_postgres(
            str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
            "-E", "UTF8", "--locale=C", "--no-sync",
        )  # fmt: skip

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _as_postgres(self, *args: str) -> None:
        command = ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else list(args)
        subprocess.run(command, check=True, capture_output=True, cwd=self.dir, timeout=120)

    def start(self) -> None:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._as_postgres(
            str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.dir / "server.log"),
            "-w", "-t", "60", "-o", options, "start",
        )  # fmt: skip

    def stop(self, how: str = "clean") -> None:
        """``clean``: a fast shutdown; ``kill``: an immediate one (crash recovery at restart)."""
        mode = "fast" if how == "clean" else "immediate"
        with contextlib.suppress(subprocess.CalledProcessError):  # already stopped
            self._as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def close(self) -> None:
        self.stop("kill")
        deadline = time.monotonic() + 10
        while (self.data / "postmaster.pid").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        shutil.rmtree(self.dir, ignore_errors=True)
