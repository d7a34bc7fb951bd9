"""The Redis / Valkey broker: every state change is one Lua script call.

Storage layout. Every key starts with ``global_keyprefix`` (transport option, default
``potatoq``) and a colon; :class:`~.keys.Keys` builds them (and ``lua/_lib.lua`` builds the
same names inside the scripts)::

    q:<queue>:ready     ZSET  task id -> -priority·2^40 + seq    priorities, FIFO within one
    q:<queue>:delayed   ZSET  task id -> due time (ms)           ETA, countdown, retry backoff
    q:<queue>:active    ZSET  task id -> lease deadline (ms)     running tasks
    q:<queue>:marker    ZSET  one member                         wake-up: idle workers BZPOPMIN it
    q:<queue>:timer     STRING  "<due ms> <waiter>", expiring then  the one waiter timing the next due task
    job:<id>            HASH  payload, queue, priority, seq, state, deliveries, token, node,
                              pid, claimed, ready_at, due
    held:<node>:<pid>   SET   ids that worker process holds: :meth:`RedisBroker.held_by`
    result:<id>         STRING  encoded ResultRecord, PX result_expires
    waiting:<id>        STRING  how many ``.get()`` callers wait (with expiry)
    notify:<id>         LIST    one element per waiter, pushed when the result is written
    dead                ZSET  id -> died at (ms) * 1000 + counter (same-ms deaths stay ordered),
                              capped by dead_letter_max and dead_letter_ttl
    dead:payload        HASH  id -> the payload as delivered
    dead:info           HASH  id -> JSON {queue, reason, deliveries, priority, died (ms)}
    chord:<group>       HASH  p:<index> -> part value, n (parts seen), fired
    periodic:<name>:<ms>  STRING  SET NX: one sender per fire time
    periodic:last       HASH  entry name -> newest fire time sent (ms), for "last run"
    paused              HASH  queue -> paused since (epoch s): workers leave it out of claims
    uq:<key>            STRING  id of the task holding a unique key (PX unique_for), see unique.py
    workers             HASH  node -> WorkerInfo;  workers:seen  ZSET node -> last heartbeat (ms);
                              a node silent for 2 x worker_dead_after is forgotten
    queues              SET   every queue name ever used (stats, recovery)
    seq                 STRING  the ready-order counter (below 2^40: renumbered at the limit)
    wake:<pid>:<id>:<thread>  ZSET  private per waiting thread, for :meth:`interrupt`
    history             STREAM  task-history records (compact: payload p + settle fields, or r: JSON;
                                  history.py), MAXLEN ~ task_history_max_count
    history:n:<name>    STREAM  index: the ids of history entries of that task name (field i, empty)
    history:s:<state>   STREAM  index by state;  history:q:<queue>  STREAM  index by queue
    history:indexes     SET   every index key (trimmed to history's oldest id with it: history.py)

Why this shape:

* A task is always in exactly one of ready / delayed / active, and its hash says which;
  each transition (enqueue, claim, settle, reap, revoke) is one script, so there is no
  moment where a task is in no set (no pop-then-push gap) and no second round trip.
* Claims are leases: ``active`` is scored by deadline = now + ``worker_dead_after``; the
  supervisor extends running leases and reaps expired ones (:meth:`RedisBroker.recover`).
  Each claim also writes a random fencing token: settle compares it, so a worker whose
  lease was reaped can never ack the newer delivery.
* Due delayed tasks are promoted by ``claim`` itself; no poller is needed. One idle waiter
  per queue (the queue's timer, ``wait_plan.lua``) bounds its block by the earliest due
  time; the others block for their whole timeout, so one waiter wakes per due task.
* A claim whose reply was lost is looked up by its fencing token (``claim_lost.lua``)
  before it is sent again, so it never claims a second task.
* A reap that finds a task at its delivery limit leases it to the caller, which settles it
  with the worker's failure outcome (``Broker.lost_outcome``: chord join, errbacks).
* Key names can't collide: queue names are validated (letters, digits, ``_ - : .``), every
  queue key is ``q:`` + name + one of five fixed suffixes none of which ends another, so
  ``q:X:S`` = ``q:Y:T`` only when X = Y and S = T; every other kind has its own first
  segment.
* Time is the server's (``TIME`` inside the scripts), so leases, due times and heartbeats
  are judged by one clock however the workers' clocks drift. ETAs are absolute wall-clock
  times chosen by the caller and compared with that same server clock.
* Priorities are exact for ``-8190 <= priority <= 8190`` (beyond, they are clamped): the
  score must stay an exact integer in a double, and ``seq`` takes the low 40 bits (at
  2^40 the waiting tasks are renumbered from 1 in order).

A ``redis://`` URL pointed at a cluster-mode server is refused (its layout spans slots):
use ``redis+cluster://`` (below). ``maxmemory-policy`` other than ``noeviction`` is warned
about, because eviction silently deletes tasks.

Redis Cluster / Valkey cluster (``redis+cluster://host:port,host:port/``, ``cluster.py``).
Cluster scripts may touch keys of one hash slot only. The cluster layout keeps the layout
above but gives every kind of key a hash tag, so that one transition touches one slot:

* Queue slot ``{<prefix>:q:<queue>}``: the scripts above run unchanged with the prefix
  ``{<prefix>:q:<queue>}:``, so the queue's sets, its jobs' hashes, its ``held`` sets, its
  ``seq``, its dead letters and its outbox all hash to one slot. Enqueue (grouped by queue),
  claim (one queue per call), extend, reap and the settle of a task are each one
  single-slot script, as BullMQ does it.
* Result slot ``{<prefix>:r:<id>}``: ``result``/``waiting``/``notify`` of one task, so
  ``.get()`` finds them by id alone and blocks on its own ``notify`` list.
* Chord slot ``{<prefix>:c:<group>}``: the chord's counter hash.
* Global slot ``{<prefix>}``: ``workers``, ``paused``, ``queues`` (every queue name, the
  list the "every queue" calls walk), the task history streams.

What crosses slots goes through the outbox, at least once, without a multi-slot
transaction. The settle script (``lua/_cluster.lua`` replaces the helpers that would write
elsewhere) removes the task and appends to ``outbox:<id>:<token>`` in the queue's slot, in
the same call: the result (stamped with the settle's server time), the chord join, the
follow-ups (chain steps, callbacks, errbacks, a retry into another queue). The settling
worker relays the entry right after (``RedisClusterBroker._relay``) and deletes it; a worker
that dies in between leaves it listed in the queue's ``outbox`` ZSET, where any worker's
recovery round (``recover``) relays it once it is older than ``worker_dead_after``. Every
relayed operation is idempotent: a result is written unless a newer stamp is stored (a late
relay never hides a later run's result), a chord part is recorded once per index (and the
callback enqueued once per group, by a ``relayed:`` mark in its queue's slot), a follow-up
is enqueued once per entry and position (same mark). Periodic fire marks live in the slot
of the queue they send to, so marking and sending stay one script; "last run" reads every
queue slot. What must look at every queue (``queue_stats``, ``purge``, dead letters,
``held_by``, ``queued_task``/``revoke`` by id, the dashboard, ``/metrics``) walks the
``queues`` set, one call per queue slot, which the cluster client sends to that slot's
master. A worker idle on several queues blocks on one queue's marker at a time (markers of
different slots can't be awaited in one ``BZPOPMIN``): at most a second each, so one
extra call a second per idle thread. A claim is not looked up by its token after a lost
reply (``claim_lost.lua``) as on a single server: the cluster client resends a command
that failed on a connection error, so a claim whose reply was lost may lease a task
nobody runs until its lease runs out (late, not lost).

Limits and unique keys on a cluster (``cluster_limits.py``, ``cluster_unique.py``). A key
is shared by every queue its tasks go to, so it can't live in a queue's slot: each key has
a slot of its own, ``{<prefix>:k:<key>}`` (concurrency and rate) or ``{<prefix>:u:<key>}``
(unique), kept by the RabbitMQ broker's scripts (``rabbitmq/lua``, loaded from their files
unchanged: slots are holders with leases, unique keys a holder id with a TTL; for rates
its ``rate_set``/``rate_usage``, but ``cluster_rate_take.lua`` takes the tokens, at claim,
never reserving one ahead, so late workers can't burst). The queue slot's scripts read
none of these headers on a cluster (``_cluster.lua`` replaces ``limit_of``, ``rate_of``,
``unique_of``). Decision: no per-queue fast path for a key used by one queue only,
because a key can't know which queues its tasks will reach (a retry, a retried dead
letter, a route changed) and two counters for one key would let it run over its limit;
the cost is one call to the key's slot, paid only by limited tasks. The steps:

* claim: the queue's claim script, then ``slot_take`` / ``cluster_rate_take`` in the key's
  slot. A task that gets no slot or token goes back to its queue's delayed set
  (``cluster_limit_defer.lua``: delivery count back down, out of ``active`` and ``held``),
  listed in ``lwait:<s|r>:<key>`` of its queue's slot (``lwaits`` lists those), and the
  claim goes on to the next task. A slot's waiter is due again after 1 s, 1 s more per
  try (10 s at most); a rate's when its token is expected, one token after the last task
  told to wait (``rw`` in its hash keeps its place in line when it comes back early: read
  back by ``cluster_rate_waited.lua``); a rate set at run time makes them due at once.
* settle: the queue's settle script, then ``slot_release`` and ``cluster_limit_wake.lua``,
  which makes the task of that queue that waited longest on the key due now. A slot's
  lease is ``worker_dead_after``, renewed by ``extend`` with the task's lease: a killed
  worker's slot runs out when its task may be reaped. ``set_limit``/``set_rate`` wake
  every waiter.
* unique: ``unique_take`` before the queue's enqueue script; the scripts that remove a task
  append ``<id>, <key>`` to the queue slot's ``uqfree`` LIST (``_cluster.lua``'s
  ``unique_release``), which the caller pops right after (releasing keys whose task is gone
  from the queue: a retry keeps its key) and every recovery round pops for each queue.

The standalone layout and its speed are unchanged: the cluster scripts are a second build
of the same files (``scripts.cluster_scripts()``, built on first use), used only by
``RedisClusterBroker``.

Claim, settle, wake-up: ``claim.lua`` promotes the queues' due delayed tasks, pops the best
``ready`` member into ``active`` with a lease deadline and a new token, and adds it to the
worker's ``held`` set. A settle (``complete``/``retry``/``requeue``/``dead_letter.lua``, or
``settle_and_claim.lua`` for a busy worker) checks the token, removes the task, and writes
its result, chord join and follow-ups in the same call. An enqueue ``ZADD``s the queue's
``marker``; an idle worker's ``wait`` blocks in ``BZPOPMIN`` on the markers (the timer waiter
until the earliest due time), and a claim re-arms a marker while work remains, so no
wake-up is lost.

Concurrency limits (``potatoq/brokers/limits.py``): ``claim`` reads a job's limit key and
max from its hash (``lk``/``lm``, filled from the payload's ``cl`` header on first claim;
a plain byte search first, so unlimited payloads are never decoded). If the key's count in
``limits:running`` is below its max (``limits:override`` wins), it takes the slot;
otherwise the job moves to ``limit:<key>:parked`` with its ready score and the claim goes
on to the next task, so nothing waits behind it. ``release`` (every end of a run: settle,
requeue, reap) gives the slot back and moves one parked job back to its ready set, arming
its queue's marker: the wake-up chain, no polling. Runtime changes: ``limit_set.lua``.
These keys span queues: on a cluster they live in slots of their own (above).

Global rate limits: ``claim`` also reads a job's rate key, ms per token and burst
(``rk``/``ri``/``rb``, from the ``rl`` header on first claim) and keeps GCRA per key in
``rates:tat``: a key has a token when ``tat - (burst - 1) * ms_per_token <= now`` (server
clock), and taking it moves ``tat`` to ``max(tat, now) + ms_per_token``; all in the claim
script, so it is atomic. A job without a token goes to its queue's ``delayed`` set at the
time its token is expected (one token after the last job moved, ``rates:defer``), marked
``rw`` and listed in ``rate:<key>:waiting``; it arms the marker when it is now the first
due, so the timer waiter sleeps until then (no polling), and ``promote`` brings it back.
No delivery is counted. Overrides: ``rates:override``, set by ``rate_set.lua``, which also
makes the key's waiting jobs due now; usage: ``rate_usage.lua``.

Modules: ``broker`` (the class), ``options`` (transport options, URL and server checks),
``keys`` (key names), ``scripts`` (loads ``lua/*.lua`` with the ``_lib.lua`` helpers each
needs) and ``packing`` (script arguments and the hiredis command path); ``cluster`` (the
Redis Cluster broker and its outbox relay).
"""

from __future__ import annotations

from .broker import RedisBroker
from .keys import Keys
from .options import RedisOptions, cluster_enabled, redis_url

__all__ = ["Keys", "RedisBroker", "RedisOptions", "cluster_enabled", "redis_url"]
