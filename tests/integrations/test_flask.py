"""Flask: settings from app.config, tasks inside app_context(), driven by Flask's test client."""

from __future__ import annotations

import asyncio
import uuid

import pytest

pytest.importorskip("flask")

from flask import Flask, current_app, g, has_app_context, jsonify

from potatoq import Potatoq
from potatoq.contrib.flask import init_app, settings_from_config
from potatoq.testing import drain


def make_flask(**config: object) -> tuple[Flask, Potatoq]:
    flask_app = Flask(f"flaskapp{uuid.uuid4().hex[:8]}")
    flask_app.config.update(GREETING="hello", **config)
    app = init_app(flask_app)

    @app.task(name="greet")
    def greet(name: str) -> str:
        g.seen = True  # g lives in the app context: fails outside one
        return f"{current_app.config['GREETING']}, {name}"

    @app.task(name="agreet")
    async def agreet(name: str) -> str:
        return f"{current_app.config['GREETING']} async, {name}"

    @app.task(name="flaky", bind=True, max_retries=1)
    def flaky(self: object) -> str:
        if getattr(flaky, "tries", 0) == 0:
            flaky.tries = 1  # type: ignore[attr-defined]
            raise self.retry(countdown=0)  # type: ignore[attr-defined]
        return current_app.name

    @flask_app.post("/greet/<name>")
    def send(name: str):  # noqa: ANN202
        return jsonify(id=greet.delay(name).id, aid=agreet.delay(name).id)

    @flask_app.get("/result/<task_id>")
    def result(task_id: str):  # noqa: ANN202
        return jsonify(value=app.AsyncResult(task_id).get(timeout=5))

    return flask_app, app


def test_tasks_sent_from_a_view_run_inside_the_app_context() -> None:
    flask_app, app = make_flask(POTATOQ={"broker_url": f"memory://flask-{uuid.uuid4().hex}"})
    client = flask_app.test_client()
    sent = client.post("/greet/ada").get_json()
    assert drain(app) == 2  # outside any app context: the integration pushes one per task
    assert not has_app_context()  # … and pops it
    assert client.get(f"/result/{sent['id']}").get_json() == {"value": "hello, ada"}
    assert client.get(f"/result/{sent['aid']}").get_json() == {"value": "hello async, ada"}


def test_a_retried_task_gets_a_fresh_app_context() -> None:
    flask_app, app = make_flask(POTATOQ={"broker_url": f"memory://flask-{uuid.uuid4().hex}"})
    result = app.tasks["flaky"].delay()
    assert drain(app) == 2
    assert not has_app_context()
    assert result.get(timeout=5) == flask_app.name


def test_settings_come_from_prefixed_keys_and_the_dicts() -> None:
    config = {
        "CELERY_TASK_DEFAULT_QUEUE": "from-prefix",
        "POTATOQ_RESULT_EXPIRES": 60,
        "CELERY": {"task_default_priority": 3},
        "POTATOQ": {"broker_url": "memory://x", "task_default_queue": "from-dict"},
        "SECRET_KEY": "not ours",
    }
    assert settings_from_config(config) == {
        "CELERY_TASK_DEFAULT_QUEUE": "from-prefix",
        "POTATOQ_RESULT_EXPIRES": 60,
        "task_default_priority": 3,
        "broker_url": "memory://x",
        "task_default_queue": "from-dict",
    }
    flask_app, app = make_flask(**config)
    assert app.conf.task_default_queue == "from-dict"
    assert app.conf.result_expires == 60
    assert app.conf.task_default_priority == 3
    assert app.conf.broker_url == "memory://x"
    assert flask_app.extensions["potatoq"] is app
    assert app.main == flask_app.import_name


def test_eager_mode_runs_inside_the_app_context_too() -> None:
    _, app = make_flask(CELERY_TASK_ALWAYS_EAGER=True, CELERY_BROKER_URL="memory://unused")
    assert app.tasks["greet"].delay("bob").get() == "hello, bob"


def test_direct_calls_run_inside_the_app_context() -> None:
    # Flask's Celery pattern (FlaskTask.__call__ wraps run() in app.app_context()): calling a
    # task as a function outside any request works and leaves no context behind.
    flask_app, app = make_flask(POTATOQ={"broker_url": f"memory://flask-{uuid.uuid4().hex}"})
    greet = app.tasks["greet"]
    assert not has_app_context()
    assert greet("ada") == "hello, ada"
    assert greet.s("bob")() == "hello, bob"
    assert not has_app_context()
    assert asyncio.run(app.tasks["agreet"]("eve")) == "hello async, eve"
    assert not has_app_context()


def test_a_direct_call_inside_the_app_context_keeps_it() -> None:
    flask_app, app = make_flask(POTATOQ={"broker_url": f"memory://flask-{uuid.uuid4().hex}"})

    @app.task(name="sees_g")
    def sees_g() -> str:
        return str(g.marker)

    with flask_app.app_context():
        g.marker = "set by the caller"
        assert sees_g() == "set by the caller"  # the same context, not a fresh one


def test_apply_runs_inside_the_app_context() -> None:
    _, app = make_flask(POTATOQ={"broker_url": f"memory://flask-{uuid.uuid4().hex}"})
    assert app.tasks["greet"].apply(("ann",)).get() == "hello, ann"
    assert app.tasks["agreet"].apply(("ann",)).get() == "hello async, ann"
    assert not has_app_context()


def test_init_app_configures_an_existing_app() -> None:
    app = Potatoq("existing", broker="memory://before", set_as_current=False)
    flask_app = Flask("existing")
    flask_app.config["POTATOQ"] = {"broker_url": f"memory://after-{uuid.uuid4().hex}"}
    assert init_app(flask_app, app) is app
    assert app.conf.broker_url.startswith("memory://after-")

    @app.task(name="where")
    def where() -> str:
        return current_app.name

    r = where.delay()
    drain(app)
    assert r.get(timeout=5) == "existing"
