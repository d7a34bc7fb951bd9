"""Several RabbitMQ nodes in ``broker_url`` (Celery's ``;`` spelling, or a list): how they
are read, which lists are refused, and that the client goes on to the next node when one
doesn't answer. The failover of a running worker is in tests/faults/test_rabbit_cluster.py.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from potatoq import Potatoq
from potatoq.brokers.base import WorkerRef
from potatoq.brokers.rabbitmq.nodes import split_nodes
from potatoq.exceptions import ImproperlyConfigured
from potatoq.urls import normalize_url
from tests import services
from tests.faults.harness import free_port


@pytest.mark.parametrize(
    ("given", "read"),
    [
        ("amqp://h1:5672//;amqp://h2:5672//", "amqp://h1:5672/%2F;amqp://h2:5672/%2F"),
        ("pyamqp://u:p@h1//; pyamqp://h2//;", "amqp://u:p@h1/%2F;amqp://h2/%2F"),
        ("amqps://h1/vh;amqps://h2/vh", "amqps://h1/vh;amqps://h2/vh"),
        ("sqlite:///a;b.sqlite3", "sqlite:///a;b.sqlite3"),  # only AMQP URLs are lists
    ],
)
def test_each_node_url_is_read_in_celery_spelling(given: str, read: str) -> None:
    assert normalize_url(given) == read


def test_a_list_in_broker_url_is_the_same_as_the_semicolon_spelling() -> None:
    app = Potatoq("nodes", broker=["amqp://h1:5672//", "amqp://h2:5672//"])
    assert app.conf.broker_url_or_default() == "amqp://h1:5672//;amqp://h2:5672//"
    app.conf.broker_url = ["amqp://h1//", 5]
    with pytest.raises(ImproperlyConfigured, match="list of broker URLs must hold URL strings"):
        app.conf.broker_url_or_default()


def test_nodes_take_the_first_urls_user_and_vhost_when_they_leave_them_out() -> None:
    assert split_nodes("amqp://alice:s3cret@h1:5672/orders;amqp://h2:5673;amqp://h3/") == [
        "amqp://alice:s3cret@h1:5672/orders",
        "amqp://alice:s3cret@h2:5673/orders",
        "amqp://alice:s3cret@h3/orders",
    ]
    assert split_nodes("amqp://h1/%2F") == ["amqp://h1/%2F"]
    # the same values spelled out are fine; the default vhost is "/" however written
    assert len(split_nodes("amqp://a:b@h1/%2F;amqp://a:b@h2/%2F")) == 2


@pytest.mark.parametrize(
    ("url", "error"),
    [
        (
            "amqp://h1/orders;amqp://h2/billing",
            r"URL 2 of broker_url .* names vhost 'billing' but URL 1 vhost 'orders'",
        ),
        ("amqp://h1/%2F;amqp://h2/other", r"names vhost 'other' but URL 1 vhost '/'"),
        ("amqp://alice:pw@h1//;amqp://bob:pw@h2//", r"URL 2 .* logs in as 'bob' .* URL 1 as 'alice'"),
        ("amqp://alice:pw@h1//;amqp://alice:other@h2//", r"logs in as 'alice' \(or with another password\)"),
        ("amqp://h1//;amqp://h2//;amqps://h3//", r"URL 3 .* is amqps:// but URL 1 is amqp://"),
        ("amqp://h1//;h2:5672", r"URL 2 .* is not a URL"),
    ],
)
def test_nodes_that_disagree_are_refused_naming_the_url(url: str, error: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=error):
        split_nodes(url)
    with pytest.raises(ImproperlyConfigured, match=error):  # when the app builds its broker
        Potatoq("nodes", broker=url, result_backend=None).broker.close()


def test_the_password_of_a_refused_url_is_not_shown() -> None:
    with pytest.raises(ImproperlyConfigured) as caught:
        split_nodes("amqp://alice:hunter2@h1//;amqp://bob:hunter2@h2//")
    assert "hunter2" not in str(caught.value)


def test_a_node_that_refuses_connections_is_skipped_for_the_next(tmp_path: Path) -> None:
    """The first node listed is down: sending and receiving go through the second."""
    live = urlsplit(services.require("rabbitmq"))
    down = urlunsplit(
        live._replace(netloc=f"{live.username}:{live.password}@127.0.0.1:{free_port()}", path="//")
    )
    app = Potatoq(
        "nodes",
        broker=[down, urlunsplit(live._replace(path="//"))],
        result_backend=f"sqlite:///{tmp_path / 'results.sqlite3'}",
        broker_transport_options={"queue_prefix": f"nodes{uuid.uuid4().hex[:8]}_"},
        broker_connection_timeout=10.0,
    )
    try:
        sent = app.send_task("nodes.nothing")
        assert sum(s.waiting for s in app.broker.queue_stats() if s.queue == "default") == 1
        claimed = app.broker.claim(["default"], WorkerRef("nodes-test", 1))
        assert claimed is not None and claimed.message.id == sent.id
    finally:
        app.broker.drop_all()  # type: ignore[attr-defined]
        app.close()
