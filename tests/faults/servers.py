"""Private broker servers a test starts, stops and restarts itself, on free loopback ports.

* :class:`PrivateRedis`: ``redis-server`` with ``--save ""`` (no snapshots) and an
  append-only file fsynced on every write, so a restart, even after SIGKILL, keeps every
  acknowledged write.
* :class:`PrivatePostgres`: a PostgreSQL 15 cluster made by ``initdb`` in a temporary folder
  owned by the ``postgres`` user (``initdb`` refuses to run as root), run with ``pg_ctl``.

* :class:`PrivateRabbitMQ`: a RabbitMQ 4 node of our own, run from the Debian 13 root
  filesystem that ``../shared/services/rabbitmq4.sh`` builds (the way that script runs the
  shared node: chroot inside private PID and mount namespaces), with its own node name,
  ports, epmd, configuration and data folder, so the shared node on 5673 is never touched.

All listen on 127.0.0.1 only. :func:`available` says why one can't run here (a missing
binary), so the test can skip (or fail under ``CI=true``) with that reason.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from .harness import free_port, wait_for

PG_BIN = Path(os.environ.get("POTATOQ_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))


def services_cache() -> Path:
    """The cache scripts/services/lib.sh builds its Debian trixie rootfs in (same defaults)."""
    if "POTATOQ_SERVICES_CACHE" in os.environ:
        return Path(os.environ["POTATOQ_SERVICES_CACHE"])
    if os.geteuid() == 0:
        return Path("/var/cache/potatoq-services")
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "potatoq-services"


RABBITMQ_ROOTFS = services_cache() / "trixie-rootfs"


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
    if kind == "rabbitmq":
        if not (RABBITMQ_ROOTFS / "usr/lib/rabbitmq/bin/rabbitmq-server").exists():
            return f"no RabbitMQ 4 root filesystem at {RABBITMQ_ROOTFS}: run scripts/services/up"
        if os.geteuid() != 0:
            return "a private RabbitMQ node needs root (chroot, unshare)"
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


class PrivateRabbitMQ:
    """A private RabbitMQ 4 node: ``amqp://guest:guest@127.0.0.1:PORT/``."""

    CHROOT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

    def __init__(self) -> None:
        self.port, self.dist_port, self.epmd_port = free_port(), free_port(), free_port()
        self.name = f"potatoq-rmq-{self.port}"
        self.inside = f"/tmp/{self.name}"  # as the node sees it, inside the root filesystem
        self.dir = RABBITMQ_ROOTFS / self.inside.lstrip("/")
        self.dir.mkdir(parents=True)
        (self.dir / "env.conf").write_text(
            f"NODENAME=pq{self.port}@localhost\nNODE_IP_ADDRESS=127.0.0.1\nNODE_PORT={self.port}\n"
            f"DIST_PORT={self.dist_port}\nERL_EPMD_PORT={self.epmd_port}\nexport ERL_EPMD_PORT\n"
            "ERL_EPMD_ADDRESS=127.0.0.1\nexport ERL_EPMD_ADDRESS\n"
            'SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"\n'
            'CTL_ERL_ARGS="-start_epmd false"\n'
            f"MNESIA_BASE={self.inside}/mnesia\nLOG_BASE={self.inside}/log\n"
            f"CONFIG_FILE={self.inside}/rabbitmq.conf\nENABLED_PLUGINS_FILE={self.inside}/enabled_plugins\n"
        )
        (self.dir / "rabbitmq.conf").write_text(f"listeners.tcp.default = 127.0.0.1:{self.port}\n")
        (self.dir / "enabled_plugins").write_text("[].\n")
        for sub in ("mnesia", "log"):
            (self.dir / sub).mkdir()
        owner = self.dir.parent.parent / "var/lib/rabbitmq"
        uid, gid = owner.stat().st_uid, owner.stat().st_gid
        for path in [self.dir, *self.dir.rglob("*")]:
            os.chown(path, uid, gid)
        self.proc: subprocess.Popen[bytes] | None = None
        self._log = (self.dir / "server.out").open("ab")

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    def _ports_free(self) -> bool:
        for port in (self.port, self.dist_port, self.epmd_port):
            with socket.socket() as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    return False
        return True

    def start(self) -> None:
        # The previous run's epmd and node die with their namespace, a moment after its init.
        wait_for(self._ports_free, 20, f"the ports of the RabbitMQ node {self.port} to be free")
        script = 'root=$1; shift; mount -t proc proc "$root/proc" && exec chroot "$@"'
        self.proc = subprocess.Popen(
            [
                "setsid", "unshare", "--pid", "--mount", "--fork", "--kill-child", "--propagation", "private",
                "sh", "-c", script, "sh", str(RABBITMQ_ROOTFS),
                "--userspec=rabbitmq:rabbitmq", str(RABBITMQ_ROOTFS),
                "env", "-i", self.CHROOT_PATH, "LANG=C.UTF-8", "LC_ALL=C.UTF-8", "HOME=/var/lib/rabbitmq",
                f"RABBITMQ_CONF_ENV_FILE={self.inside}/env.conf",
                "/usr/lib/rabbitmq/bin/rabbitmq-server",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        wait_for(self._answers, 90, f"a private RabbitMQ node on port {self.port}")

    def _answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            self._log.flush()
            tail = (self.dir / "server.out").read_text(errors="replace")[-3000:]
            raise AssertionError(f"the RabbitMQ node exited:\n{tail}")
        import pika

        try:
            connection = pika.BlockingConnection(pika.URLParameters(self.url + "?connection_attempts=1"))
        except Exception:  # noqa: BLE001 - not up yet
            return False
        connection.close()
        return True

    def stop(self, how: str = "clean") -> None:
        """``clean``: SIGTERM to the node's script (it stops the node); ``kill``: SIGKILL the namespace."""
        if self.proc is None or self.proc.poll() is not None:
            self.proc = None
            return
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        with contextlib.suppress(OSError, ValueError):
            init = int(children.read_text().split()[0])  # the namespace's pid 1: rabbitmq-server
            os.kill(init, signal.SIGTERM if how == "clean" else signal.SIGKILL)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def close(self) -> None:
        self.stop("kill")
        self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
