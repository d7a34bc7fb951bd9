"""Every page, its safety rules (auth, CSRF, read-only, redaction) and the CLI refusal."""

from __future__ import annotations

import base64
import re
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from potatoq import Potatoq
from potatoq.cli import main
from potatoq.dashboard import Auth, InsecureBind, check_bind, create_app
from potatoq.testing import drain


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert found, "no CSRF token in the page"
    return found.group(1)


def _one_dead(app: Potatoq) -> str:
    result = app.tasks["demo.flaky"].delay("hunter2")
    drain(app)
    assert [d.id for d in app.broker.list_dead()] == [result.id]
    return result.id


def test_every_page_renders(app: Potatoq, board: Any) -> None:
    done = app.tasks["demo.add"].delay(2, 3)
    dead_id = _one_dead(app)
    app.tasks["demo.add"].apply_async((1, 1), countdown=3600)  # one delayed task shows up
    client = board()
    board_state = client.app.state.dashboard  # type: ignore[attr-defined]
    board_state.throughput.sample()
    board_state.throughput.sample()

    overview = client.get("/")
    assert overview.status_code == 200
    assert "<svg" in overview.text and "Queues" in overview.text
    assert re.search(r"<b>1</b><span>delayed</span>", overview.text)
    assert 'data-live="1"' in overview.text

    assert "No live workers" in client.get("/workers").text

    task = client.get(f"/tasks/{done.id}")
    assert task.status_code == 200
    assert "SUCCESS" in task.text and "<pre>5</pre>" in task.text and "(2, 3)" in task.text

    failed = client.get(f"/tasks/{dead_id}").text
    assert "RuntimeError: first attempt fails on purpose" in failed  # the traceback
    assert "Dead letter" in failed

    dead = client.get("/dead").text
    assert dead_id in dead and "Replay" in dead and "Purge all" in dead and "Traceback" in dead

    schedules = client.get("/schedules").text
    assert "tick" in schedules and "demo.add" in schedules
    # Under a second away it reads "(in 850 ms)": the test can land in the last second of a window.
    assert re.search(r"\(in \d+(\.\d)? m?s\)", schedules), "the next run, at most 30 s away"

    assert client.get("/healthz").text == "ok\n"
    assert client.get("/static/dashboard.css").status_code == 200
    found = client.get("/task", params={"id": done.id}, follow_redirects=False)
    assert found.status_code == 303 and found.headers["location"].endswith(f"/tasks/{done.id}")


def test_task_page_links_parent_and_children(app: Potatoq, board: Any) -> None:
    chained = (app.tasks["demo.add"].s(1, 2) | app.tasks["demo.add"].s(10)).delay()
    drain(app)
    client = board()
    child_id = chained.id
    parent_id = chained.parent.id
    parent_page = client.get(f"/tasks/{parent_id}").text
    assert f'href="http://127.0.0.1:5555/tasks/{child_id}"' in parent_page
    child_page = client.get(f"/tasks/{child_id}").text
    assert f'href="http://127.0.0.1:5555/tasks/{parent_id}"' in child_page and "<pre>13</pre>" in child_page


def test_unknown_task_is_pending(board: Any) -> None:
    page = board().get("/tasks/no-such-id").text
    assert "PENDING" in page and "No stored result" in page


def test_partial_refresh_returns_the_content_only(board: Any) -> None:
    fragment = board().get("/", headers={"X-Potatoq-Partial": "1"}).text
    assert "<h1>Overview</h1>" in fragment and "<html" not in fragment and "<header>" not in fragment


def test_redacted_arguments(app: Potatoq, board: Any) -> None:
    dead_id = _one_dead(app)
    client = board(redact_args=True)
    for path in ("/dead", f"/tasks/{dead_id}"):
        text = client.get(path).text
        assert "hunter2" not in text and "[redacted]" in text
    assert "hunter2" in board().get("/dead").text  # shown when not redacted


def test_read_only_hides_and_refuses_actions(app: Potatoq, board: Any) -> None:
    _one_dead(app)
    client = board(read_only=True)
    page = client.get("/dead").text
    assert '<form method="post"' not in page and "Replay" not in page and "read-only" in page
    token = _csrf(board().get("/dead").text)  # even a valid-looking token from another instance
    response = client.post("/dead/purge", data={"csrf": token})
    assert response.status_code == 403
    assert len(app.broker.list_dead()) == 1


