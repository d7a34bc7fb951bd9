"""A PostgreSQL primary and its streaming standby on loopback, for the failover test.

Made the way an operator would: ``initdb`` the primary, start it, ``pg_basebackup -R`` the
standby from it (``-R`` writes ``standby.signal`` and ``primary_conninfo``), start the
standby. Both run as the ``postgres`` user (``initdb`` refuses root), from PostgreSQL 15
binaries (``servers.PG_BIN``), in one temporary folder, each on a free port; the machine's
own server on 5432 is never touched.

Replication is synchronous when asked (``synchronous=True``): the primary runs with
``synchronous_standby_names='*'`` and ``synchronous_commit=on``, so a commit is acknowledged
only once the standby has flushed its WAL, and a promoted standby holds every acknowledged
commit. The setting is given on the primary's command line only, never in a file
``pg_basebackup`` copies: a promoted standby that inherited it would wait forever for a
standby of its own, and every commit on it would hang.

:meth:`fail_over` is the failure drill: the primary is stopped in ``immediate`` mode (no
shutdown checkpoint, no last WAL sent: what a crash leaves), then the standby is promoted
with ``pg_ctl promote -w``, which returns once it accepts writes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .harness import free_port
from .servers import PG_BIN


class PostgresPair:
    """``primary`` and ``standby`` data folders and ports; :attr:`url` lists both hosts."""

    def __init__(self, *, synchronous: bool = True) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="potatoq-pgpair-"))
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        self.synchronous = synchronous
        self.primary_port, self.standby_port = free_port(), free_port()
        self.primary, self.standby = self.dir / "primary", self.dir / "standby"
        self.promoted = False

    def url(self, *ports: int, **params: str) -> str:
        """A libpq URL naming the hosts of ``ports`` in that order (default: standby first,
        then primary, so ``target_session_attrs`` has to skip a read-only server)."""
        hosts = ",".join(f"127.0.0.1:{port}" for port in (ports or (self.standby_port, self.primary_port)))
        query = "&".join(f"{key}={value}" for key, value in params.items())
        return f"postgresql://postgres@{hosts}/postgres" + (f"?{query}" if query else "")

    def _as_postgres(self, *args: str, timeout: float = 120) -> None:
        command = ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else list(args)
        done = subprocess.run(
            command, capture_output=True, text=True, cwd=self.dir, timeout=timeout, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(args[:2])} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
            )

    def _start(self, data: Path, port: int, extra: str = "") -> None:
        options = f"-p {port} -k {self.dir} -c listen_addresses=127.0.0.1 {extra}".strip()
        self._as_postgres(
            str(PG_BIN / "pg_ctl"), "-D", str(data), "-l", str(self.dir / f"{data.name}.log"),
            "-w", "-t", "90", "-o", options, "start",
        )  # fmt: skip

    def start(self) -> None:
        """initdb and start the primary, clone the standby from it and start that too."""
        self._as_postgres(
            str(PG_BIN / "initdb"), "-D", str(self.primary), "-A", "trust", "-U", "postgres",
            "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions",
        )  # fmt: skip
        sync = "-c synchronous_standby_names='*' -c synchronous_commit=on" if self.synchronous else ""
        self._start(self.primary, self.primary_port, sync)
        self._as_postgres(
            str(PG_BIN / "pg_basebackup"), "-D", str(self.standby), "-h", "127.0.0.1",
            "-p", str(self.primary_port), "-U", "postgres", "-R", "-X", "stream", "--no-sync",
            "-c", "fast",
        )  # fmt: skip
        self._start(self.standby, self.standby_port, "-c hot_standby=on")
        if self.synchronous:
            self._wait_synchronous()

    def _wait_synchronous(self) -> None:
        """Until the primary reports its standby as ``sync`` (before that, commits wait)."""
        import psycopg

        from .harness import wait_for

        def is_sync() -> bool:
            with psycopg.connect(self.url(self.primary_port), autocommit=True) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'"
                ).fetchone()
            return bool(row and row[0])

        wait_for(is_sync, 60, "the standby to be synchronous")

    def fail_over(self) -> None:
        """Crash the primary (immediate stop), then promote the standby; returns once it takes writes."""
        self.crash_primary()
        self.promote()

    def crash_primary(self) -> None:
        self._as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.primary), "-m", "immediate", "-w", "stop")

    def promote(self) -> None:
        self._as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.standby), "-w", "-t", "60", "promote")
        self.promoted = True

    def caught_up(self) -> bool:
        """The standby has replayed everything the primary has written so far."""
        import psycopg

        with psycopg.connect(self.url(self.primary_port), autocommit=True) as conn:
            written = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        with psycopg.connect(self.url(self.standby_port), autocommit=True) as conn:
            row = conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", written).fetchone()
        return bool(row and row[0])

    def detach_standby(self) -> None:
        """Stop the standby's WAL receiver (it stays a standby, falling behind from now on):
        an empty ``primary_conninfo``, reloaded; returns once the primary saw it go."""
        import psycopg

        from .harness import wait_for

        with psycopg.connect(self.url(self.standby_port), autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET primary_conninfo = ''")
            conn.execute("SELECT pg_reload_conf()")

        def gone() -> bool:
            with psycopg.connect(self.url(self.primary_port), autocommit=True) as conn:
                row = conn.execute("SELECT count(*) FROM pg_stat_replication").fetchone()
            return bool(row and row[0] == 0)

        wait_for(gone, 60, "the standby's WAL receiver to disconnect")

    def waiting_for_standby(self) -> int:
        """Backends of the primary whose commit waits for the synchronous standby."""
        import psycopg

        with psycopg.connect(self.url(self.primary_port), autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
            ).fetchone()
        return int(row[0]) if row else 0

    def close(self) -> None:
        for data in (self.primary, self.standby):
            if (data / "postmaster.pid").exists():
                with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                    self._as_postgres(
                        str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"
                    )
        shutil.rmtree(self.dir, ignore_errors=True)
