"""A chain and a chord run by a real ``potatoq worker`` on SQLite, followed link by link on
the task page in a real headless Chromium: parent and children both ways, a chord's
members with their states and its callback, and a waiting member's page."""

from __future__ import annotations

from typing import Any

from potatoq import chord
from potatoq.brokers.base import HistoryQuery
from potatoq.dashboard import create_app
from tests.worker.conftest import Env, wait_for

from .browser import browser, require_chromium, serve


def _rows(page: Any, table: str) -> list[tuple[str, str, str]]:
    """(role, task id, state) of each row of a workflow table."""
    rows: list[tuple[str, str, str]] = page.evaluate(
        """sel => [...document.querySelectorAll(sel + ' tr.link')].map(tr => [
               tr.dataset.role, tr.cells[1].querySelector('a, code').textContent.trim(),
               tr.cells[3].textContent.trim()])""",
        table,
    )
    return [tuple(r) for r in rows]  # type: ignore[misc]


def _follow(page: Any, table: str, role: str, task_id: str) -> None:
    page.click(f'{table} tr.link[data-role="{role}"] a[href$="/tasks/{task_id}"]')
    page.wait_for_url(f"**/tasks/{task_id}")


def test_follow_a_chain_and_a_chord_from_the_task_page(env: Env, client: Any) -> None:
    require_chromium()
    env.worker("-c", "2")
    add, app = client.add, client.app
    last = (add.s(1, 2) | add.s(10) | add.s(100)).apply_async()
    assert last.get(timeout=30) == 113
    first, middle = last.parent.parent.id, last.parent.id
    callback = chord([add.s(i, i) for i in range(3)], add.si(5, 5)).apply_async()
    assert callback.get(timeout=30) == 10
    members = [r.id for r in callback.parent.results]
    waiting = chord([add.s(7, 7), add.s(8, 8).set(countdown=3600)], add.si(0, 0)).apply_async()
    ran, held = (r.id for r in waiting.parent.results)
    assert wait_for(lambda: app.AsyncResult(ran).ready(), what="the waiting chord's first member")
    # a worker writes its history records within about a second of the settle
    for task_id in (first, middle, last.id, *members, callback.id, ran):
        query = HistoryQuery(task_id=task_id)
        wait_for(lambda q=query: app.broker.history(q).records, what=f"{task_id}'s record")

    with serve(create_app(app, sample_every=0)) as url, browser() as chromium:
        page: Any = chromium.new_page()
        page.goto(f"{url}/tasks/{middle}")
        assert _rows(page, "#workflow") == [  # (the root is the parent: no row of its own)
            ("parent", first, "SUCCESS"),
            ("ran after this (child)", last.id, "SUCCESS"),
        ]
        _follow(page, "#workflow", "ran after this (child)", last.id)
        assert _rows(page, "#workflow") == [("root", first, "SUCCESS"), ("parent", middle, "SUCCESS")]
        _follow(page, "#workflow", "parent", middle)
        _follow(page, "#workflow", "parent", first)
        assert _rows(page, "#workflow") == [("ran after this (child)", middle, "SUCCESS")]
        assert page.query_selector("#members") is None  # a chain has no group

        page.goto(f"{url}/tasks/{members[0]}")
        shown = _rows(page, "#members")
        assert sorted(shown[:3]) == sorted(("member", m, "SUCCESS") for m in members)
        assert shown[3] == ("chord callback", callback.id, "SUCCESS")
        assert page.inner_text("#group").startswith(f"Chord {callback.parent.id}: 3 members known")
        _follow(page, "#members", "chord callback", callback.id)
        [(role, completed_by, state)] = _rows(page, "#workflow")[-1:]
        assert role == "parent" and completed_by in members and state == "SUCCESS"
        # and back: the callback's page lists the chord it ran after
        assert sorted(_rows(page, "#members")) == sorted(
            [*(("member", m, "SUCCESS") for m in members), ("chord callback", callback.id, "SUCCESS")]
        )

        page.goto(f"{url}/tasks/{held}")  # still waiting: its details page
        assert page.inner_text(".state") == "PENDING"
        assert page.inner_text("#group").startswith(f"Chord {waiting.parent.id}: 2 members known of 2")
        assert sorted(_rows(page, "#members")) == sorted(
            [
                ("member", ran, "SUCCESS"),
                ("member", held, "not run yet"),
                ("chord callback", waiting.id, "not run yet"),
            ]
        )
        _follow(page, "#members", "member", ran)
        # a member shows up on its siblings' pages once it has a record (it ran, or was revoked)
        # (nor can it tell a chord from a group before the callback ran)
        assert page.inner_text("#group") == f"Group {waiting.parent.id}: 1 member known"
        assert _rows(page, "#members") == [("member", ran, "SUCCESS")]
