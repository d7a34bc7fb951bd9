"""Every ```python block in docs/ runs, so the docs can't rot.

Blocks of one page run in order in one namespace, in a temporary directory. Every app a
page creates gets an in-process ``ThreadWorker``, so examples can call ``.get()`` as they
would with a worker running. A block whose info string says ``python no-test`` is shown
but not run (e.g. it needs a server of the reader's); ``python requires=redis`` (or
postgres, valkey, rabbitmq) runs it against that test service; ``requires=redis_cluster``
against a private Redis Cluster (tests/factories/redis_cluster.py). A page containing
``<!-- docs-test: no-worker -->`` gets no ThreadWorker (its examples drain by hand).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from potatoq import signals
from potatoq.testing import ThreadWorker

from . import services

DOCS = Path(__file__).resolve().parent.parent / "docs"
BLOCK = re.compile(r"^```python([^\n]*)\n(.*?)^```", re.S | re.M)
# docs/integrations/ pages need a framework project around them; their examples are run by
# tests/integrations/test_docs_examples.py instead.
PAGES = sorted(p for p in DOCS.rglob("*.md") if p.parent.name != "integrations")


# A PostgreSQL schema a page names (``"schema": "potatoq_docs"``) is dropped before the page
# runs: a schema left behind by an older or newer checkout's migrations must not decide the
# outcome (the test database is shared by every run on the machine).
SCHEMA = re.compile(r'"schema":\s*"(\w+)"')


def drop_schemas(names: list[str]) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(services.url("postgres"), autocommit=True) as conn:
        for name in names:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def blocks(page: Path) -> list[tuple[int, str, str]]:
    text = page.read_text()
    found = []
    for match in BLOCK.finditer(text):
        line = text.count("\n", 0, match.start()) + 2
        found.append((line, match.group(1).strip(), match.group(2)))
    return found


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p)], ids=lambda p: str(p.relative_to(DOCS)))
def test_docs_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("POTATOQ_BROKER_URL", raising=False)
    workers: list[ThreadWorker] = []

    def start_worker(sender: Any = None, **_: Any) -> None:
        workers.append(ThreadWorker(sender, poll=0.2).start())

    if "<!-- docs-test: no-worker -->" not in page.read_text():
        signals.app_created.connect(start_worker)
    namespace: dict[str, Any] = {"__name__": f"docs_{page.stem.replace('-', '_')}"}
    schemas = SCHEMA.findall(page.read_text())
    if schemas and any("requires=postgres" in info for _, info, _ in blocks(page)):
        services.require("postgres")
        drop_schemas(schemas)
    try:
        for line, info, code in blocks(page):
            if "no-test" in info:
                continue
            for need in re.findall(r"requires=(\w+)", info):
                if need == "redis_cluster":  # a private cluster, started on first use
                    from tests.factories import redis_cluster

                    os.environ["POTATOQ_TEST_REDIS_CLUSTER_URL"] = redis_cluster.url()
                else:
                    services.require(need)
            exec(compile(code, f"{page}:{line}", "exec"), namespace)
    finally:
        signals.app_created.disconnect(start_worker)
        for worker in workers:
            worker.stop()
        for worker in workers:
            worker.app.close()


def test_every_setting_is_documented() -> None:
    from potatoq.config import DEFAULTS

    text = (DOCS / "settings.md").read_text()
    assert [name for name in DEFAULTS if f"`{name}`" not in text] == []
