"""The task page's workflow section on every broker: a chain into a chord, run by the
worker's executor (``drain``), then each task page read through the dashboard."""

from __future__ import annotations

import re

from starlette.testclient import TestClient

from potatoq import Potatoq, group
from potatoq.dashboard import create_app
from potatoq.testing import drain

ROW = re.compile(
    r'<tr class="link[^"]*" data-role="([^"]+)">.*?(?:href="[^"]*/tasks/([^"]+)"|<code>([^<]+)</code>)'
)


def _rows(html: str, table: str) -> list[tuple[str, str]]:
    """(role, task id) of the rows of the table with id ``table``."""
    body = html.split(f'id="{table}"', 1)[1].split("</table>", 1)[0]
    return [(role, linked or own) for role, linked, own in ROW.findall(body)]


def test_the_task_page_links_a_chain_into_a_chord(any_app: Potatoq) -> None:
    app = any_app
    add = app.tasks["demo.add"]
    done = (add.s(1, 1) | group(add.s(n) for n in range(2)) | add.si(3, 3)).apply_async()
    drain(app)
    members = [r.id for r in done.parent.results]
    first = app.broker.history_links(group_id=done.parent.id)[0]
    assert first.parent_id is not None and {
        m.task_id for m in app.broker.history_links(group_id=done.parent.id)
    } == set(members)
    with TestClient(create_app(app, sample_every=0), base_url="http://127.0.0.1:5555") as client:
        head = client.get(f"/tasks/{first.parent_id}").text
        assert sorted(_rows(head, "workflow")) == sorted(("ran after this (child)", m) for m in members)
        page = client.get(f"/tasks/{members[0]}").text
        assert _rows(page, "workflow")[0] == ("parent", first.parent_id)
        shown = _rows(page, "members")
        assert sorted(shown[:2]) == sorted(("member", m) for m in members)
        assert shown[2] == ("chord callback", done.id)
        callback = client.get(f"/tasks/{done.id}").text
        assert ("parent", first.parent_id) not in _rows(callback, "workflow")
        assert _rows(callback, "workflow")[-1][1] in members  # the member that completed the chord
        assert sorted(_rows(callback, "members")) == sorted(
            [*(("member", m) for m in members), ("chord callback", done.id)]
        )
