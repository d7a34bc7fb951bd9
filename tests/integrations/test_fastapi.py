"""FastAPI / asyncio: ``await task.adelay()`` and ``await result.aget()`` leave the event loop
free, checked through FastAPI's TestClient (httpx)."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from fastapi import FastAPI
from fastapi.testclient import TestClient

from potatoq import Potatoq
from potatoq.testing import drain

TICKS_BEFORE_RUNNING = 5


@pytest.fixture
def app() -> Iterator[Potatoq]:
    app = Potatoq("fastapi", broker=f"memory://fastapi-{uuid.uuid4().hex}", set_as_current=False)
    yield app
    app.close()


def make_api(app: Potatoq, release: threading.Event) -> FastAPI:
    @app.task(name="add")
    def add(x: int, y: int) -> int:
        return x + y

    api = FastAPI()

    @api.post("/add")
    async def add_endpoint(x: int, y: int) -> dict[str, int]:
        ticks = 0
        waiting = False
        done = asyncio.Event()

        async def ticker() -> None:
            # Ticks only if the loop is free while aget() waits; the task runs only after
            # TICKS_BEFORE_RUNNING ticks, so a blocking aget() would time out instead.
            nonlocal ticks
            while not done.is_set():
                if waiting:
                    ticks += 1
                    if ticks == TICKS_BEFORE_RUNNING:
                        release.set()
                await asyncio.sleep(0.001)

        beat = asyncio.create_task(ticker())
        result = await add.adelay(x, y)
        waiting = True
        value = await result.aget(timeout=20)
        done.set()
        await beat
        return {"value": value, "ticks": ticks}

    return api


def test_aget_waits_without_blocking_the_event_loop(app: Potatoq) -> None:
    release = threading.Event()
    api = make_api(app, release)

    def worker() -> None:
        if release.wait(timeout=30):
            drain(app)

    runner = threading.Thread(target=worker)
    runner.start()
    try:
        with TestClient(api) as client:
            response = client.post("/add", params={"x": 2, "y": 3})
    finally:
        release.set()
        runner.join()
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["value"] == 5
    assert body["ticks"] >= TICKS_BEFORE_RUNNING


def test_many_concurrent_requests_share_the_loop(app: Potatoq) -> None:
    """Twenty requests waiting at once; one drain (after every task was sent) answers them all."""
    sent = threading.Event()

    @app.task(name="double")
    def double(x: int) -> int:
        return 2 * x

    api = FastAPI()
    count = 0

    @api.get("/double/{x}")
    async def endpoint(x: int) -> dict[str, int]:
        nonlocal count
        result = await double.adelay(x)
        count += 1
        if count == 20:
            sent.set()
        return {"value": await result.aget(timeout=30)}

    async def call_all() -> list[int]:
        try:
            import httpx2 as httpx  # the client newer starlette uses
        except ImportError:
            import httpx

        transport = httpx.ASGITransport(app=api)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            responses = await asyncio.gather(*(client.get(f"/double/{i}") for i in range(20)))
        return [r.json()["value"] for r in responses]

    def worker() -> None:
        if sent.wait(timeout=30):
            drain(app)

    runner = threading.Thread(target=worker)
    runner.start()
    try:
        values = asyncio.run(call_all())
    finally:
        sent.set()
        runner.join()
    assert values == [2 * i for i in range(20)]
