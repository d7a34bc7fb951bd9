"""Who may see the dashboard and which requests may change something.

* :func:`check_bind` refuses a non-loopback address without authentication: a dashboard
  that can replay and purge dead letters must never be open to the network by accident.
* :class:`Auth` is a bearer token or HTTP basic credentials. A browser logs in with a token
  once (``/?token=T``) and gets an HttpOnly, SameSite=Strict cookie; scripts and Prometheus
  send ``Authorization: Bearer T`` (or basic credentials).
* :class:`Csrf` issues the token embedded in every form; a POST without it (or from a
  foreign ``Origin``) is refused. The token is an HMAC of a per-process secret, so a page on
  another site can't read or guess it, and the app needs no session storage.
* :func:`host_allowed` is the DNS-rebinding check: a page on ``evil.example`` whose name
  later resolves to 127.0.0.1 sends ``Host: evil.example``, which a loopback dashboard refuses.
* :class:`LoginBackoff` makes guessing the token slow: after a few failed attempts from one
  client, every further attempt waits longer (answered 429 until then).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import ipaddress
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping

__all__ = [
    "MIN_PUBLIC_TOKEN_LENGTH",
    "TOKEN_COOKIE",
    "Auth",
    "Csrf",
    "InsecureBind",
    "LoginBackoff",
    "check_bind",
    "host_allowed",
    "is_loopback",
]

TOKEN_COOKIE = "potatoq_dashboard_token"
#: a token guessed at even 1,000 tries a second must take longer than the universe has
MIN_PUBLIC_TOKEN_LENGTH = 16


class InsecureBind(Exception):
    """A non-loopback address was asked for without a token or basic auth."""


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``; False for anything reachable from outside."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a hostname: it may resolve to anything, so treat it as public


def check_bind(host: str, auth: Auth | None) -> None:
    """Raise :class:`InsecureBind` when ``host`` is reachable from other machines and the auth
    is missing or its token shorter than :data:`MIN_PUBLIC_TOKEN_LENGTH`."""
    if is_loopback(host):
        return
    if auth is None:
        raise InsecureBind(
            f"refusing to serve the dashboard on {host!r} without authentication: anyone who can "
            "reach it could replay or purge dead letters. Pass --token TOKEN (or set "
            "POTATOQ_DASHBOARD_TOKEN) or --basic-auth USER:PASSWORD, or bind to 127.0.0.1."
        )
    if auth.token is not None and len(auth.token) < MIN_PUBLIC_TOKEN_LENGTH:
        raise InsecureBind(
            f"refusing to serve the dashboard on {host!r} with a {len(auth.token)}-character token: "
            f"off loopback it needs at least {MIN_PUBLIC_TOKEN_LENGTH} characters "
            "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )


def _host_name(host_header: str) -> str:
    """``"[::1]:5555"`` → ``"::1"``, ``"Example.com:80"`` → ``"example.com"``."""
    text = host_header.strip().lower()
    if text.startswith("["):
        return text[1:].partition("]")[0]
    name, _, _port = text.rpartition(":") if text.count(":") == 1 else (text, "", "")
    return name.rstrip(".")


def host_allowed(host_header: str | None, allowed: Collection[str] | None) -> bool:
    """Is a request with this ``Host`` header for us? Loopback names always are; other names
    only when listed in ``allowed`` (``None``: any name, for a dashboard behind auth)."""
    if allowed is None:
        return True
    if not host_header:
        return False
    name = _host_name(host_header)
    return is_loopback(name) or name in {_host_name(a) for a in allowed}


@dataclasses.dataclass(frozen=True)
class Auth:
    """A bearer token, or basic credentials ``username``/``password`` (exactly one of the two)."""

    token: str | None = None
    username: str | None = None
    password: str | None = None

    def __post_init__(self) -> None:
        has_basic = self.username is not None or self.password is not None
        if (self.token is None) == (not has_basic):
            raise ValueError("Auth needs either token= or username= and password=")
        if self.token is not None and not self.token:
            raise ValueError("the dashboard token must not be empty")
        if has_basic and not (self.username and self.password):
            raise ValueError("basic auth needs a non-empty username and password")

    @classmethod
    def basic(cls, spec: str) -> Auth:
        """``"user:password"`` → basic credentials."""
        user, sep, password = spec.partition(":")
        if not sep:
            raise ValueError("--basic-auth takes USER:PASSWORD")
        return cls(username=user, password=password)

    @property
    def is_basic(self) -> bool:
        return self.token is None

    def allows(self, headers: Mapping[str, str], cookies: Mapping[str, str]) -> bool:
        """True when the request carries these credentials (header, or the token cookie)."""
        header = headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        if self.token is not None:
            if scheme.lower() == "bearer" and _same(value.strip(), self.token):
                return True
            return _same(cookies.get(TOKEN_COOKIE, ""), self.token)
        if scheme.lower() != "basic":
            return False
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return False
        user, _, password = decoded.partition(":")
        # Both compared, always, so the time taken doesn't say which one was wrong.
        ok_user = _same(user, self.username or "")
        ok_password = _same(password, self.password or "")
        return ok_user and ok_password


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


class Csrf:
    """The form token of one dashboard instance, and the check of a POST."""

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret or secrets.token_bytes(32)
        self.token = hmac.new(self._secret, b"potatoq-dashboard-csrf", hashlib.sha256).hexdigest()

    def valid(self, submitted: str | None, origin: str | None, host: str | None) -> bool:
        """The submitted token matches, and the request doesn't come from another origin."""
        if origin and host:
            origin_host = origin.split("://", 1)[-1].rstrip("/")
            if origin_host != host:
                return False
        return bool(submitted) and _same(submitted or "", self.token)


class LoginBackoff:
    """Failed credentials per client: after ``free`` failures, each further one doubles the
    wait (1 s, 2 s, 4 s … up to ``longest``) before that client may try again.

    State lives in this process (bounded to ``clients`` entries, oldest dropped first): the
    point is to make guessing slow, not to be a distributed rate limiter.
    """

    def __init__(
        self,
        *,
        free: int = 5,
        longest: float = 300.0,
        clients: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.free = free
        self.longest = longest
        self.clients = clients
        self.clock = clock
        self._failures: OrderedDict[str, tuple[int, float]] = OrderedDict()  # client -> (count, until)

    def wait(self, client: str) -> float:
        """Seconds ``client`` must still wait before its credentials are even checked."""
        _count, until = self._failures.get(client, (0, 0.0))
        return max(0.0, until - self.clock())

    def failed(self, client: str) -> None:
        count = self._failures.pop(client, (0, 0.0))[0] + 1
        delay = 0.0 if count <= self.free else min(self.longest, 2.0 ** (count - self.free - 1))
        self._failures[client] = (count, self.clock() + delay)
        while len(self._failures) > self.clients:
            self._failures.popitem(last=False)

    def succeeded(self, client: str) -> None:
        self._failures.pop(client, None)
