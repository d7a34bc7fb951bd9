"""Running a signature here and now: ``task.apply()`` and ``task_always_eager``.

The signature is turned into messages exactly as for a worker, put on a private in-memory
broker and drained in this process, so arguments and results round-trip through the JSON
codec (a value a worker couldn't receive fails here too) and chains, groups, chords and
retries behave as they would on a worker.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from .brokers.base import BrokerConfig
from .brokers.memory import MemoryBroker
from .canvas import Signature, build_messages
from .result import AsyncResult, EagerResult, GroupResult
from .testing import drain

if TYPE_CHECKING:
    from .app import Potatoq

_counter = itertools.count()


def apply_eagerly(app: Potatoq, sig: Signature) -> Any:
    broker = MemoryBroker(BrokerConfig(url=f"memory://potatoq-eager-{next(_counter)}"))
    sig.options.pop("connection", None)
    handle = sig.freeze()
    broker.enqueue(build_messages(app, sig))
    drain(app, broker=broker, always_store_results=True)

    def eager(result: AsyncResult) -> EagerResult:
        record = broker.get_result(result.id)
        out = EagerResult(result.id, app, record, task_name=result.task_name)
        if isinstance(result.parent, AsyncResult):
            out.parent = eager(result.parent)
        return out

    if isinstance(handle, GroupResult):
        results: Any = GroupResult(handle.id, [eager(r) for r in handle.results], app=app)
    else:
        results = eager(handle)
        if app.conf.task_eager_propagates and results.failed():
            results.get()
    broker.flush()
    return results
