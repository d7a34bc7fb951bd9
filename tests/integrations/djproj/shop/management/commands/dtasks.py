"""``manage.py dtasks send|wait|results …``: django.tasks through potatoq's backend, as JSON."""

import datetime as dt
import json
import sys
from typing import Any

from django.core.management.base import BaseCommand
from django.db import transaction
from django.tasks import default_task_backend
from django.tasks.exceptions import TaskResultDoesNotExist

from potatoq.contrib.django import get_app
from shop import jobs
from shop.models import Order
from shop.tasks import mark_paid


class Rollback(Exception):
    pass


def describe(result: Any) -> dict[str, Any]:
    return {
        "status": str(result.status),
        "value": result.return_value if result.status == "SUCCESSFUL" else None,
        "errors": [e.exception_class_path for e in result.errors],
        "enqueued_at": result.enqueued_at.isoformat() if result.enqueued_at else None,
        "started_at": result.started_at.isoformat() if result.started_at else None,
        "finished_at": result.finished_at.isoformat() if result.finished_at else None,
        "attempts": result.attempts,
        "task": result.task.module_path,
        "priority": result.task.priority,
        "queue": result.task.queue_name,
        "args": result.args,
    }


class Command(BaseCommand):
    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("action")
        parser.add_argument("ids", nargs="*")

    def handle(self, *args: Any, action: str, ids: list[str], **options: Any) -> None:
        out: dict[str, Any] = {}
        if action == "send":
            run_after = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1.5)
            out["low1"] = jobs.low.enqueue(1).id
            out["low2"] = jobs.low.enqueue(2).id
            out["high"] = jobs.high.enqueue(3).id
            out["async"] = jobs.async_double.enqueue(21).id
            out["attempt"] = jobs.attempt.enqueue().id
            out["boom"] = jobs.boom.enqueue().id
            later = jobs.later.using(run_after=run_after).enqueue()
            out["later"] = later.id
            out["run_after"] = run_after.isoformat()
            out["shared"] = mark_paid.delay(Order.objects.create(item="shared").pk).id
            with transaction.atomic():
                out["committed"] = jobs.high.enqueue(7).id
            try:
                with transaction.atomic():
                    out["rolled_back"] = jobs.high.enqueue(8).id
                    raise Rollback
            except Rollback:
                pass
            out["ready"] = describe(default_task_backend.get_result(out["high"]))
            out["later_ready"] = describe(later)
            try:
                default_task_backend.get_result(out["rolled_back"])
                out["rolled_back_found"] = True
            except TaskResultDoesNotExist:
                out["rolled_back_found"] = False
        elif action == "wait":
            app = get_app()
            for task_id in ids:
                app.AsyncResult(task_id).get(timeout=30, propagate=False)
            out = {task_id: describe(default_task_backend.get_result(task_id)) for task_id in ids}
        elif action == "results":
            for task_id in ids:
                try:
                    out[task_id] = describe(default_task_backend.get_result(task_id))
                except TaskResultDoesNotExist:
                    out[task_id] = None
        sys.stdout.write(json.dumps(out) + "\n")
