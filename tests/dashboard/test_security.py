"""The dashboard's defences against a browser on another site, a guesser and a rebinder."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from potatoq import Potatoq
from potatoq.cli import main
from potatoq.dashboard import Auth, InsecureBind, check_bind, create_app
from potatoq.testing import drain

TOKEN = "a-long-enough-token-0123456789"


def _dead(app: Potatoq, task_id: str | None = None) -> str:
    result = app.tasks["demo.flaky"].apply_async(("hunter2",), task_id=task_id)
    drain(app)
    return result.id


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert found, html
    return found.group(1)


def test_only_the_exact_healthz_path_skips_authentication(app: Potatoq, board: Any) -> None:
    task_id = _dead(app, task_id="healthz")
    client = board(auth=Auth(token=TOKEN))
    assert client.get("/healthz").status_code == 200
    for path in ("/tasks/healthz", "/dead/healthz", "/static/healthz", "/healthz/"):
        response = client.get(path)
        assert response.status_code == 401, path
        assert "hunter2" not in response.text
    assert task_id == "healthz"


def test_the_sign_in_stylesheet_is_the_only_other_public_path(board: Any) -> None:
    client = board(auth=Auth(token=TOKEN))
    css = client.get("/static/dashboard.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    for path in ("/static/dashboard.js", "/static/dashboard.css/", "/static/../dashboard.css", "/dead"):
        assert client.get(path).status_code == 401, path


def test_a_post_with_an_opaque_origin_is_refused(app: Potatoq, board: Any) -> None:
    # Browsers send "Origin: null" from sandboxed frames and data: URLs; such a page is never ours.
    _dead(app)
    client = board()
    token = _csrf(client.get("/dead").text)
    refused = client.post("/dead/purge", data={"csrf": token}, headers={"Origin": "null"})
    assert refused.status_code == 403
    assert len(app.broker.list_dead()) == 1


def test_mounted_dashboard_exempts_only_its_own_healthz(app: Potatoq) -> None:
    outer = Starlette(routes=[Mount("/ops", app=create_app(app, auth=Auth(token=TOKEN), sample_every=0))])
    with TestClient(outer, base_url="http://127.0.0.1") as client:
        assert client.get("/ops/healthz").status_code == 200
        assert client.get("/ops/tasks/healthz").status_code == 401


def test_a_loopback_dashboard_refuses_foreign_host_names(app: Potatoq, board: Any) -> None:
    _dead(app)
    client = board()
    for host in ("evil.example", "evil.example:5555", "127.0.0.1.evil.example"):
        response = client.get("/dead", headers={"Host": host})
        assert response.status_code == 400, host
        assert "hunter2" not in response.text
        token = _csrf(client.get("/dead").text)
        rebinding = client.post(
            "/dead/purge", data={"csrf": token}, headers={"Host": host, "Origin": f"http://{host}"}
        )
        assert rebinding.status_code == 400
    assert len(app.broker.list_dead()) == 1
    for host in ("127.0.0.1:5555", "localhost", "LOCALHOST:80", "[::1]:5555", "127.0.0.2"):
        assert client.get("/", headers={"Host": host}).status_code == 200, host


def test_configured_public_names_are_the_only_others_accepted(board: Any) -> None:
    client = board(allowed_hosts=["tasks.example.com"])
    assert client.get("/", headers={"Host": "tasks.example.com"}).status_code == 200
    assert client.get("/", headers={"Host": "tasks.example.com:443"}).status_code == 200
    assert client.get("/", headers={"Host": "other.example.com"}).status_code == 400
    assert client.get("/", headers={"Host": "localhost:5555"}).status_code == 200


def test_a_dashboard_behind_auth_answers_to_any_name_but_still_wants_credentials(board: Any) -> None:
    client = board(auth=Auth(token=TOKEN))
    assert client.get("/", headers={"Host": "tasks.example.com"}).status_code == 401
    bearer = {"Host": "tasks.example.com", "Authorization": f"Bearer {TOKEN}"}
    assert client.get("/", headers=bearer).status_code == 200


@pytest.mark.parametrize("task_id", ["user/42/report", "a?b#c", "/leading", "dots/../x", "sp ace"])
def test_task_ids_with_slashes_and_url_characters_work_on_every_page(
    app: Potatoq, board: Any, task_id: str
) -> None:
    _dead(app, task_id=task_id)
    client = board()
    dead = client.get("/dead")
    assert dead.status_code == 200
    links = re.findall(r'href="(http://127\.0\.0\.1:5555/tasks/[^"]+)"', dead.text)
    assert len(links) == 1, dead.text
    task = client.get(links[0].replace("&amp;", "&"))
    assert task.status_code == 200
    assert "Dead letter" in task.text and "first attempt fails on purpose" in task.text
    found = client.get("/task", params={"id": task_id})
    assert found.status_code == 200 and "Dead letter" in found.text
    assert client.get("/workers").status_code == 200


def test_every_response_carries_the_security_headers(app: Potatoq, board: Any) -> None:
    _dead(app)
    open_board, guarded = board(), board(auth=Auth(token=TOKEN))
    responses = [
        open_board.get(path) for path in ("/", "/dead", "/workers", "/schedules", "/metrics", "/healthz")
    ]
    responses += [
        open_board.get("/static/dashboard.js"),
        open_board.get("/no-such-page"),
        open_board.get("/", headers={"Host": "evil.example"}),
        open_board.post("/dead/purge"),
        guarded.get("/"),
    ]
    for response in responses:
        csp = response.headers.get("content-security-policy", "")
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp, response.url
        assert "frame-ancestors 'none'" in csp and response.headers["x-frame-options"] == "DENY"
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "same-origin"


def test_no_page_has_inline_script_or_event_handlers(app: Potatoq, board: Any) -> None:
    _dead(app)
    pages = [board().get(p).text for p in ("/", "/dead", "/workers", "/schedules")]
    pages.append(board(auth=Auth(token=TOKEN)).get("/").text)  # the login page
    templates = Path(create_app.__code__.co_filename).parent / "templates"
    pages += [t.read_text() for t in templates.glob("*.html")]
    for html in pages:
        assert not re.search(r"<script(?![^>]*\bsrc=)", html), "inline <script>"
        assert not re.search(r"\son[a-z]+\s*=", html), "inline event handler"
        assert " style=" not in html, "inline style (the CSP has no 'unsafe-inline')"


def test_login_posts_the_token_and_never_puts_it_in_a_url(board: Any) -> None:
    client = board(auth=Auth(token=TOKEN))
    login_page = client.get("/dead?x=1")
    assert login_page.status_code == 401
    assert 'method="post"' in login_page.text and 'method="get"' not in login_page.text
    done = client.post("/login", data={"token": TOKEN, "next": "/dead?x=1"}, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == "/dead?x=1"
    assert TOKEN not in done.headers["location"]
    assert client.get("/dead").status_code == 200  # the cookie now
    # A script's ?token= still logs in, and the redirect drops it from the address.
    again = board(auth=Auth(token=TOKEN)).get(f"/workers?token={TOKEN}&a=b", follow_redirects=False)
    assert again.status_code == 303 and again.headers["location"] == "/workers?a=b"


def test_login_redirects_only_within_the_site(board: Any) -> None:
    client = board(auth=Auth(token=TOKEN))
    for target in ("https://evil.example/", "//evil.example/", "/\\evil.example"):
        done = client.post("/login", data={"token": TOKEN, "next": target}, follow_redirects=False)
        assert done.headers["location"] == "/", target


def test_failed_logins_back_off(board: Any) -> None:
    client = board(auth=Auth(token=TOKEN))
    backoff = client.app.state.login_backoff  # type: ignore[attr-defined]
    now = [1000.0]
    backoff.clock = lambda: now[0]
    for _ in range(backoff.free):
        assert client.post("/login", data={"token": "guess"}).status_code == 401
    assert client.post("/login", data={"token": "guess"}).status_code == 401  # starts the wait
    locked = client.post("/login", data={"token": TOKEN}, follow_redirects=False)
    assert locked.status_code == 429 and int(locked.headers["retry-after"]) >= 1
    assert client.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 429
    now[0] += 1.5
    assert client.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
    now[0] += 1.5  # the second wait is twice as long
    assert client.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 429
    now[0] += 1.0
    assert client.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert backoff.wait("testclient") == 0  # a success forgets the failures


def test_replay_all_asks_for_confirmation_first(app: Potatoq, board: Any) -> None:
    _dead(app)
    _dead(app)
    client = board()
    token = _csrf(client.get("/dead").text)
    asked = client.post("/dead/replay", data={"csrf": token, "all": "1"})
    assert asked.status_code == 200 and "Replay all 2 dead letters?" in asked.text
    assert len(app.broker.list_dead()) == 2  # nothing replayed yet
    assert 'name="confirm" value="1"' in asked.text
    done = client.post("/dead/replay", data={"csrf": _csrf(asked.text), "all": "1", "confirm": "1"})
    assert done.status_code == 200 and "replayed 2 dead letters" in done.text
    assert app.broker.list_dead() == []


def test_a_public_token_needs_a_minimum_length() -> None:
    check_bind("127.0.0.1", Auth(token="short"))  # loopback: any token
    with pytest.raises(InsecureBind, match="at least 16 characters"):
        check_bind("0.0.0.0", Auth(token="short"))
    check_bind("0.0.0.0", Auth(token=TOKEN))


def test_cli_reads_the_token_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("POTATOQ_DASHBOARD_TOKEN", "short")
    assert main(["dashboard", "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert "5-character token" in err and "without authentication" not in err
    assert "short" not in err


def test_redacted_pages_hide_kwargs_results_and_error_text(app: Potatoq, board: Any) -> None:
    @app.task(name="demo.leaky")
    def leaky(password: str) -> str:
        raise ValueError(f"bad password {password}")

    @app.task(name="demo.echo")
    def echo(password: str) -> str:
        return f"token for {password}"

    failed = app.tasks["demo.leaky"].apply_async(kwargs={"password": "hunter2"})
    succeeded = app.tasks["demo.echo"].apply_async(kwargs={"password": "hunter2"})
    drain(app)
    client = board(redact_args=True)
    for path in ("/dead", f"/tasks/{failed.id}", f"/tasks/{succeeded.id}"):
        text = client.get(path).text
        assert "hunter2" not in text, path
        assert "[redacted]" in text, path
    assert "ValueError" in client.get(f"/tasks/{failed.id}").text  # the exception type stays
    plain = board().get(f"/tasks/{failed.id}").text
    assert "hunter2" in plain


@pytest.mark.parametrize(
    ("reason", "shown"),
    [
        ("ValueError: bad password hunter2", "ValueError: [redacted]"),
        ("ValueError: hunter2", "ValueError: [redacted]"),
        ("internal error: KeyError: 'hunter2'", "internal error: KeyError: [redacted]"),
        ("KeyError('hunter2')", "[redacted]"),
        ("hunter2 with spaces", "[redacted]"),
    ],
)
def test_redacted_error_text_keeps_the_exception_type_only(reason: str, shown: str) -> None:
    from potatoq.dashboard.redact import error_text

    assert error_text(reason) == shown
