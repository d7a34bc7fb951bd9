"""Reads of the queue registry while other processes read it too (found by the kill storm).

``queue_stats``, ``list_dead``, ``retry_dead``, ``purge_dead`` and ``drop_all`` list the
potatoq queues by consuming the registry queue (``potatoq.queues``) and handing its
messages back. A read that ran while another held those messages unacked saw fewer of
them, or none, and answered as if no queue existed: ``queue_stats`` said nothing waited
while thousands did (45 of 60 reads missed it before reads took a lock, see
``potatoq/brokers/rabbitmq/readlock.py``). Four brokers (four connections, as four
processes would) read at once, and every answer must list the one registered queue.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from .test_broker import Rabbit, msg

READERS = 4
READS = 15


@pytest.fixture
def rabbit(tmp_path: Path) -> Iterator[Rabbit]:
    maker = Rabbit(tmp_path)
    yield maker
    maker.close()


def test_concurrent_queue_stats_all_see_the_registered_queue(rabbit: Rabbit) -> None:
    sender = rabbit()
    sender.enqueue([msg("default")])
    brokers = [rabbit() for _ in range(READERS)]
    missed = [0] * READERS

    def read(index: int) -> None:
        for _ in range(READS):
            if [s.queue for s in brokers[index].queue_stats()] != ["default"]:
                missed[index] += 1

    threads = [threading.Thread(target=read, args=(i,)) for i in range(READERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert missed == [0] * READERS, f"reads that missed the registered queue, per reader: {missed}"
