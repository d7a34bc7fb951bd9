"""A separate process for the RabbitMQ tests that need one to die for real (SIGKILL).

    python -m tests.brokers.rabbitmq.child MODE CONFIG_JSON

CONFIG_JSON holds ``url``, ``prefix`` and ``max_deliveries``, and optionally ``backend``
(a result backend URL, with ``backend_options`` its transport options, or
``backend_prefix`` a Redis key prefix) and ``limit_lease``. Modes:

* ``claim-and-die``: claim one task from ``default``; print ``{"id", "deliveries"}``
  (or ``{}`` if none comes within 5 s) and SIGKILL itself while holding it;
* ``claim-and-hold``: claim one task, print the delivery as JSON, then sleep until killed;
* ``hold-lease``: compete for the scheduler token; print ``leader`` once held, then sleep.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from potatoq import serialization
from potatoq.brokers import create_broker
from potatoq.brokers.base import BrokerConfig, WorkerRef


def main() -> None:
    mode, raw = sys.argv[1], sys.argv[2]
    options = json.loads(raw)
    backend = None
    if options.get("backend"):  # what limits and unique keys need on RabbitMQ
        backend_options = options.get("backend_options")
        if backend_options is None:
            backend_options = {"global_keyprefix": options["backend_prefix"]}
        backend = create_broker(BrokerConfig(url=options["backend"], transport_options=backend_options))
    transport: dict[str, object] = {"queue_prefix": options["prefix"]}
    if "limit_lease" in options:
        transport["limit_lease"] = options["limit_lease"]
    broker = create_broker(
        BrokerConfig(
            url=options["url"],
            transport_options=transport,
            max_deliveries=options.get("max_deliveries", 5),
            result_backend=backend,
        )
    )
    worker = WorkerRef("child", os.getpid())
    if mode in ("claim-and-die", "claim-and-hold"):
        deadline = time.monotonic() + 5
        delivery = broker.claim(["default"], worker)
        while delivery is None and time.monotonic() < deadline:
            broker.wait(["default"], 0.5)
            delivery = broker.claim(["default"], worker)
        if delivery is None:
            print("{}", flush=True)
            return
        if mode == "claim-and-die":
            print(json.dumps({"id": delivery.id, "deliveries": delivery.deliveries}), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        print(serialization.dumps(delivery.to_json(), where="delivery"), flush=True)
    elif mode == "hold-lease":
        while not broker.scheduler_lease():  # type: ignore[attr-defined]
            time.sleep(0.05)
        print("leader", flush=True)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
