"""The pieces the integrations share: telling two database URLs apart, and which tasks
follow a transaction."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from potatoq import Potatoq
from potatoq.contrib import database_identity, same_database, split_following


def test_same_database_sees_through_spellings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert same_database("sqlite:///db.sqlite3", f"sqlite:///{tmp_path / 'db.sqlite3'}")
    assert same_database("sqlite+pysqlite:///db.sqlite3", "sqlite:///./db.sqlite3")
    assert not same_database("sqlite:///db.sqlite3", "sqlite:///other.sqlite3")
    assert same_database("postgresql://127.0.0.1/app", "postgresql+psycopg://u:p@localhost:5432/app")
    assert not same_database("postgresql://localhost/app", "postgresql://localhost:5433/app")
    assert not same_database("postgresql://localhost/app", "postgresql://db.internal/app")
    assert not same_database("redis://localhost/0", "redis://localhost/0")  # not a database broker
    assert database_identity("sqlite://") is None and database_identity("sqlite:///:memory:") is None


def test_django_settings_become_broker_urls(tmp_path: Path) -> None:
    pytest.importorskip("django")
    from potatoq.contrib.django.setup import database_url

    pg = "django.db.backends.postgresql"
    assert database_url(
        {"ENGINE": pg, "NAME": "shop", "HOST": "db", "PORT": "6432", "USER": "u", "PASSWORD": "p@ss"}
    ) == ("postgresql://u:p%40ss@db:6432/shop")
    assert database_url({"ENGINE": pg, "NAME": "shop", "HOST": "/var/run/postgresql", "PORT": "5433"}) == (
        "postgresql:///shop?host=%2Fvar%2Frun%2Fpostgresql&port=5433"
    )
    assert database_url({"ENGINE": pg, "NAME": "shop", "OPTIONS": {"sslmode": "require", "pool": True}}) == (
        "postgresql:///shop?sslmode=require"
    )
    db = tmp_path / "db.sqlite3"
    assert database_url({"ENGINE": "django.db.backends.sqlite3", "NAME": db}) == f"sqlite:///{db}"
    assert database_url({"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}) is None
    assert database_url({"ENGINE": "django.db.backends.mysql", "NAME": "shop"}) is None
    assert os.path.isabs(database_url({"ENGINE": "django.db.backends.sqlite3", "NAME": "rel.db"})[10:])  # type: ignore[index]


def test_opted_out_tasks_are_sent_now_unless_delay_on_commit() -> None:
    app = Potatoq("glue", broker=f"memory://glue-{uuid.uuid4().hex}", set_as_current=False)

    @app.task(name="follows")
    def follows() -> None: ...

    @app.task(name="now", enqueue_on_commit=False)
    def now() -> None: ...

    seen: list[tuple[list[str], list[str]]] = []

    def hook(messages):  # noqa: ANN001, ANN202
        follow, send_now = split_following(app, messages)
        seen.append(([m.task for m in follow], [m.task for m in send_now]))
        return messages

    app.publish_hooks.append(hook)
    follows.delay()
    now.delay()
    now.delay_on_commit()
    app.send_task("unregistered.elsewhere")
    assert seen == [(["follows"], []), ([], ["now"]), (["now"], []), (["unregistered.elsewhere"], [])]
    app.publish_hooks.remove(hook)
    app.close()
