"""``store_result_fenced`` on every broker (the result backends RabbitMQ writes through): a
write of an older claim never replaces a newer claim's result, and ``keep_ready`` never
replaces a finished result (how RabbitMQ's ``revoke`` records REVOKED)."""

from __future__ import annotations

import time

from potatoq.brokers.base import Broker, ResultRecord
from potatoq.states import RETRY, REVOKED, SUCCESS


def record(task_id: str, state: str = SUCCESS, result: object = None) -> ResultRecord:
    return ResultRecord(task_id=task_id, state=state, result=result, date_done=time.time())


def stored(broker: Broker, task_id: str) -> tuple[str, object]:
    got = broker.get_result(task_id)
    assert got is not None
    return got.state, got.result


def test_a_write_with_a_lower_fence_is_refused(broker: Broker) -> None:
    assert broker.store_result_fenced(record("t", result="second claim"), 2_000) is True
    assert broker.store_result_fenced(record("t", result="first claim, late"), 1_000) is False
    assert stored(broker, "t") == (SUCCESS, "second claim")
    assert broker.store_result_fenced(record("t", result="same claim again"), 2_000) is True
    assert broker.store_result_fenced(record("t", result="third claim"), 3_000) is True
    assert stored(broker, "t") == (SUCCESS, "third claim")


def test_an_unfenced_result_is_replaced_by_any_fenced_write(broker: Broker) -> None:
    broker.store_result(record("u", RETRY, "unfenced"))
    assert broker.store_result_fenced(record("u", result="fenced"), 1) is True
    assert stored(broker, "u") == (SUCCESS, "fenced")


def test_keep_ready_writes_only_over_an_unfinished_result(broker: Broker) -> None:
    assert broker.store_result_fenced(record("new", REVOKED), 0, keep_ready=True) is True
    assert stored(broker, "new") == (REVOKED, None)
    broker.store_result_fenced(record("waiting", RETRY), 5_000)
    assert broker.store_result_fenced(record("waiting", REVOKED), 0, keep_ready=True) is True
    assert stored(broker, "waiting") == (REVOKED, None)
    broker.store_result(record("done", SUCCESS, 42))
    assert broker.store_result_fenced(record("done", REVOKED), 0, keep_ready=True) is False
    assert stored(broker, "done") == (SUCCESS, 42)
