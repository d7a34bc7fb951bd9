"""userguide/routing.rst (basics and routers): ``task_routes`` as a dict with globs and
``re.compile`` keys, as ordered ``(pattern, route)`` items, router functions and dotted
paths, ``queue=`` at call time, priorities in routes, and workers started with ``-Q``.

One worker consumes ``-Q default,feeds,web,media,video`` (the guide's "server z" also
taking regular tasks), another only ``-Q feeds``.
"""

from __future__ import annotations

import re

import pytest

from .conftest import World

APP = "tests.celery_guide.proj"
TIMEOUT = 20

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def proj(world: World):
    world.worker(APP, "-l", "INFO", "-c", "1", "-Q", "default,feeds,web,media,video")
    world.worker(APP, "-l", "INFO", "-c", "1", "-Q", "feeds")
    from tests.celery_guide.proj.celery import app

    for _ in world.point(app):
        yield app
        app.conf.task_routes = None


@pytest.fixture
def routes(proj):
    yield proj.conf
    proj.conf.task_routes = None
    proj.conf.task_default_queue = "default"


def _queue(res):
    return res.get(timeout=TIMEOUT)[1]


def test_automatic_routing_by_name(routes):
    from tests.celery_guide.proj.routes import elsewhere, import_feed

    routes.task_routes = {"feed.tasks.import_feed": {"queue": "feeds"}}
    assert _queue(import_feed.delay()) == "feeds"
    assert _queue(elsewhere.delay()) == "default"


def test_glob_routes(routes):
    from tests.celery_guide.proj.routes import import_feed

    routes.task_routes = {"feed.tasks.*": {"queue": "feeds"}}
    assert _queue(import_feed.delay()) == "feeds"


def test_ordered_items_with_a_regular_expression(routes):
    from tests.celery_guide.proj.routes import elsewhere, encode, import_feed, render, resize

    routes.task_routes = (
        [
            ("feed.tasks.*", {"queue": "feeds"}),
            ("web.tasks.*", {"queue": "web"}),
            (re.compile(r"(video|image)\.tasks\..*"), {"queue": "media"}),
        ],
    )
    assert _queue(import_feed.delay()) == "feeds"
    assert _queue(render.delay()) == "web"
    assert _queue(encode.delay()) == "media"
    assert _queue(resize.delay()) == "media"
    assert _queue(elsewhere.delay()) == "default"


def test_worker_with_only_the_feeds_queue(proj, world: World, routes):
    from tests.celery_guide.proj.routes import import_feed

    routes.task_routes = {"feed.tasks.*": {"queue": "feeds"}}
    results = [import_feed.delay() for _ in range(6)]
    feed_only = world.workers[1].proc.pid
    assert all(r.get(timeout=TIMEOUT)[1] == "feeds" for r in results)
    # The other worker consumes feeds too and may have run all six before this one came up:
    # wait for its banner rather than read a log it hasn't written yet.
    log = world.workers[1].wait_output("queues feeds")
    assert "tests.celery_guide.proj.routes.elsewhere" not in log
    assert feed_only


def test_changing_the_default_queue(routes):
    from tests.celery_guide.proj.routes import elsewhere

    routes.task_default_queue = "web"
    assert _queue(elsewhere.delay()) == "web"


def test_queue_and_routing_key_at_call_time(routes):
    from tests.celery_guide.proj.routes import import_feed

    routes.task_routes = {
        "feeds.tasks.import_feed": {
            "queue": "feed_tasks",
            "routing_key": "feed.import",
        },
    }
    res = import_feed.apply_async(args=["http://cnn.com/rss"], queue="feeds", routing_key="feed.import")
    assert _queue(res) == "feeds"


def test_router_function_by_object_and_by_name(routes):
    from tests.celery_guide.proj.routes import compress_video, route_task

    routes.task_routes = (route_task,)
    assert _queue(compress_video.delay()) == "video"
    routes.task_routes = ("tests.celery_guide.proj.routes.route_task",)
    assert _queue(compress_video.delay()) == "video"
    routes.task_routes = [
        route_task,
        {
            "myapp.tasks.compress_video": {
                "queue": "media",
                "routing_key": "video.compress",
            }
        },
    ]
    assert _queue(compress_video.delay()) == "video"  # the first router to answer wins


def test_priority_in_a_route_and_at_call_time(routes, proj):
    from tests.celery_guide.proj.routes import compress_video

    routes.task_routes = {
        "myapp.tasks.compress_video": {
            "queue": "video",
            "routing_key": "video.compress",
            "priority": 10,
        },
    }
    assert proj.make_message(compress_video.name).priority == 10
    assert proj.make_message(compress_video.name, priority=0).priority == 0
    assert _queue(compress_video.apply_async(priority=0)) == "video"


def test_destination_order_call_then_task_then_routes(proj, routes):
    from tests.celery_guide.proj.routes import import_feed

    routes.task_routes = {"feed.tasks.*": {"queue": "feeds"}}
    type(import_feed).queue = "web"
    try:
        assert proj.make_message(import_feed.name).queue == "web"  # the task attribute
        assert proj.make_message(import_feed.name, queue="media").queue == "media"  # the call
    finally:
        type(import_feed).queue = None
