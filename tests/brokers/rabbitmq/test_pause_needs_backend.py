"""Pausing a queue on RabbitMQ keeps the flag in the result backend: without one it is
refused with an error saying so (nothing is paused by half), and nothing reads as paused."""

from __future__ import annotations

import pytest

from potatoq.brokers import create_broker
from potatoq.brokers.base import BrokerConfig
from potatoq.exceptions import ImproperlyConfigured
from tests import services


def test_pausing_without_a_result_backend_says_what_is_missing() -> None:
    broker = create_broker(BrokerConfig(url=services.url("rabbitmq")))
    try:
        with pytest.raises(ImproperlyConfigured, match="pausing a queue on RabbitMQ needs a result backend"):
            broker.pause_queue("default")
        with pytest.raises(ImproperlyConfigured, match="resuming a queue on RabbitMQ needs a result backend"):
            broker.resume_queue("default")
        assert broker.paused_queues() == {}
    finally:
        broker.close()