def test_post_without_or_with_a_wrong_csrf_token_is_refused(app: Potatoq, board: Any) -> None:
    _one_dead(app)
    client = board()
    assert client.post("/dead/purge").status_code == 403
    assert client.post("/dead/purge", data={"csrf": "0" * 64}).status_code == 403
    other = _csrf(board().get("/dead").text)  # another dashboard process's token
    assert client.post("/dead/replay", data={"csrf": other, "all": "1"}).status_code == 403
    token = _csrf(client.get("/dead").text)
    foreign = client.post("/dead/purge", data={"csrf": token}, headers={"Origin": "https://evil.example"})
    assert foreign.status_code == 403
    assert len(app.broker.list_dead()) == 1
    assert client.get("/dead/purge").status_code == 405  # changing state is POST only
    purged = client.post("/dead/purge", data={"csrf": token}, follow_redirects=True)
    assert purged.status_code == 200 and "purged 1 dead letter" in purged.text
    assert app.broker.list_dead() == []


def test_token_auth(board: Any) -> None:
    client = board(auth=Auth(token="s3cret"))
    assert client.get("/").status_code == 401
    assert client.get("/metrics").status_code == 401
    assert client.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert client.get("/healthz").status_code == 200  # probes need no credentials
    login = client.get("/workers?token=s3cret", follow_redirects=False)
    assert login.status_code == 303 and login.headers["location"] == "/workers"
    assert "httponly" in login.headers["set-cookie"].lower()
    assert client.get("/workers").status_code == 200  # the cookie now


def test_basic_auth(board: Any) -> None:
    client = board(auth=Auth.basic("ops:pa:ss"))
    denied = client.get("/")
    assert denied.status_code == 401 and denied.headers["www-authenticate"].startswith("Basic")
    assert client.get("/", auth=("ops", "nope")).status_code == 401
    assert client.get("/", auth=("ops", "pa:ss")).status_code == 200
    garbage = {"Authorization": "Basic " + base64.b64encode(b"\xff\xfe").decode()}
    assert client.get("/", headers=garbage).status_code == 401


def test_binding_elsewhere_needs_auth() -> None:
    for host in ("127.0.0.1", "::1", "localhost", "127.0.0.5"):
        check_bind(host, None)
    for host in ("0.0.0.0", "::", "10.1.2.3", "dashboard.example.com"):
        with pytest.raises(InsecureBind, match="without authentication"):
            check_bind(host, None)
        check_bind(host, Auth(token="t" * 16))


def test_cli_refuses_a_public_bind_without_auth(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dashboard", "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert "refusing to serve the dashboard on '0.0.0.0' without authentication" in err
    assert "--token" in err
    assert main(["dashboard", "--host", "0.0.0.0", "--basic-auth", "nocolon"]) == 2
    assert "USER:PASSWORD" in capsys.readouterr().err


def test_mounted_inside_another_app(app: Potatoq) -> None:
    outer = Starlette(routes=[Mount("/ops/queue", app=create_app(app, sample_every=0))])
    with TestClient(outer, base_url="http://127.0.0.1") as client:
        page = client.get("/ops/queue/")
        assert page.status_code == 200
        assert 'href="http://127.0.0.1/ops/queue/workers"' in page.text
        assert 'href="http://127.0.0.1/ops/queue/static/dashboard.css"' in page.text
        assert client.get("/ops/queue/static/dashboard.js").status_code == 200


def test_waiting_chord_member_links_its_callback(app: Potatoq, board: Any) -> None:
    from potatoq import chord

    add = app.tasks["demo.add"]
    result = chord([add.s(1, 1), add.s(2, 2)], add.s(5)).delay()  # the headers wait, nothing runs them
    header_id = result.parent.results[0].id  # type: ignore[union-attr]
    page = board().get(f"/tasks/{header_id}").text
    assert "chord callback (after 2 parts)" in page
    assert f'href="http://127.0.0.1:5555/tasks/{result.id}"' in page
    assert "ready since" in page and "(1, 1)" in page


def test_undecodable_waiting_payload_is_shown_not_a_broken_page(app: Potatoq, board: Any) -> None:
    import sqlite3

    task = app.tasks["demo.add"].apply_async((1, 2), countdown=3600)
    path = app.broker.path  # type: ignore[attr-defined]
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE potatoq_jobs SET payload = ? WHERE id = ?", (b"not json", task.id))
    page = board().get(f"/tasks/{task.id}")
    assert page.status_code == 200
    assert "The payload can't be decoded" in page.text and "scheduled, due" in page.text
