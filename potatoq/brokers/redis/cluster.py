"""The Redis broker on Redis Cluster / Valkey cluster (``redis+cluster://h:p,h:p/``).

The cluster layout (the design is in the package docstring, "Redis Cluster") puts every key
of one queue under the hash tag ``{<prefix>:q:<queue>}``, so the unchanged transition scripts
run in one slot when called with that queue's prefix; what crosses slots goes through the
settling queue's outbox (``lua/_cluster.lua``) and :meth:`RedisClusterBroker._relay`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any, ClassVar
from urllib.parse import urlsplit

import redis
import redis.exceptions
from redis.cluster import ClusterNode, RedisCluster
from redis.connection import AbstractConnection as Connection

from potatoq.brokers.base import (
    Capabilities,
    ChordJoin,
    Delivery,
    Outcome,
    ProcessLocal,
    RecoverReport,
    WorkerRef,
    validate_queue_name,
)
from potatoq.brokers.unique import unique_of
from potatoq.exceptions import ImproperlyConfigured
from potatoq.message import Message

from .broker import HANDOFF, RedisBroker
from .cluster_admin import ClusterAdmin
from .cluster_limits import ClusterLimits
from .cluster_unique import ClusterUnique
from .history import _script_name
from .keys import Keys
from .outbox import ClusterOutbox
from .packing import _SETTLE_AND_CLAIM, _SETTLE_KIND, _command_once, _message_fields, _messages_fields, _ms
from .scripts import Script, cluster_scripts
from .unique import mark_duplicates

__all__ = ["ClusterKeys", "RedisClusterBroker", "cluster_nodes"]

log = logging.getLogger("potatoq.brokers.redis")

CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster", "valkey+cluster", "valkeys+cluster")
# How long a relayed enqueue is remembered (so a second relay of the entry skips it).
RELAY_MARK_MS = 7 * 86400 * 1000
# The errors of a call sent to a node that doesn't serve its slot (now): sent again through
# the cluster client, which follows them. (Any other error is the script's own: it may have
# written before it failed, so it is never sent twice.)
REDIRECTIONS = (
    redis.exceptions.MovedError,
    redis.exceptions.AskError,
    redis.exceptions.TryAgainError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.ReadOnlyError,  # a master demoted to replica since the map was read
)
# A worker idle on several queues blocks on one queue's marker at a time (markers of
# different slots can't be awaited in one command), for at most this long each.
MULTI_QUEUE_SLICE = 1.0


def cluster_nodes(url: str) -> tuple[list[ClusterNode], dict[str, Any]]:
    """The startup nodes and client options of a ``redis+cluster://h:p,h:p/`` URL."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower().split("+", 1)[0]
    netloc = parts.netloc.rpartition("@")
    hosts = netloc[2]
    options: dict[str, Any] = {"ssl": scheme in ("rediss", "valkeys")}
    if netloc[1]:
        user, _, password = netloc[0].partition(":")
        options["username"] = user or None
        options["password"] = password or None
    if parts.path.strip("/") not in ("", "0"):
        raise ImproperlyConfigured(
            f"a Redis Cluster has only database 0, got {parts.path!r} in the broker URL"
        )
    nodes = []
    for host_port in hosts.split(","):
        host, _, port = host_port.strip().rpartition(":")
        if not host:
            host, port = port, "6379"
        try:
            nodes.append(ClusterNode(host.strip("[]"), int(port)))
        except ValueError:
            raise ImproperlyConfigured(f"bad node {host_port!r} in the Redis Cluster URL") from None
    if not nodes:
        raise ImproperlyConfigured("the Redis Cluster URL names no node")
    return nodes, options


