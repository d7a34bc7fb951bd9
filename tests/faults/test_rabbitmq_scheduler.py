"""RabbitMQ's periodic-scheduler token on a clean shutdown: the worker holding it hands it on
as its shutdown starts, while its running task still finishes within the grace."""

from __future__ import annotations

import signal

import pika
import pytest

from potatoq.brokers.rabbitmq import RabbitMQBroker

from .harness import FaultEnv, client, wait_for

HOURLY = {"hourly": {"task": "faults.add", "schedule": 3600.0, "args": [1, 2]}}


def token_held(broker: RabbitMQBroker) -> bool:
    """Whether some consumer holds the token: one consumer at least, and no ready token."""
    connection = pika.BlockingConnection(pika.URLParameters(broker.config.url))
    try:
        frame = connection.channel().queue_declare(broker.topology.scheduler, passive=True)
        return frame.method.consumer_count >= 1 and frame.method.message_count == 0
    except pika.exceptions.ChannelClosedByBroker:
        return False  # not declared yet
    finally:
        if connection.is_open:
            connection.close()


@pytest.mark.parametrize("fault_env", ["rabbitmq"], indirect=True)
def test_the_scheduler_token_moves_as_soon_as_its_holders_shutdown_starts(fault_env: FaultEnv) -> None:
    env = fault_env
    env.conf.update(beat_schedule=HOURLY, worker_shutdown_timeout=60)
    with client(env) as proj:
        holder = env.worker("-c", "1")
        result = proj.block.delay("held", release="go")
        env.wait_marker("started-held-1")
        broker = proj.app.broker
        assert isinstance(broker, RabbitMQBroker)
        wait_for(lambda: token_held(broker), 30, "the worker to hold the scheduler token")
        assert broker.scheduler_lease() is False  # this process now waits behind the worker
        holder.proc.send_signal(signal.SIGTERM)  # a clean shutdown: the task runs on
        wait_for(broker.scheduler_lease, 30, "the token to move to this process")
        assert holder.alive(), "the token moved only when the worker exited"
        env.mark("go")
        assert result.get(timeout=30) > 0
        # it exits on its own once the task is done: a second SIGTERM (stop()) could land
        # after the handlers are reset and make the exit status -15
        assert holder.proc.wait(60) == 0
        broker.release_scheduler_lease()
