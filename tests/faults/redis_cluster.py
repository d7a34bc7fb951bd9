"""A private Redis Cluster on loopback ports: 3 masters and 3 replicas (redis-server 7 of
this machine, or any ``redis-server`` given by ``POTATOQ_REDIS_SERVER``; or, with
``server="valkey"``, Valkey 8 chrooted in the services' Debian root filesystem), each node
in a temp folder of its own, created with ``redis-cli --cluster create ... --cluster-yes``.

Used by the cluster tests (tests/brokers/test_redis_cluster.py, the contract suite's
``redis-cluster`` factory) and runnable by hand::

    python -m tests.faults.redis_cluster      # prints the broker URL, Ctrl-C tears it down

:meth:`RedisCluster.kill` SIGKILLs one node (no shutdown, no save); its replica is promoted
by the cluster itself after ``cluster-node-timeout`` (set short here), or at once with
:meth:`RedisCluster.failover` (``CLUSTER FAILOVER TAKEOVER`` on the replica).
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

import redis

from .harness import free_port, wait_for
from .servers import services_cache

__all__ = ["RedisCluster", "available"]

# Valkey 8 comes from the Debian trixie root filesystem scripts/services/up builds.
VALKEY_ROOTFS = services_cache() / "trixie-rootfs"
NODE_TIMEOUT_MS = 1500  # how long a silent master stays a master before its replica takes over


def _server() -> str | None:
    return os.environ.get("POTATOQ_REDIS_SERVER") or shutil.which("redis-server")


def _cluster_ports(count: int) -> list[int]:
    """``count`` free ports below 55536 whose cluster bus ports (port + 10000) are free too."""
    found: list[int] = []
    while len(found) < count:
        port = free_port() % 30000 + 10000
        if port not in found and _free(port) and _free(port + 10000):
            found.append(port)
    return found


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def available(server: str = "redis") -> str | None:
    """Why a private cluster of ``server`` (redis, valkey) can't start here, or None when it can."""
    if server == "valkey":
        if not (VALKEY_ROOTFS / "usr/bin/valkey-server").exists():
            return f"no Valkey in {VALKEY_ROOTFS} (bash scripts/services/up builds it)"
        if os.geteuid() != 0:
            return "a chrooted Valkey needs root"
    elif _server() is None:
        return "redis-server is not installed"
    if shutil.which("redis-cli") is None:
        return "redis-cli is not installed"
    return None