class ClusterKeys(Keys):
    """Key names under the cluster layout: one hash tag per queue, per result, per chord,
    and ``{<prefix>}`` for the rest (workers, paused, the queue list, history)."""

    def __init__(self, prefix: str) -> None:
        self.base = prefix.strip(":")
        super().__init__("{" + self.base + "}")

    def of_queue(self, queue: str) -> str:
        return "{" + self.base + ":q:" + queue + "}:"

    def of_result(self, task_id: str) -> str:
        return "{" + self.base + ":r:" + task_id + "}:"

    def of_chord(self, group_id: str) -> str:
        return "{" + self.base + ":c:" + group_id + "}:"

    def ready(self, queue: str) -> str:
        return f"{self.of_queue(queue)}q:{queue}:ready"

    def delayed(self, queue: str) -> str:
        return f"{self.of_queue(queue)}q:{queue}:delayed"

    def active(self, queue: str) -> str:
        return f"{self.of_queue(queue)}q:{queue}:active"

    def marker(self, queue: str) -> str:
        return f"{self.of_queue(queue)}q:{queue}:marker"

    def result(self, task_id: str) -> str:
        return f"{self.of_result(task_id)}result:{task_id}"

    def waiting(self, task_id: str) -> str:
        return f"{self.of_result(task_id)}waiting:{task_id}"

    def notify(self, task_id: str) -> str:
        return f"{self.of_result(task_id)}notify:{task_id}"

    def chord(self, group_id: str) -> str:
        return f"{self.of_chord(group_id)}chord:{group_id}"

    def wake_in(self, queue: str, instance: str) -> str:
        return f"{self.of_queue(queue)}wake:{instance}:{threading.get_ident()}"


