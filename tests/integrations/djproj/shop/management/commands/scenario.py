"""``manage.py scenario NAME``: send tasks inside transactions and print what was seen, as JSON.

* ``all``: commit, rollback, savepoint and opt-out cases, in one process;
* ``crash``: commit, then die (os._exit) before anything after COMMIT can run;
* ``conf``: the app's settings, broker and tasks, as the integration made them;
* ``drain [QUEUE…]``: run every queued task in this process (potatoq.testing.drain);
* ``wait ID…``: wait for those tasks' results, then ``report``;
* ``report ID…``: those tasks' states now, and the orders and events in the database.
"""

import json
import os
import sys
from typing import Any

from django.core.management.base import BaseCommand
from django.db import connection, transaction

from potatoq.contrib.django import get_app
from shop.models import Event, Order
from shop.tasks import audit, mark_paid

QUEUE = "shop"


def waiting() -> int:
    """Tasks in the queue as the broker sees them (its own connection: committed rows only)."""
    return sum(s.waiting + s.delayed for s in get_app().broker.queue_stats() if s.queue == QUEUE)


def rows_in_transaction(task_id: str) -> int | None:
    """The task's row as Django's connection sees it, when the broker is the same database."""
    app = get_app()
    from potatoq.contrib import same_database
    from potatoq.contrib.django.transaction import DjangoTransaction

    if not same_database(app.conf.broker_url_or_default(), DjangoTransaction("default").database_url):
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM potatoq_jobs WHERE id = %s", [task_id])
        return int(cursor.fetchone()[0])


class Rollback(Exception):
    pass


def commit_case() -> dict[str, Any]:
    before = waiting()
    with transaction.atomic():
        order = Order.objects.create(item="committed")
        result = mark_paid.delay(order.pk)
        inside = {"outside": waiting() - before, "in_transaction": rows_in_transaction(result.id)}
    return {"id": result.id, "order": order.pk, "inside": inside, "after": waiting() - before}


def rollback_case() -> dict[str, Any]:
    before = waiting()
    try:
        with transaction.atomic():
            order = Order.objects.create(item="rolled back")
            result = mark_paid.delay(order.pk)
            raise Rollback
    except Rollback:
        pass
    return {"id": result.id, "after": waiting() - before}


def savepoint_case() -> dict[str, Any]:
    before = waiting()
    with transaction.atomic():
        kept = Order.objects.create(item="outer")
        outer = mark_paid.delay(kept.pk)
        try:
            with transaction.atomic():
                dropped = Order.objects.create(item="inner")
                inner = mark_paid.delay(dropped.pk)
                raise Rollback
        except Rollback:
            pass
    return {"outer": outer.id, "inner": inner.id, "after": waiting() - before}


def opt_out_case() -> dict[str, Any]:
    before = waiting()
    try:
        with transaction.atomic():
            now = audit.delay("sent-now")  # enqueue_on_commit=False: sent at once
            sent_inside = waiting() - before
            follows = audit.delay_on_commit("follows")  # follows the transaction anyway
            raise Rollback
    except Rollback:
        pass
    return {"now": now.id, "follows": follows.id, "sent_inside": sent_inside, "after": waiting() - before}


class Command(BaseCommand):
    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("name")
        parser.add_argument("ids", nargs="*")

    def emit(self, data: Any) -> None:
        sys.stdout.write(json.dumps(data) + "\n")
        sys.stdout.flush()

    def handle(self, *args: Any, name: str, ids: list[str], **options: Any) -> None:
        app = get_app()
        if name == "all":
            self.emit(
                {
                    "commit": commit_case(),
                    "rollback": rollback_case(),
                    "savepoint": savepoint_case(),
                    "opt_out": opt_out_case(),
                    "timezone": app.conf.timezone,
                    "queue": app.conf.task_default_queue,
                }
            )
        elif name == "crash":
            with transaction.atomic():
                # Registered first, so it runs right after COMMIT, before anything else.
                transaction.on_commit(lambda: os._exit(17))
                order = Order.objects.create(item="crash")
                result = mark_paid.delay(order.pk)
                self.emit({"id": result.id, "order": order.pk})
        elif name == "conf":
            self.emit(
                {
                    "broker": app.conf.broker_url_or_default(),
                    "queue": app.conf.task_default_queue,
                    "timezone": app.conf.timezone,
                    "result_expires": app.conf.result_expires,
                    "tasks": sorted(t for t in app.tasks if not t.startswith("potatoq.")),
                    "main": app.main,
                }
            )
        elif name == "drain":
            from potatoq.testing import drain

            self.emit({"ran": drain(app, queues=ids or [QUEUE], fast_forward=False, timeout=20)})
        elif name in ("wait", "report"):
            states = {}
            for task_id in ids:
                r = app.AsyncResult(task_id)
                if name == "wait":
                    try:
                        r.get(timeout=float(os.environ.get("DJPROJ_WAIT", "30")), propagate=False)
                    except Exception as exc:  # noqa: BLE001 - reported, the test decides
                        states[task_id] = f"{type(exc).__name__}"
                        continue
                states[task_id] = r.state
            self.emit(
                {
                    "states": states,
                    "orders": {o.pk: [o.item, o.paid] for o in Order.objects.all()},
                    "events": sorted(e.name for e in Event.objects.all()),
                }
            )
        else:
            raise SystemExit(f"unknown scenario {name!r}")
