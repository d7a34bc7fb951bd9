"""Bad input, on every broker worker processes can share: each gets a clear error or a dead
letter with its reason, the worker keeps running, and a good task sent afterwards completes.

Written straight into the broker's storage (each factory's ``inject_raw``, bypassing
``Message.encode``): garbage bytes, a truncated message, a message of an unknown version,
arguments that aren't a JSON list, and poisoned messages (a tagged Decimal, timedelta, UUID
or datetime that doesn't parse, a priority of 1e999, arguments nested 100,000 levels deep,
bytes that would forge a terminal or log line, a message over the worker's
``task_max_message_size``), each dead-lettered on its first delivery; ``dead list`` and the
dashboard then show them. Sent through the API: a task name no worker registered.
Refused at enqueue, before anything reaches the broker: a payload over
``task_max_message_size``, arguments JSON can't encode, hostile queue names (quotes,
semicolons, Lua pattern characters, a NUL, 10 kB). A worker asked to consume a hostile queue
name refuses to start, saying why.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from typing import Any

import pytest

from potatoq.brokers.base import WorkerRef
from potatoq.exceptions import InvalidName, MessageTooLarge, NotRegistered, SerializationError
from potatoq.message import Message

from .conftest import SHARED_BROKERS
from .harness import ROOT, FaultEnv, client, report, wait_for
from .undecodable import dashboard_shows_undecodable, dead_list_shows_undecodable

MAX_MESSAGE = 4096
#: task_max_message_size of the worker, the CLI and the dashboard in this test.
STORED_MAX = 256 * 1024  # above the 100,000-deep payload (200 kB), which must be parsed
HOSTILE_PAYLOAD = b"\x1b[2J\x1b[31m<script>alert(1)</script>\r\nWARNING forged line\xff" + b"x" * 20_000

HOSTILE_QUEUES = [
    "q'; DROP TABLE potatoq_jobs; --",
    'q"quoted"',
    "q;semicolon",
    "q%d+.*[^]$",  # Lua pattern characters
    "q\x00nul",
    "q with spaces",
    "q/../../etc",
    "q" * 10_240,
]


def _raw_cases() -> dict[str, tuple[bytes, str]]:
    """Name -> (bytes written into storage, a phrase the dead letter's reason must contain)."""
    good = Message(id=str(uuid.uuid4()), task="faults.add", args=(1, 2)).encode()
    body = json.loads(good)
    return {
        "garbage": (b"\xff\xfe\x00 definitely not a message", "not valid potatoq JSON"),
        "truncated": (good[: len(good) // 2], "not valid potatoq JSON"),
        "unknown version": (json.dumps({**body, "v": 99}).encode(), "unknown message version 99"),
        "arguments not a list": (json.dumps({**body, "a": "1, 2"}).encode(), "'a' must be a JSON list"),
        # Poisoned: valid JSON whose values don't parse as what they claim to be.
        "bad Decimal": (_with_arg(body, {"__pq__": "dec", "v": "abc"}), "bad 'dec' tagged value 'abc'"),
        "bad timedelta": (_with_arg(body, {"__pq__": "td", "v": 1e300}), "bad 'td' tagged value 1e+300"),
        "bad UUID": (_with_arg(body, {"__pq__": "u", "v": 5}), "bad 'u' tagged value 5"),
        "bad datetime": (_with_arg(body, {"__pq__": "dt", "v": "yesterday"}), "bad 'dt' tagged value"),
        "non-finite priority": (good.replace(b'"p":0', b'"p":1e999'), "number 1e999 is out of range"),
        # A valid message, but over the worker's task_max_message_size: refused unparsed.
        "over task_max_message_size": (
            Message(id=str(uuid.uuid4()), task="faults.add", args=("x" * STORED_MAX, 1)).encode(),
            f"over the {STORED_MAX}-byte limit (task_max_message_size); not decoded",
        ),
        # Bytes that would forge a terminal line or inject HTML if printed as they are, and
        # long enough that every listing must cut them short.
        "hostile bytes": (HOSTILE_PAYLOAD, "not valid potatoq JSON"),
        "nested 100,000 deep": (
            good.replace(b'"a":[1,2]', b'"a":[' + b"[" * 100_000 + b"]" * 100_000 + b"]"),
            "nested too deeply",
        ),
    }


def _with_arg(body: dict[str, Any], arg: dict[str, Any]) -> bytes:
    return json.dumps({**body, "id": str(uuid.uuid4()), "a": [arg, 1]}).encode()


@pytest.mark.slow
@pytest.mark.parametrize("fault_env", SHARED_BROKERS, indirect=True)
def test_bad_input_is_refused_or_dead_lettered_and_the_worker_keeps_going(fault_env: FaultEnv) -> None:
    env = fault_env
    env.conf["task_max_message_size"] = STORED_MAX
    inject_raw = env.factory.inject_raw  # type: ignore[attr-defined]
    with client(env) as proj:
        app = proj.app
        worker = env.worker("-c", "1")
        assert proj.add.delay(1, 1).get(timeout=30) == 2
        children = worker.children()

        # -- refused at enqueue, nothing stored ----------------------------------------------
        refused = 0
        app.conf.task_max_message_size = MAX_MESSAGE  # the default is 10 MiB
        with pytest.raises(
            MessageTooLarge, match=rf"'faults.add' is \d+ bytes; task_max_message_size is {MAX_MESSAGE}"
        ):
            proj.add.delay("x" * (2 * MAX_MESSAGE), 1)
        refused += 1
        app.conf.task_max_message_size = STORED_MAX
        with pytest.raises(SerializationError, match=r"argument 0 \(object\)"):
            proj.add.delay(object(), 1)
        refused += 1
        for name in HOSTILE_QUEUES:
            with pytest.raises(InvalidName, match="queue name"):
                proj.add.apply_async((1, 2), queue=name)
            refused += 1
            # the broker itself validates before any SQL, Lua or AMQP sees the name
            with pytest.raises(InvalidName):
                app.broker.enqueue([Message(id=str(uuid.uuid4()), task="faults.add", queue=name)])
            with pytest.raises(InvalidName):
                app.broker.claim([name], WorkerRef("tester", 1))
            with pytest.raises(InvalidName):
                app.broker.purge([name])
        # Dots: fine on brokers whose names are plain keys, refused where they carry meaning
        # (RabbitMQ's delay routing keys), naming why.
        try:
            dotted = proj.add.apply_async((1, 2), queue="jobs.v2")
        except InvalidName as exc:
            assert "no '.'" in str(exc), exc
            refused += 1
        else:
            assert app.broker.revoke(dotted.id) or app.broker.purge(["jobs.v2"]) >= 0
        assert sum(s.waiting for s in app.broker.queue_stats()) == 0, "a refused message was stored"

        # -- stored, then dead-lettered by the worker with the reason -----------------------
        expected: dict[str, str] = {}  # task id -> phrase its dead letter's reason must contain
        cases: dict[str, str] = {}  # task id -> which case
        injected: set[str] = set()
        for case, (raw, phrase) in _raw_cases().items():
            task_id = str(inject_raw(app.broker, "default", raw))
            expected[task_id], cases[task_id] = phrase, case
            injected.add(task_id)
        unknown = app.send_task("faults.no_such_task", args=(1,))
        expected[unknown.id], cases[unknown.id] = "not registered", "unknown task name"
        with pytest.raises(NotRegistered):
            unknown.get(timeout=30)

        # -- the worker is still the same processes, and a good task completes ----------------
        assert proj.add.delay(2, 3).get(timeout=30) == 5
        dead = wait_for(
            lambda: (letters := app.broker.list_dead()) and len(letters) >= len(expected) and letters,
            30,
            "the dead letters",
        )
        reasons = {d.id: d.reason for d in dead}
        assert set(reasons) == set(expected), reasons
        for task_id, phrase in expected.items():
            assert phrase in reasons[task_id], (phrase, reasons[task_id])
        first_delivery = {cases[d.id]: d.deliveries for d in dead if d.id in injected}
        assert set(first_delivery.values()) <= {1}, (
            f"dead-lettered after more than one delivery: {first_delivery}"
        )
        assert worker.alive() and worker.children() == children, "the worker or its child was replaced"

        # -- every listing shows them, escaped and cut short, and never fails -------------------
        hostile = next(task_id for task_id, case in cases.items() if case == "hostile bytes")
        dead_list_shows_undecodable(env, set(injected), hostile)
        dashboard_shows_undecodable(app, set(injected), hostile)

        # -- a hostile -Q is refused at start, naming the problem ----------------------------
        bad_q = subprocess.run(
            [
                sys.executable,
                "-m",
                "potatoq.cli",
                "-A",
                "tests.faults.proj",
                "worker",
                "-Q",
                "jobs;DROP TABLE x",
            ],
            cwd=ROOT,
            env=env.environ(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert bad_q.returncode != 0
        assert "invalid queue name" in bad_q.stderr, bad_q.stderr
        assert "Traceback" not in bad_q.stderr, bad_q.stderr
        report(
            "bad input",
            env.name,
            refused_at_enqueue=refused,
            dead_lettered=len(expected),
            reasons={cases[task_id]: reason[:90] for task_id, reason in reasons.items()},
            worker_restarts=0,
            good_task_after="completed",
        )
        assert worker.stop() == 0
