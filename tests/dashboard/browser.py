"""A real dashboard server (uvicorn on a free port, in a thread) and the system Chromium.

Browser tests need Debian's ``chromium`` package (``/usr/bin/chromium``) and the Python
``playwright`` package, which drives that browser: no browser is downloaded. Without them
the tests skip, except under ``CI=true`` where that is a failure.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.services import IN_CI

CHROMIUM = os.environ.get("POTATOQ_TEST_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"


def require_chromium() -> str:
    problem = None
    if not os.path.exists(CHROMIUM):
        problem = f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            problem = "the playwright package is missing (pip install playwright; no browser download needed)"
    if problem is None:
        return CHROMIUM
    if IN_CI:
        pytest.fail(problem + " (CI=true: a missing browser is a failure)", pytrace=False)
    pytest.skip(problem)
    raise AssertionError("unreachable")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serve(asgi_app: Any) -> Iterator[str]:
    """Serve ``asgi_app`` on 127.0.0.1 in a thread; yield its base URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(asgi_app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise AssertionError("the dashboard server didn't start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@contextlib.contextmanager
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    executable = require_chromium()
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=executable, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield chromium
        finally:
            chromium.close()


class ConsoleProblems:
    """Every console error (CSP violations are reported as errors: "Refused to …"), failed
    load and uncaught exception of a page, so a test can assert that a page had none."""

    def __init__(self, page: Any) -> None:
        self.seen: list[str] = []
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.seen.append(f"uncaught: {error}"))
        page.on("requestfailed", lambda r: self.seen.append(f"failed load: {r.url} ({r.failure})"))

    def _console(self, message: Any) -> None:
        if message.type == "error":
            self.seen.append(f"console error: {message.text}")

    def assert_none(self, where: str) -> None:
        problems, self.seen = self.seen, []
        assert not problems, f"{where}: " + "; ".join(problems)
