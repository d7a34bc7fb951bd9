"""A three-node RabbitMQ 4 cluster of our own, on loopback ports, for the cluster fault tests.

Each node is a :class:`servers.PrivateRabbitMQ` (the Debian trixie root filesystem that
``scripts/services/up`` builds, chroot inside private PID and mount namespaces) with its own
node name (``pq<port>@localhost``), AMQP port, distribution port and data folder. What they
share:

* one epmd, started here in a PID namespace of its own on a private port, so that killing a
  node (its whole namespace) doesn't take the other nodes' name registrations with it (a
  lone private node starts its own epmd, which dies with it);
* one Erlang cookie: the root filesystem's ``/var/lib/rabbitmq/.erlang.cookie`` (every
  node runs with that ``HOME``).

The second and third nodes are joined to the first with ``rabbitmqctl stop_app``,
``join_cluster``, ``start_app``. Quorum queues declared on the cluster get a member on every
node: RabbitMQ's default initial group size is 3 (:meth:`RabbitCluster.members` lets a test
check it).

:meth:`RabbitCluster.kill` SIGKILLs one node's namespace (node and all its processes, no
shutdown); :meth:`RabbitCluster.restart` starts it again on its data folder, where it
rejoins the cluster by itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

from .harness import free_port, wait_for
from .servers import RABBITMQ_ROOTFS, PrivateRabbitMQ, available

__all__ = ["ClusterNode", "RabbitCluster", "available"]

SIZE = 3


def _in_rootfs(*command: str, env: list[str], mount_proc: bool = True) -> list[str]:
    """``command`` run as the rabbitmq user in the root filesystem, in new PID and mount
    namespaces (their init is ``command`` itself: killing it kills everything it started)."""
    script = 'root=$1; shift; mount -t proc proc "$root/proc" && exec chroot "$@"'
    if not mount_proc:
        script = 'root=$1; shift; exec chroot "$@"'
    return [
        "setsid", "unshare", "--pid", "--mount", "--fork", "--kill-child", "--propagation", "private",
        "sh", "-c", script, "sh", str(RABBITMQ_ROOTFS),
        "--userspec=rabbitmq:rabbitmq", str(RABBITMQ_ROOTFS),
        "env", "-i", PrivateRabbitMQ.CHROOT_PATH, "LANG=C.UTF-8", "LC_ALL=C.UTF-8",
        "HOME=/var/lib/rabbitmq", *env, *command,
    ]  # fmt: skip


class ClusterNode(PrivateRabbitMQ):
    """A private node that registers with the cluster's shared epmd on ``epmd_port``."""

    def __init__(self, epmd_port: int) -> None:
        super().__init__()
        self.epmd_port = epmd_port
        env = (self.dir / "env.conf").read_text().splitlines()
        env = [line for line in env if not line.startswith("ERL_EPMD_PORT=")]
        env.insert(0, f"ERL_EPMD_PORT={epmd_port}")
        (self.dir / "env.conf").write_text("\n".join(env) + "\n")

    @property
    def node(self) -> str:
        return f"pq{self.port}@localhost"

    def url_part(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}//"

    def _ports_free(self) -> bool:
        epmd, self.epmd_port = self.epmd_port, self.port  # the shared epmd is meant to be busy
        try:
            return super()._ports_free()
        finally:
            self.epmd_port = epmd

    def ctl(self, *args: str, tool: str = "rabbitmqctl", timeout: float = 120) -> str:
        """Run ``rabbitmqctl`` (or another CLI tool) against this node; its stdout."""
        command = _in_rootfs(
            f"/usr/lib/rabbitmq/bin/{tool}", "-n", self.node, *args,
            env=[f"RABBITMQ_CONF_ENV_FILE={self.inside}/env.conf"],
        )  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            raise AssertionError(
                f"{tool} {' '.join(args)} on {self.node} failed ({done.returncode}):\n"
                f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
            )
        return done.stdout


