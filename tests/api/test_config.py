"""Settings, Celery-name translation, routing and signals."""

from __future__ import annotations

import re
import types
import uuid
from typing import Any

import pytest

from potatoq import Potatoq, signals
from potatoq.config import DEFAULT_BROKER_URL
from potatoq.exceptions import ImproperlyConfigured
from potatoq.testing import drain


def test_defaults_are_the_safe_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POTATOQ_BROKER_URL", raising=False)
    conf = Potatoq("p").conf
    assert conf.broker_url_or_default() == DEFAULT_BROKER_URL == "sqlite:///potatoq.sqlite3"
    assert conf.result_expires == 86400
    assert conf.task_default_queue == "default" and conf.task_default_priority == 0
    assert conf.task_time_limit == 1800
    assert conf.task_max_retries == 3 and conf.task_retry_backoff == 10 and conf.task_retry_backoff_max == 600
    assert conf.task_retry_jitter is True and conf.task_max_deliveries == 5
    assert conf.worker_max_tasks_per_child is None and conf.worker_max_memory_per_child is None
    assert conf.worker_shutdown_timeout == 25 and conf.worker_heartbeat_interval == 5
    assert conf.worker_dead_after == 60 and conf.dead_letter_max == 10000
    assert conf.dead_letter_ttl == 30 * 86400


def test_broker_url_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POTATOQ_BROKER_URL", "memory://from-env")
    assert Potatoq("p").conf.broker_url_or_default() == "memory://from-env"


def test_old_uppercase_and_prefixed_names_are_translated() -> None:
    app = Potatoq("p")
    app.config_from_object(
        {
            "BROKER_URL": "memory://x",
            "CELERY_RESULT_BACKEND": "broker",
            "CELERYD_CONCURRENCY": 3,
            "CELERY_TASK_SERIALIZER": "json",
            "POTATOQ_TASK_DEFAULT_QUEUE": "jobs",
        }
    )
    assert app.conf.broker_url == "memory://x"
    assert app.conf.result_backend == "broker"
    assert app.conf.worker_concurrency == 3
    assert app.conf.task_default_queue == "jobs"


def test_config_from_object_with_namespace() -> None:
    settings = types.SimpleNamespace(
        CELERY_BROKER_URL="memory://ns", CELERY_TASK_ALWAYS_EAGER=True, DEBUG=True, OTHER_THING=1
    )
    app = Potatoq("p")
    app.config_from_object(settings, namespace="CELERY")
    assert app.conf.broker_url == "memory://ns" and app.conf.task_always_eager is True
    assert "DEBUG" not in app.conf and "debug" not in app.conf


def test_config_from_dotted_path() -> None:
    app = Potatoq("p")
    app.config_from_object("tests.api.celeryconfig")
    assert app.conf.task_default_queue == "from-module"


def test_celery_workaround_settings_are_accepted_and_ignored(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG", logger="potatoq.config")
    app = Potatoq("p", task_acks_late=True, worker_prefetch_multiplier=1)
    assert app.conf.task_acks_late is True
    assert "not needed with potatoq" in caplog.text


def test_unknown_broker_scheme_is_a_clear_error() -> None:
    app = Potatoq("p", broker="kafka://secret:pw@host/")
    with pytest.raises(ImproperlyConfigured, match="unknown broker URL scheme") as info:
        _ = app.broker
    assert "pw" not in str(info.value)


@pytest.fixture
def routed() -> Potatoq:
    return Potatoq("r", broker=f"memory://{uuid.uuid4().hex}")


def _queue_of(app: Potatoq, name: str, **options: Any) -> str:
    return app.make_message(name, (), {}, **options).queue


def test_routes_dict_glob_and_regex(routed: Potatoq) -> None:
    routed.conf.task_routes = {
        "feed.tasks.import_feed": {"queue": "feeds"},
        "web.*": "web",
        re.compile(r"(image|video)\.tasks\..*"): {"queue": "media"},
    }
    assert _queue_of(routed, "feed.tasks.import_feed") == "feeds"
    assert _queue_of(routed, "web.tasks.render") == "web"
    assert _queue_of(routed, "video.tasks.encode") == "media"
    assert _queue_of(routed, "other.task") == "default"
    assert _queue_of(routed, "web.tasks.render", queue="explicit") == "explicit"


def test_routes_ordered_list_of_pairs(routed: Potatoq) -> None:
    routed.conf.task_routes = (
        [
            ("feed.tasks.*", {"queue": "feeds"}),
            ("web.tasks.*", {"queue": "web"}),
            (re.compile(r"(video|image)\.tasks\..*"), {"queue": "media"}),
        ],
    )
    assert _queue_of(routed, "feed.tasks.x") == "feeds"
    assert _queue_of(routed, "image.tasks.x") == "media"


def route_task(name: str, args: Any, kwargs: Any, options: Any, task: Any = None, **kw: Any) -> Any:
    if name.startswith("video."):
        return {"queue": "video", "priority": 7}
    return None


def test_router_function_and_dotted_path(routed: Potatoq) -> None:
    routed.conf.task_routes = (route_task,)
    message = routed.make_message("video.encode", (), {})
    assert (message.queue, message.priority) == ("video", 7)
    routed.conf.task_routes = ("tests.api.test_config.route_task",)
    assert _queue_of(routed, "video.encode") == "video"


def test_task_queue_option_beats_routes(routed: Potatoq) -> None:
    routed.conf.task_routes = {"*": "routed"}

    @routed.task(queue="own")
    def t() -> None:
        return None

    assert _queue_of(routed, t.name) == "own"


def test_signals_fire_with_sender(app: Potatoq) -> None:
    seen: list[str] = []

    @app.task
    def t(x: int) -> int:
        return x

    @signals.task_success.connect(sender=t)
    def on_success(sender: Any = None, result: Any = None, **kw: Any) -> None:
        seen.append(f"success:{result}")

    @signals.task_prerun.connect
    def on_prerun(sender: Any = None, task_id: str | None = None, **kw: Any) -> None:
        seen.append("prerun")

    try:
        t.delay(3)
        drain(app)
    finally:
        signals.task_success.disconnect(on_success, sender=t)
        signals.task_prerun.disconnect(on_prerun)
    assert seen == ["prerun", "success:3"]


def test_a_failing_receiver_never_breaks_the_task(app: Potatoq) -> None:
    @app.task
    def t() -> int:
        return 1

    def broken(**kw: Any) -> None:
        raise RuntimeError("receiver bug")

    signals.task_prerun.connect(broken)
    try:
        r = t.delay()
        drain(app)
    finally:
        signals.task_prerun.disconnect(broken)
    assert r.get(timeout=1) == 1


def test_annotations_set_task_options(routed: Potatoq) -> None:
    routed.conf.task_annotations = {"*": {"rate_limit": "10/s"}}

    @routed.task
    def t() -> None:
        return None

    assert t.rate_limit == "10/s"


def test_add_periodic_task(routed: Potatoq) -> None:
    @routed.task
    def tick() -> None:
        return None

    name = routed.add_periodic_task(10.0, tick.s(), name="every-10")
    assert routed.conf.beat_schedule[name]["task"] == tick.name