class RedisCluster:
    """``masters`` masters with ``replicas`` replicas each, on free loopback ports."""

    def __init__(self, masters: int = 3, replicas: int = 1, server: str = "redis") -> None:
        self.masters, self.replicas, self.server = masters, replicas, server
        # Valkey runs chrooted in the services' Debian root filesystem: its folders are there
        self.root = VALKEY_ROOTFS if server == "valkey" else None
        base = None if self.root is None else str(self.root / "tmp")
        self.dir = Path(tempfile.mkdtemp(prefix=f"pq-{server}-cluster-", dir=base))
        self.ports = _cluster_ports(masters * (1 + replicas))
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports[: self.masters]) + "/"

    def start_node(self, port: int) -> None:
        running = self.procs.get(port)
        if running is not None and running.poll() is None:
            raise RuntimeError(f"a node already runs on port {port}")
        folder = self.dir / str(port)
        folder.mkdir(exist_ok=True)
        inside = folder if self.root is None else Path("/") / folder.relative_to(self.root)
        server = (
            [str(_server())] if self.root is None else ["chroot", str(self.root), "/usr/bin/valkey-server"]
        )
        command = [
            *server, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(inside),
            "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(NODE_TIMEOUT_MS), "--appendonly", "yes",
            "--appendfsync", "everysec", "--save", "", "--maxmemory-policy", "noeviction",
            "--daemonize", "no", "--logfile", str(inside / "log"),
        ]  # fmt: skip
        self.procs[port] = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: self._is_ours(port), 20, f"our server on port {port}")

    def _is_ours(self, port: int) -> bool:
        """The server on ``port`` answers and is the process we started (not another test
        process's node that took the port first: then ours exits, and this fails)."""
        proc = self.procs[port]
        if proc.poll() is not None:
            raise RuntimeError(f"the server for port {port} exited ({proc.returncode}): port taken?")
        try:
            with redis.Redis(port=port, socket_timeout=1) as client:
                return int(client.info("server")["process_id"]) == proc.pid
        except redis.exceptions.RedisError:
            return False

    def _pings(self, port: int) -> bool:
        try:
            with redis.Redis(port=port, socket_timeout=1) as client:
                return bool(client.ping())
        except redis.exceptions.RedisError:
            return False

    def start(self) -> RedisCluster:
        for port in self.ports:
            self.start_node(port)
        nodes = [f"127.0.0.1:{p}" for p in self.ports]
        subprocess.run(
            ["redis-cli", "--cluster", "create", *nodes, "--cluster-replicas", str(self.replicas),
             "--cluster-yes"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60,
        )  # fmt: skip
        wait_for(self._settled, 30, "the cluster to be ok on every node")
        for master in self.master_ports():  # and every replica synced with its master
            self.replica_of(master)
        return self

    def _settled(self) -> bool:
        for port in self.ports:
            if port not in self.procs:
                continue
            try:
                with redis.Redis(port=port, socket_timeout=1) as client:
                    info = client.execute_command("CLUSTER", "INFO").decode()
            except redis.exceptions.RedisError:
                return False
            if "cluster_state:ok" not in info:
                return False
        return True

    def role(self, port: int) -> str:
        with redis.Redis(port=port, socket_timeout=2) as client:
            return str(client.execute_command("ROLE")[0].decode())

    def master_ports(self) -> list[int]:
        return [p for p in self.procs if self._pings(p) and self.role(p) == "master"]

    def replica_of(self, master: int) -> int:
        """The port of a replica of the master on ``master``."""

        def listed() -> int | None:  # a replica shows up once it has synced
            with redis.Redis(port=master, socket_timeout=2) as client:
                role = client.execute_command("ROLE")
            return int(role[2][0][1]) if role[2] else None

        return int(wait_for(listed, 30, f"a replica of port {master}"))

    def kill(self, port: int) -> None:
        proc = self.procs.pop(port)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def failover(self, replica: int) -> None:
        """Make the replica on ``replica`` a master now (its master may be dead: TAKEOVER)."""
        with redis.Redis(port=replica, socket_timeout=5) as client:
            client.execute_command("CLUSTER", "FAILOVER", "TAKEOVER")
        wait_for(lambda: self.role(replica) == "master", 20, f"port {replica} to become master")

    def node_id(self, port: int) -> str:
        with redis.Redis(port=port, socket_timeout=2) as client:
            return str(client.execute_command("CLUSTER", "MYID").decode())

    def move_slot(self, slot: int, source: int, target: int) -> int:
        """Move ``slot`` from the master on ``source`` to the one on ``target`` by hand, as
        ``redis-cli --cluster reshard`` does, but with all its keys in one ``MIGRATE``: the
        source runs every call of the slot until then, and redirects all of them after
        (see docs/deployment.md, resharding). Returns how many keys moved."""
        source_id, target_id = self.node_id(source), self.node_id(target)
        with (
            redis.Redis(port=source, socket_timeout=30) as src,
            redis.Redis(port=target, socket_timeout=30) as dst,
        ):
            dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
            src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
            keys = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 10_000_000)
            if keys:
                src.execute_command("MIGRATE", "127.0.0.1", target, "", 0, 20000, "KEYS", *keys)
            for port in self.master_ports():
                with redis.Redis(port=port, socket_timeout=5) as node:
                    node.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        wait_for(self._settled, 30, "the cluster to agree on the moved slot")
        return len(keys)

    def stop(self) -> None:
        for port in list(self.procs):
            with contextlib.suppress(Exception):
                self.kill(port)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":
    with RedisCluster() as cluster:
        print(cluster.url, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)