class RabbitCluster:
    """Three :class:`ClusterNode` joined into one cluster, sharing one epmd."""

    def __init__(self, size: int = SIZE) -> None:
        self.epmd_port = free_port()
        self.epmd: subprocess.Popen[bytes] | None = None
        self.nodes = [ClusterNode(self.epmd_port) for _ in range(size)]

    def url(self, first: int = 0) -> str:
        """All nodes in Celery's ``;`` spelling, node ``first`` first (clients use it first)."""
        order = self.nodes[first:] + self.nodes[:first]
        return ";".join(node.url_part() for node in order)

    def start(self) -> None:
        self.epmd = subprocess.Popen(
            _in_rootfs(
                "epmd", "-port", str(self.epmd_port), env=["ERL_EPMD_ADDRESS=127.0.0.1"], mount_proc=False
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
        )
        wait_for(self._epmd_answers, 20, f"epmd on port {self.epmd_port}")
        errors: list[BaseException] = []

        def boot(node: ClusterNode) -> None:
            try:
                node.start()
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                errors.append(exc)

        threads = [threading.Thread(target=boot, args=(node,)) for node in self.nodes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        first = self.nodes[0]
        for node in self.nodes[1:]:
            node.ctl("stop_app")
            node.ctl("join_cluster", first.node)
            node.ctl("start_app")
        wait_for(
            lambda: len(self.running()) == len(self.nodes), 60, "every node to be running in the cluster"
        )

    def _epmd_answers(self) -> bool:
        import socket

        with socket.socket() as sock:
            sock.settimeout(1)
            return sock.connect_ex(("127.0.0.1", self.epmd_port)) == 0

    def running(self, via: int | None = None) -> list[str]:
        """The names of the cluster's running nodes, as a live node sees them."""
        node = self._live(via)
        status = json.loads(node.ctl("cluster_status", "--formatter", "json"))
        return sorted(status.get("running_nodes", []))

    def _live(self, via: int | None) -> ClusterNode:
        if via is not None:
            return self.nodes[via]
        for node in self.nodes:
            if node.proc is not None and node.proc.poll() is None:
                return node
        raise AssertionError("no node of the cluster is running")

    def leader(self, queue: str, vhost: str = "/") -> str:
        """The node name that leads quorum queue ``queue``."""
        return str(self._queue_info(queue, vhost)["leader"])

    def members(self, queue: str, vhost: str = "/") -> list[str]:
        """The node names that hold a member of quorum queue ``queue``."""
        return sorted(self._queue_info(queue, vhost)["members"])

    def _queue_info(self, queue: str, vhost: str) -> dict[str, Any]:
        rows = json.loads(
            self._live(None).ctl(
                "list_queues", "-p", vhost, "name", "leader", "members", "--formatter", "json"
            )
        )
        for row in rows:
            if row["name"] == queue:
                return dict(row)
        raise AssertionError(f"no queue {queue!r} on the cluster")

    def index_of(self, node_name: str) -> int:
        return [node.node for node in self.nodes].index(node_name)

    def kill(self, index: int) -> None:
        """SIGKILL node ``index`` (its whole PID namespace: no shutdown of any kind)."""
        self.nodes[index].stop("kill")

    def restart(self, index: int) -> None:
        """Start a stopped node again on its data folder; wait until the cluster runs it."""
        node = self.nodes[index]
        if node.proc is not None and node.proc.poll() is None:
            return
        self.nodes[index].start()
        wait_for(lambda: len(self.running()) == len(self.nodes), 60, "the restarted node to rejoin")

    def close(self) -> None:
        for node in self.nodes:
            node.close()
        if self.epmd is not None and self.epmd.poll() is None:
            # epmd is its namespace's init: killing it ends the namespace. (unshare's
            # --kill-child doesn't reach it: chroot --userspec changes its user, which
            # clears the parent-death signal.)
            children = Path(f"/proc/{self.epmd.pid}/task/{self.epmd.pid}/children")
            with contextlib.suppress(OSError, ValueError, IndexError):
                os.kill(int(children.read_text().split()[0]), signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                self.epmd.send_signal(signal.SIGKILL)
            self.epmd.wait(10)
        self.epmd = None


def logs(cluster: RabbitCluster) -> str:
    """The tail of every node's server output (for a failing test's report)."""
    parts = []
    for node in cluster.nodes:
        path = Path(node.dir / "server.out")
        with contextlib.suppress(OSError):
            parts.append(f"---- {node.node} ----\n{path.read_text(errors='replace')[-3000:]}")
    return "\n".join(parts)
