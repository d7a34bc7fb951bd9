"""The dashboard's ASGI middleware, outermost first: headers, Host check, credentials.

* :class:`SecurityHeaders` puts a Content-Security-Policy without inline script, frame
  denial, ``nosniff`` and a ``same-origin`` referrer policy on every response (error pages included).
* :class:`HostCheck` refuses a ``Host`` the dashboard doesn't answer to (DNS rebinding).
* :class:`Guard` asks for credentials on every path but exactly ``/healthz`` (and the
  sign-in page's stylesheet); a browser logs
  in by POSTing the token to ``/login`` (so it never sits in a URL or the history) and gets a
  cookie; failed attempts from one client slow down (:class:`~.security.LoginBackoff`).
"""

from __future__ import annotations

from collections.abc import Collection
from urllib.parse import parse_qsl, urlencode

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .security import TOKEN_COOKIE, Auth, LoginBackoff, host_allowed

__all__ = ["SECURITY_HEADERS", "Guard", "HostCheck", "SecurityHeaders", "local_path"]

# No inline script or style anywhere: what the pages need is in /static.
# Referrer-Policy is same-origin, not no-referrer: under no-referrer a browser sends
# ``Origin: null`` with the dashboard's own form POSTs, and the CSRF check (which refuses an
# Origin other than the Host) would refuse every replay and purge. Other sites still get no
# referrer, so no dashboard URL (task ids) leaks through a link.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}
LOGIN_PATH = "/login"
HEALTH_PATH = "/healthz"
LOGIN_CSS_PATH = "/static/dashboard.css"
#: exact paths served without credentials: the health check, and the sign-in page's own
#: stylesheet (without it the browser gets the sign-in page back as CSS and refuses it)
PUBLIC_PATHS = frozenset({HEALTH_PATH, LOGIN_CSS_PATH})


def local_path(scope: Scope) -> str:
    """The request path inside the dashboard, without the prefix it may be mounted under."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


class SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)


class HostCheck:
    """``allowed``: extra host names to answer to besides loopback ones; None: any name."""

    def __init__(self, app: ASGIApp, allowed: Collection[str] | None) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = Request(scope).headers.get("host")
            if not host_allowed(host, self.allowed):
                response = PlainTextResponse(
                    f"this dashboard doesn't answer to Host {host!r}: list the name it is reached by "
                    "(potatoq dashboard --allowed-host NAME, create_app(allowed_hosts=[...]))\n",
                    status_code=400,
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class Guard:
    """Credentials on every request but :data:`PUBLIC_PATHS`; ``POST /login`` (or ``?token=``) logs in."""

    def __init__(self, app: ASGIApp, auth: Auth, backoff: LoginBackoff, templates: Jinja2Templates) -> None:
        self.app = app
        self.auth = auth
        self.backoff = backoff
        self.templates = templates

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or local_path(scope) in PUBLIC_PATHS:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        client = request.client.host if request.client else "?"
        wait = self.backoff.wait(client)
        if wait > 0:
            response: Response = PlainTextResponse(
                f"too many failed logins: try again in {wait:.0f} s\n",
                status_code=429,
                headers={"Retry-After": str(int(wait) + 1)},
            )
        elif local_path(scope) == LOGIN_PATH and request.method == "POST":
            response = await self._login(request, client)
        elif "token" in request.query_params:
            response = self._login_by_query(request, client)
        elif self.auth.allows(request.headers, request.cookies):
            await self.app(scope, receive, send)
            return
        else:
            if "authorization" in request.headers or TOKEN_COOKIE in request.cookies:
                self.backoff.failed(client)
            response = self._challenge(request)
        await response(scope, receive, send)

    async def _login(self, request: Request, client: str) -> Response:
        body = (await request.body())[:4096].decode("utf-8", "replace")
        form = dict(parse_qsl(body, keep_blank_values=True))
        target = _same_site_path(form.get("next", ""), request)
        return self._logged_in(form.get("token", ""), target, request, client)

    def _login_by_query(self, request: Request, client: str) -> Response:
        # Kept for scripts and bookmarks; the redirect takes the token out of the address bar.
        rest = urlencode([(k, v) for k, v in request.query_params.multi_items() if k != "token"])
        target = request.url.path + (f"?{rest}" if rest else "")
        return self._logged_in(request.query_params["token"], target, request, client)

    def _logged_in(self, token: str, target: str, request: Request, client: str) -> Response:
        if self.auth.is_basic or not self.auth.allows({"authorization": f"Bearer {token}"}, {}):
            self.backoff.failed(client)
            return self._challenge(request, failed=True)
        self.backoff.succeeded(client)
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            TOKEN_COOKIE, token, httponly=True, samesite="strict", secure=request.url.scheme == "https"
        )
        return response

    def _challenge(self, request: Request, failed: bool = False) -> Response:
        if self.auth.is_basic:
            return PlainTextResponse(
                "authentication required\n",
                status_code=401,
                headers={"WWW-Authenticate": 'Basic realm="potatoq"'},
            )
        root = request.scope.get("root_path", "")
        here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return self.templates.TemplateResponse(
            request,
            "login.html",
            # No router yet in middleware (no url_for): the mount prefix gives the paths.
            {
                "action": f"{root}{LOGIN_PATH}",
                "css": f"{root}{LOGIN_CSS_PATH}",
                "next": here,
                "failed": failed,
            },
            status_code=401,
            headers={"WWW-Authenticate": 'Bearer realm="potatoq"'},
        )


def _same_site_path(target: str, request: Request) -> str:
    """Where to go after logging in: a path on this site, never another host (open redirect)."""
    root = request.scope.get("root_path", "")
    if target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return f"{root}/"