class RedisClusterBroker(ClusterLimits, ClusterUnique, ClusterOutbox, ClusterAdmin, RedisBroker):
    """:class:`RedisBroker` on a Redis Cluster (redis-py's ``RedisCluster``)."""

    # Limits and unique keys span queues: they live in slots of their own (cluster_limits.py,
    # cluster_unique.py), taken around the queue slot's claim and enqueue.
    capabilities: ClassVar[Capabilities] = Capabilities(
        results_by_default=False,
        leases=True,
        exact_priorities=True,
        interruptible_wait=True,
        # the removal is atomic with the outbox entry, but the result and follow-ups show
        # up only when it is relayed (right after, or by a recovery round after a crash)
        atomic_settle=False,
        concurrency_limits=True,
        rate_limits=True,
        unique_tasks=True,
    )
    schemes: ClassVar[tuple[str, ...]] = CLUSTER_SCHEMES
    # a failover or a moving slot: the cluster client retried and gave up
    unreachable: ClassVar[tuple[type[Exception], ...]] = (
        *RedisBroker.unreachable,
        redis.exceptions.ClusterError,
        redis.exceptions.ClusterDownError,
        redis.exceptions.TryAgainError,
    )
    keys: ClusterKeys

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.keys = ClusterKeys(self.options.global_keyprefix)
        self._nodes, self._node_options = cluster_nodes(config.url)
        self._known_queues: set[str] = set()
        self._node_conns: ProcessLocal[dict[str, Connection]] = ProcessLocal(dict, _disconnect_all)
        self._scope = threading.local()  # .prefix: the queue slot _run targets, if not global
        self._seen_at: dict[str, float] = {}  # limit keys noted in use (cluster_limits.py)

    # -- connections and script calls ---------------------------------------------------------

    def _connect(self) -> Any:
        return RedisCluster(
            startup_nodes=self._nodes,
            socket_connect_timeout=self.config.connection_timeout,
            socket_timeout=self.options.socket_timeout,
            socket_keepalive=True,
            **self._node_options,
        )

    def _client(self) -> Any:  # a RedisCluster, which the Redis stubs don't know
        return super()._client()

    def _check_server(self, client: Any) -> None:
        _check_cluster(client)

    def _run_at(self, prefix: str, name: str, args: Sequence[str | bytes | int]) -> Any:
        """One EVALSHA of cluster script ``name`` in the slot of ``prefix``; loads the script
        on the masters on NOSCRIPT (a promoted replica, a restart, a slot being moved).

        The one declared key routes the call: the queue's ``seq``, which exists from its
        first enqueue on and is never deleted. While its slot migrates, the source node runs
        the call as long as that key is still there, and redirects it (ASK) once it has
        moved: safe when the slot's keys move together (one MIGRATE, see docs/deployment.md).
        """
        return self._eval_at(prefix, cluster_scripts()[name], args)

    def _eval_at(self, prefix: str, script: Script, args: Sequence[str | bytes | int]) -> Any:
        """:meth:`_run_at` for any script (``cluster_limits.py`` runs the RabbitMQ broker's
        limit scripts, which take the same prefix argument, in a limit's own slot)."""
        client = self._client()
        route = prefix + "seq"
        with self._errors():
            try:  # the fast path: this thread's own connection to the slot's master
                return _command_once(
                    self._node_connection(route), "EVALSHA", script.sha, 1, route, prefix, *args
                )
            except redis.exceptions.NoScriptError:
                pass
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
                self._node_conns.discard()  # the cluster client's path below finds the new master
            except REDIRECTIONS:
                self._node_conns.discard()
            # The cluster client's path: redirections, a refreshed slot map, retries.
            try:
                return client.execute_command("EVALSHA", script.sha, 1, route, prefix, *args)
            except redis.exceptions.NoScriptError:
                # on every master: a call redirected (ASK, during a slot's move) ran on a
                # node the slot map doesn't name yet
                client.execute_command("SCRIPT", "LOAD", script.source, target_nodes=RedisCluster.PRIMARIES)
                return client.execute_command("EVALSHA", script.sha, 1, route, prefix, *args)

    def _node_connection(self, route: str) -> Connection:
        """This thread's connection to the master the cluster client's slot map names for
        ``route``: script calls skip the cluster client's per-command layers (about half
        the CPU of a settle), as the standalone broker's do (packing.py's ``_command``)."""
        node = self._client().get_node_from_key(route)
        conns = self._node_conns.get()
        conn = conns.get(node.name)
        if conn is None:
            conn = conns[node.name] = node.redis_connection.connection_pool.get_connection()
        return conn

    def _run(self, name: str, args: Sequence[str | bytes | int]) -> Any:
        # The mixins' calls (heartbeat, history): the global slot, or the queue slot a
        # recovery round is reaping (_recover_queue).
        return self._run_at(getattr(self._scope, "prefix", None) or self.keys.prefix, name, args)

    def _queues(self) -> list[str]:
        """Every queue name ever used (the global ``queues`` set)."""
        with self._errors():
            return sorted(q.decode() for q in self._client().smembers(self.keys.queues))

    def _register(self, queues: Sequence[str]) -> None:
        new = [q for q in queues if q not in self._known_queues]
        if new:
            with self._errors():
                self._client().sadd(self.keys.queues, *new)
            self._known_queues.update(new)

    # -- messages -----------------------------------------------------------------------------

    def enqueue(self, messages: Sequence[Message], *, connection: Any = None) -> None:
        if connection is not None:
            super().enqueue(messages, connection=connection)  # raises the same error
        if not messages:
            return
        by_queue: dict[str, list[int]] = {}
        for i, message in enumerate(messages):
            by_queue.setdefault(validate_queue_name(message.queue), []).append(i)
        self._register(list(by_queue))
        for queue, indexes in by_queue.items():
            # unique keys live in their own slots: taken first, duplicates left out
            group = self._take_unique([messages[i] for i in indexes])
            if not group:
                continue
            reply = self._run_at(self.keys.of_queue(queue), "enqueue", _messages_fields(group))
            mark_duplicates(group, [reply], len(group))

    def claim(self, queues: Sequence[str], worker: WorkerRef) -> Delivery | None:
        for queue in queues:
            while True:
                args = self._claim_args([queue], worker)
                reply = self._run_at(self.keys.of_queue(queue), "claim", args)
                if reply is None:
                    break
                delivery = self._delivery(reply, worker)
                if self._admitted(delivery):
                    return delivery
                # it waits on its limit now (back in the delayed set): claim past it
        return None

    def _admitted(self, delivery: Delivery) -> bool:
        """Take the slot or token ``delivery``'s limits ask for (cluster_limits.py), and
        release a unique key held only while waiting; False: it went back to wait."""
        if not self._admit(delivery):
            return False
        self._unique_claimed(delivery)
        return True

    def _settled(self, delivery: Delivery) -> bool:
        """After a settle (done or fenced out, the run ended either way): give back its
        slot and the unique key the settle let go of (cluster_unique.py). True when a task
        of its queue that waited for the slot is due now."""
        message = delivery.message
        if message is None or not message.headers:
            return False
        woke = self._release_slot(delivery)
        if "uq" in message.headers:
            self._free_unique(delivery.queue)
        return woke

    def settle(self, delivery: Delivery, outcome: Outcome) -> bool:
        name, args = self._pack.settle(delivery, outcome)
        prefix = self.keys.of_queue(delivery.queue)
        settled = bool(self._run_at(prefix, name, args))
        self._settled(delivery)
        if settled:
            self._relay_settled(prefix, delivery, outcome)
            self._history_settled(delivery, outcome)
        return settled

    def settle_and_claim(
        self, delivery: Delivery, outcome: Outcome, queues: Sequence[str], worker: WorkerRef
    ) -> tuple[bool, Delivery | None]:
        if not queues or queues[0] != delivery.queue:
            return self.settle(delivery, outcome), self.claim(queues, worker)
        name, args = self._pack.settle(delivery, outcome)
        prefix = self.keys.of_queue(delivery.queue)
        claim_args = self._claim_args(queues[:1], worker)
        reply = self._run_at(prefix, _SETTLE_AND_CLAIM[name], [_SETTLE_KIND[name], *args, *claim_args])
        settled = bool(reply[0])
        woke = self._settled(delivery)  # after the script's claim: claimed below if so
        if settled:
            self._relay_settled(prefix, delivery, outcome)
            self._history_settled(delivery, outcome)
        if len(reply) > 1:
            claimed = self._delivery(reply[1:], worker)
            if self._admitted(claimed):
                return settled, claimed
            return settled, self.claim(queues, worker)
        return settled, self.claim(queues if woke else queues[1:], worker)

    # -- waiting ------------------------------------------------------------------------------

    def wait(self, queues: Sequence[str], timeout: float) -> None:
        """Block on the queues' markers, one queue at a time when there are several (markers
        of different slots can't be awaited together): a waiter on several queues wakes
        every ``MULTI_QUEUE_SLICE`` seconds to look at the next one."""
        names = [validate_queue_name(q) for q in queues]
        self._history_flush()
        deadline = time.monotonic() + min(timeout, self.options.max_block)
        if len(names) == 1:
            self._wait_one(names[0], deadline - time.monotonic())
            return
        while True:
            for name in names:
                left = deadline - time.monotonic()
                if left <= 0.001 or self._wait_one(name, min(left, MULTI_QUEUE_SLICE)):
                    return

    def _wait_one(self, queue: str, timeout: float) -> bool:
        """:meth:`RedisBroker.wait` for one queue; True when woken (or something is due)."""
        if time.monotonic() < self._interrupted_until:
            return True
        prefix = self.keys.of_queue(queue)
        waiter = f"{self._instance}:{threading.get_ident()}"
        block_ms, timed = self._run_at(prefix, "wait_plan", [waiter, str(_ms(timeout)), queue])
        if block_ms < 1:
            return True
        wake = self.keys.wake_in(queue, self._instance)
        block = block_ms / 1000
        due_at = time.monotonic() + block
        alarm = self._due_alarm().arm(block, wake) if timed else None
        with self._waiting_lock:
            self._waiting.add(wake)
        popped = None
        try:
            client = self._client()
            with self._errors():
                node = client.get_redis_connection(client.get_node_from_key(prefix))
                popped = node.bzpopmin([self.keys.marker(queue), wake], timeout=block + (1.0 if timed else 0))
                while timed and popped and popped[1] == HANDOFF and due_at - time.monotonic() > 0.001:
                    popped = node.bzpopmin(
                        [self.keys.marker(queue), wake], timeout=due_at - time.monotonic() + 1.0
                    )
        except redis.exceptions.ResponseError:  # MOVED: the slot moved; the next claim finds it
            popped = None
        finally:
            with self._waiting_lock:
                self._waiting.discard(wake)
            if alarm is not None:
                self._due_alarm().disarm(alarm)
        if timed:
            at_due_time = not popped or time.monotonic() >= due_at
            self._run_at(prefix, "wait_release", [waiter, timed.decode(), "1" if at_due_time else "0"])
        return popped is not None

    # -- liveness and recovery ----------------------------------------------------------------

    def forget_worker(self, node: str) -> None:
        with self._errors():
            pipe = self._client().pipeline(transaction=False)
            pipe.hdel(self.keys.workers, node)
            pipe.zrem(self.keys.workers_seen, node)
            pipe.execute()

    def recover(self, dead_after: float, max_deliveries: int) -> RecoverReport:
        """Relay the outbox entries of settles whose worker died before relaying them, then
        reap every queue's expired leases (one reap call per queue slot)."""
        self.relay_outboxes(older_than=self.config.dead_after)
        requeued = dead = 0
        for queue in self._queues():
            report = self._recover_queue(queue, max_deliveries)
            self._free_unique(queue)  # keys a settler died before releasing, a reap's dead letters
            requeued, dead = requeued + report.requeued, dead + report.dead
        self.roll_up_history()  # in the history's slot (the global one)
        return RecoverReport(requeued=requeued, dead=dead)

    def _recover_queue(self, queue: str, max_deliveries: int) -> RecoverReport:
        prefix = self.keys.of_queue(queue)
        # RedisBroker._reap calls self._run("reap", ...): run it in this queue's slot.
        self._scope.prefix = prefix
        try:
            report = self._reap(max_deliveries)
        finally:
            self._scope.prefix = None
        # the reap's own dead letters wrote their results into the outbox: relay them now
        self.relay_outboxes_of(prefix, suffix=":r")
        return report

    def _history_reaped(self, dead: int, keys: Keys | None = None) -> None:
        # The reap's dead letters are in the dead set of the queue slot it reaped.
        prefix = getattr(self._scope, "prefix", None)
        super()._history_reaped(dead, keys or (Keys(prefix) if prefix else None))

    def held_by(self, worker: WorkerRef) -> list[Delivery]:
        found = []
        for queue in self._queues():
            reply = self._run_at(self.keys.of_queue(queue), "held_by", [worker.node, str(worker.pid)])
            found += [self._delivery(row, worker) for row in reply]
        return sorted(found, key=lambda d: d.claimed_at)

    def extend(self, deliveries: Sequence[Delivery], ttl: float) -> None:
        by_queue: dict[str, list[Delivery]] = {}
        for delivery in deliveries:
            by_queue.setdefault(delivery.queue, []).append(delivery)
        for queue, group in by_queue.items():
            args: list[str | bytes] = [str(_ms(ttl)), str(len(group))]
            for delivery in group:
                args += [delivery.id, delivery.token]
            self._run_at(self.keys.of_queue(queue), "extend", args)
        self._renew_slots(deliveries, ttl)  # a slot's lease is its task's lease

    # -- chords and periodic tasks ------------------------------------------------------------

    def chord_join(self, join: ChordJoin, *, enqueue_callback: bool = True) -> bool:
        args: list[str | bytes] = [join.group_id, str(join.index), str(join.size), join.value]
        args.append(self._pack.result_ttl)
        complete, fired = self._run_at(self.keys.of_chord(join.group_id), "cluster_chord_join", args)
        if complete and enqueue_callback:
            fields = [f if isinstance(f, bytes) else f.encode() for f in _message_fields(join.callback)]
            self._relay_enqueue(fields, f"chord:{join.group_id}")
        return bool(fired)

    def claim_fire_time(self, name: str, fire_time: float, message: Message | None) -> bool:
        # The fire mark lives in the slot of the queue it sends to, so marking and sending
        # are one script; "last run" is read from every queue slot (last_fire_times).
        fields: list[str | bytes] = (
            ["0", "", "", "", "", b""] if message is None else ["1", *_message_fields(message)]
        )
        prefix = self.keys.prefix if message is None else self.keys.of_queue(message.queue)
        if message is not None:
            self._register([message.queue])
            if not self._take_unique([message]):  # its key is held: the fire time only
                fields = ["0", "", "", "", "", b""]
        ttl = str(_ms(self.options.periodic_record_ttl))
        claimed = bool(
            self._run_at(prefix, "periodic_claim", [name, str(round(fire_time * 1000)), ttl, *fields])
        )
        spec = None if message is None or message.duplicate_of else unique_of(message.headers)
        if not claimed and spec is not None:  # another scheduler sent this fire time
            self._release_unique(spec.key, message.id)  # type: ignore[union-attr]
        return claimed

    def last_fire_times(self, names: Sequence[str]) -> dict[str, float]:
        if not names:
            return {}
        prefixes = [self.keys.prefix, *(self.keys.of_queue(q) for q in self._queues())]
        with self._errors():
            pipe = self._client().pipeline(transaction=False)
            for prefix in prefixes:
                pipe.hmget(f"{prefix}periodic:last", list(names))
            rows = pipe.execute()
        found: dict[str, float] = {}
        for row in rows:
            for name, ms in zip(names, row, strict=True):
                if ms is not None:
                    found[name] = max(found.get(name, 0.0), float(ms) / 1000)
        return found

    # -- results, admin -----------------------------------------------------------------------

    def store_result(self, record: Any) -> None:
        self._run_at(
            self.keys.of_result(record.task_id),
            "result_store",
            [record.task_id, record.encode(), self._pack.result_ttl],
        )

    def store_result_fenced(self, record: Any, fence: int, *, keep_ready: bool = False) -> bool:
        from potatoq.brokers.records import fenced_payload

        args: list[str | bytes | int] = [
            record.task_id,
            fenced_payload(record, fence),
            self._pack.result_ttl,
            int(fence),
            int(keep_ready),
        ]
        return bool(self._run_at(self.keys.of_result(record.task_id), "result_store_fenced", args))

    # -- history and lifecycle ----------------------------------------------------------------

    def _history_settled(self, delivery: Delivery, outcome: Outcome) -> None:
        # No settle round trip to ride along (it is in a queue's slot): a busy thread sends
        # its records in a call of their own once `task_history_batch` of them are held or
        # the oldest is a second old, an idle one at once (wait).
        super()._history_settled(delivery, outcome)
        if self._history_buffer().due(self.config.history):
            self._history_flush()

    def _history_flush(self) -> None:
        # History records go to the global slot in a call of their own (the standalone
        # broker sends them in the settle's round trip, which is in a queue's slot here).
        pending = self._history_take()
        if pending:
            try:
                for command in self._history_commands(pending):
                    self._run(_script_name(command[1]), list(command[4:]))  # append, links
            except BaseException:
                self._history_buffer().restore(pending)
                raise

    def close(self) -> None:
        super().close()
        self._node_conns.close_all()

    def migrate(self) -> None:
        client = self._client()
        with self._errors():
            for script in cluster_scripts().values():
                client.execute_command("SCRIPT", "LOAD", script.source, target_nodes=RedisCluster.PRIMARIES)


def _disconnect_all(conns: dict[str, Connection]) -> None:
    for conn in conns.values():
        conn.disconnect()


def _check_cluster(client: Any) -> None:
    """Warn unless every master's ``maxmemory-policy`` is ``noeviction``."""
    infos = client.info("memory", target_nodes=RedisCluster.PRIMARIES)
    for node, info in infos.items():
        policy = info.get("maxmemory_policy")
        if policy is not None and str(policy) != "noeviction":
            log.warning(
                "Redis Cluster node %s has maxmemory-policy %r: eviction deletes queued tasks "
                "and results. Set maxmemory-policy noeviction.",
                node,
                str(policy),
            )
