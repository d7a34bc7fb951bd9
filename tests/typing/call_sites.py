"""Call sites as a user writes them, checked by mypy and pyright (tests/typing/test_call_sites.py).

Each line ending in ``# error`` must be reported by both checkers, and no other line may be.
``assert_type`` lines are errors when the type is wrong. Never run, only type-checked.
"""

from __future__ import annotations

from typing import Any, assert_type

from potatoq import Potatoq, Signature, Task, shared_task
from potatoq.result import AsyncResult

app = Potatoq("typing", broker="memory://typing")


@app.task
def add(x: int, y: int) -> int:
    return x + y


@app.task(name="greet", queue="q")
def greet(name: str, *, punctuation: str = "!") -> str:
    return f"hello {name}{punctuation}"


@app.task(bind=True, max_retries=2)
def bound(self: Task, x: int) -> list[int]:
    return [x, self.request.retries]


@app.task
async def fetch(url: str) -> bytes:
    return url.encode()


@shared_task
def shared(x: float) -> float:
    return x


class Counted(Task):  # a class-based task: loose, as before
    def run(self, n: int) -> int:
        return n


counted = app.register_task(Counted)

# -- what a call returns ---------------------------------------------------------------
assert_type(add.delay(1, 2), AsyncResult[int])
assert_type(add.delay(1, 2).get(), int)
assert_type(add.delay(1, 2).get(timeout=10, propagate=False), int)
assert_type(add.apply_async((1, 2)).get(), int)
assert_type(add.apply((1, 2)).get(), int)
assert_type(add(1, 2), int)
assert_type(greet.delay("ada", punctuation="?").get(), str)
assert_type(bound.delay(1).get(), list[int])
assert_type(fetch.delay("https://example.com").get(), bytes)  # the worker awaits it
assert_type(shared.delay(1.5).get(), float)


async def in_async_code() -> None:
    assert_type(await add.delay(1, 2).aget(), int)
    assert_type(await (await add.adelay(1, 2)).aget(), int)
    assert_type(await fetch.delay("u").aget(), bytes)


# -- signatures keep Celery's loose typing ---------------------------------------------
assert_type(add.s(1), Signature)
assert_type(add.si(1, 2), Signature)
add.s("x")
add.si("x", "y", "z")
add.apply_async(("x",))  # apply_async takes a tuple: not checked, as in Celery
counted.delay("anything")
untyped: Any = add.delay(1, 2).result

# -- what the checkers must reject ------------------------------------------------------
add.delay("x")  # error
add.delay(1)  # error
add.delay(1, 2, 3)  # error
add(1, "2")  # error
greet.delay(name=1)  # error
greet.delay("ada", "?")  # error
bound.delay("one")  # error
fetch.delay(b"bytes")  # error
shared.delay("1.5")  # error
wrong: str = add.delay(1, 2).get()  # error
