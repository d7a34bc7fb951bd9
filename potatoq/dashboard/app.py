"""The dashboard as an ASGI app (Starlette): :func:`create_app` builds it for one potatoq app.

It can run on its own (``potatoq dashboard``) or be mounted in another ASGI project::

    from starlette.routing import Mount
    routes = [Mount("/tasks", app=create_app(potatoq_app, auth=Auth(token="…")))]

Every page reads the broker through the contract (``queue_stats``, ``workers``,
``list_dead``, ``get_result`` …), so it works the same on every broker. Endpoints are plain
functions: Starlette runs them in its thread pool, where blocking broker calls belong.
Links are built with ``url_for``, so a mounted dashboard links inside its mount.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote

from jinja2 import pass_context
from starlette.applications import Starlette
from starlette.datastructures import URL
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from .. import metrics
from ..exceptions import ImproperlyConfigured, InvalidName
from . import data
from . import history as hist
from . import limits as lim
from .app_format import duration as _duration
from .chart import throughput_svg
from .guard import Guard, HostCheck, SecurityHeaders
from .history_chart import history_charts
from .security import Auth, Csrf, LoginBackoff
from .workflow import workflow

__all__ = ["create_app"]

HERE = Path(__file__).parent
PARTIAL_HEADER = "x-potatoq-partial"


# ----------------------------------------------------------------------------- formatting


def _when(ts: float | None) -> str:
    if not ts:
        return "—"
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _ago(ts: float | None) -> str:
    return "—" if not ts else f"{_duration(time.time() - ts)} ago"


def _in(ts: float | None) -> str:
    return "—" if not ts else f"in {_duration(ts - time.time())}"


def task_url(request: Request, task_id: str) -> str:
    """The task page of ``task_id``; ids may hold ``/``, ``?`` or ``#`` (``user/42/report``),
    so the id is percent-encoded whole and the route takes the rest of the path."""
    return str(request.url_for("task", task_id=quote(task_id, safe="")))


@pass_context
def _task_url(context: Any, task_id: str) -> str:
    return task_url(context["request"], task_id)


# ----------------------------------------------------------------------------- the app


class Dashboard:
    """The state behind the routes: the potatoq app, options, CSRF secret, throughput ring."""

    def __init__(
        self, potatoq_app: Any, *, read_only: bool, auth: Auth | None, redact_args: bool, sample_every: float
    ) -> None:
        self.app = potatoq_app
        self.read_only = read_only
        self.auth = auth
        self.redact_args = redact_args
        self.csrf = Csrf()
        self.throughput = data.Throughput(lambda: self.app.broker, every=sample_every)
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        env = self.templates.env
        env.filters.update(duration=_duration, when=_when, ago=_ago, until=_in, rate=lim.format_rate)
        env.globals.update(read_only=read_only, csrf_token=self.csrf.token, task_url=_task_url)

    def render(self, request: Request, name: str, title: str, **context: Any) -> Response:
        self.throughput.start()  # lazily: a mounted app gets no lifespan events
        partial = request.headers.get(PARTIAL_HEADER) == "1"
        return self.templates.TemplateResponse(
            request, name, {"title": title, "partial": partial, "now": time.time(), **context}
        )

    # -- pages -------------------------------------------------------------------------------

    def overview(self, request: Request) -> Response:
        broker = self.app.broker
        stats = broker.queue_stats()
        workers = broker.workers()
        now = time.time()
        rows = data.queue_rows(stats, broker.paused_queues())
        return self.render(
            request,
            "overview.html",
            "Overview",
            live=True,
            queues=rows,
            totals=data.totals(rows),
            workers=len(workers),
            dead=len(broker.list_dead(limit=1000)),
            chart=throughput_svg(self.throughput.window(now), now),
            samples=len(self.throughput.window(now)),
            sample_every=self.throughput.every,
        )

    def workers(self, request: Request) -> Response:
        return self.render(request, "workers.html", "Workers", live=True, workers=self.app.broker.workers())

    def task(self, request: Request) -> Response:
        task_id = request.path_params["task_id"]
        broker = self.app.broker
        view = data.task_view(task_id, self.app.backend, broker, broker.workers(), redact=self.redact_args)
        # every finished delivery of this id (retries, redeliveries), newest first
        deliveries = hist.history_page(
            broker, hist.HistoryQuery(task_id=task_id, limit=100), self.redact_args
        )
        return self.render(
            request,
            "task.html",
            f"Task {task_id}",
            live=not view.ready,
            view=view,
            deliveries=deliveries.records,
            flow=workflow(broker, self.app.backend, view, deliveries.records),
        )

    def history(self, request: Request) -> Response:
        """Finished deliveries, filtered, one keyset page at a time; charts on the first page."""
        params = request.query_params
        form = {k: params.get(k, "") for k in hist.FILTER_NAMES}
        filtered = any(v for k, v in form.items() if k != "limit")
        context: dict[str, Any] = {"form": form, "filtered": filtered, "states": hist.HISTORY_STATES}
        try:
            query = hist.parse_filters(params)
            window = hist.window_of(params)
            page = hist.history_page(self.app.broker, query, self.redact_args)
        except ValueError as exc:  # FilterError, or a cursor the broker didn't issue
            return self.render(request, "history.html", "History", rows=[], error=str(exc), **context)
        kept = {k: v for k, v in form.items() if v}
        next_url = None
        if page.next_cursor is not None:
            next_url = str(request.url_for("history").include_query_params(**kept, cursor=page.next_cursor))
        first = query.cursor is None
        series = None
        if first:
            span, step = hist.WINDOWS[window]
            series = hist.series(self.app.broker, time.time(), span=span, step=step, name=query.name)
        base = request.url_for("history")
        windows = [  # the chart window links keep the filters (and so the live refresh's URL)
            (key, str(base.include_query_params(**kept, window=key))) for key in hist.WINDOWS
        ]
        return self.render(
            request,
            "history.html",
            "History",
            live=first,  # older pages stay still while you read them
            rows=page.records,
            next_url=next_url,
            series=series,
            charts=history_charts(series, hist.WINDOW_LABELS[window][1]) if series is not None else [],
            window=window,
            window_label=hist.WINDOW_LABELS[window][0],
            step_label=hist.WINDOW_LABELS[window][1],
            windows=windows,
            **context,
        )

    def history_json(self, request: Request) -> Response:
        """The same page as JSON: ``{"records": [...], "next_cursor": ...}``."""
        try:
            query = hist.parse_filters(request.query_params)
            page = hist.history_page(self.app.broker, query, self.redact_args)
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        records = [{**r.to_json(), "cursor": r.cursor, "latency": r.latency} for r in page.records]
        return JSONResponse({"records": records, "next_cursor": page.next_cursor})

    def series_json(self, request: Request) -> Response:
        """Chart series for the last hour (``?window=`` 6h, 24h or 7d for longer; ``?name=``
        for one task name)."""
        name = request.query_params.get("name") or None
        try:
            span, step = hist.WINDOWS[hist.window_of(request.query_params)]
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return JSONResponse(
            hist.series(self.app.broker, time.time(), span=span, step=step, name=name).to_json()
        )

    def find_task(self, request: Request) -> Response:
        task_id = request.query_params.get("id", "").strip()
        if not task_id:
            return RedirectResponse(request.url_for("overview"), status_code=303)
        return RedirectResponse(task_url(request, task_id), status_code=303)

    def dead(self, request: Request) -> Response:
        letters = data.dead_letters(self.app.broker, self.app.backend, redact=self.redact_args)
        return self.render(
            request, "dead.html", "Dead letters", letters=letters, done=request.query_params.get("done")
        )

    def schedules(self, request: Request) -> Response:
        conf = self.app.conf
        names = [str(name) for name in dict(conf.beat_schedule or {})]
        last_runs = self.app.broker.last_fire_times(names) if names else {}
        timezone = getattr(conf, "timezone", None)
        rows = data.schedule_rows(conf.beat_schedule or {}, timezone, last_runs=last_runs)
        return self.render(request, "schedules.html", "Periodic tasks", live=True, rows=rows)

    def limits(self, request: Request) -> Response:
        return self._limits_page(request, done=request.query_params.get("done"))

    def _limits_page(
        self,
        request: Request,
        *,
        done: str | None = None,
        error: str | None = None,
        form: dict[str, str] | None = None,
        status: int = 200,
    ) -> Response:
        view = lim.read(self.app.broker)
        response = self.render(
            request, "limits.html", "Limits", view=view, done=done, error=error, form=form or {}
        )
        response.status_code = status
        return response

    # -- actions (POST + CSRF, refused in read-only mode) --------------------------------------

    async def _checked_form(self, request: Request) -> dict[str, str] | Response:
        if self.read_only:
            return PlainTextResponse("the dashboard is read-only", status_code=403)
        # The forms are plain urlencoded fields; parsing them here spares a multipart dependency.
        body = (await request.body())[:65536].decode("utf-8", "replace")
        form = dict(parse_qsl(body, keep_blank_values=True))
        origin, host = request.headers.get("origin"), request.headers.get("host")
        if not self.csrf.valid(form.get("csrf"), origin, host):
            return PlainTextResponse("CSRF check failed: reload the page and try again", status_code=403)
        return form

    def _back_to_dead(self, request: Request, done: str) -> Response:
        url = URL(str(request.url_for("dead"))).include_query_params(done=done)
        return RedirectResponse(str(url), status_code=303)

    async def replay(self, request: Request) -> Response:
        form = await self._checked_form(request)
        if isinstance(form, Response):
            return form
        from starlette.concurrency import run_in_threadpool

        ids = None if form.get("all") == "1" else [form["id"]] if form.get("id") else []
        if ids == []:
            return PlainTextResponse("nothing to replay: give id= or all=1", status_code=400)
        if ids is None and form.get("confirm") != "1":
            # Every dead letter back into its queue at once is not undone by a second click.
            count = len(await run_in_threadpool(self.app.broker.list_dead, limit=100_000))
            return self.render(
                request,
                "confirm.html",
                "Replay all dead letters?",
                question=f"Replay all {count} dead letter{'' if count == 1 else 's'}?",
                detail="Each goes back to its queue and runs again. There is no undo.",
                action=request.url_for("replay"),
                fields=[("all", "1")],
                button="Replay all",
            )
        count = await run_in_threadpool(self.app.broker.retry_dead, ids)
        return self._back_to_dead(request, f"replayed {count} dead letter{'' if count == 1 else 's'}")

    async def purge(self, request: Request) -> Response:
        form = await self._checked_form(request)
        if isinstance(form, Response):
            return form
        from starlette.concurrency import run_in_threadpool

        count = await run_in_threadpool(self.app.broker.purge_dead)
        return self._back_to_dead(request, f"purged {count} dead letter{'' if count == 1 else 's'}")

    async def pause(self, request: Request) -> Response:
        """Pause or resume one queue for the whole fleet (``action=pause|resume``, ``queue=``)."""
        form = await self._checked_form(request)
        if isinstance(form, Response):
            return form
        from starlette.concurrency import run_in_threadpool

        queue, action = form.get("queue", ""), form.get("action")
        if action not in ("pause", "resume"):
            return PlainTextResponse(f"action must be pause or resume, got {action!r:.40}", status_code=400)
        change = self.app.control.pause_queue if action == "pause" else self.app.control.resume_queue
        try:
            await run_in_threadpool(change, queue)
        except InvalidName as exc:
            return PlainTextResponse(str(exc), status_code=400)
        return RedirectResponse(str(request.url_for("overview")), status_code=303)

    async def set_limit(self, request: Request) -> Response:
        """Set or clear a run-time override, as ``potatoq limits set|clear`` does."""
        form = await self._checked_form(request)
        if isinstance(form, Response):
            return form
        from starlette.concurrency import run_in_threadpool

        try:
            done = await run_in_threadpool(lim.apply, self.app.broker, form)
        except ValueError as exc:  # the page again, with what is wrong above the form
            return await run_in_threadpool(self._limits_page, request, error=str(exc), form=form, status=400)
        url = URL(str(request.url_for("limits"))).include_query_params(done=done)
        return RedirectResponse(str(url), status_code=303)

    # -- machine endpoints ---------------------------------------------------------------------

    def metrics(self, request: Request) -> Response:
        try:
            text = metrics.broker_metrics(self.app.broker)
        except ImproperlyConfigured as exc:  # the [metrics] extra isn't installed
            return PlainTextResponse(f"{exc}\n", status_code=501)
        return Response(text, media_type=metrics.CONTENT_TYPE)

    def healthz(self, request: Request) -> Response:
        return PlainTextResponse("ok\n")


def create_app(
    potatoq_app: Any,
    *,
    read_only: bool = False,
    auth: Auth | None = None,
    redact_args: bool = False,
    sample_every: float = 10.0,
    allowed_hosts: Collection[str] | None = None,
) -> Starlette:
    """The dashboard for ``potatoq_app`` as a Starlette (ASGI) application.

    ``read_only`` hides (and refuses) replay and purge; ``auth`` requires a token or basic
    credentials on every request but ``/healthz``; ``redact_args`` shows ``[redacted]``
    instead of task arguments; ``sample_every`` is the throughput sampling interval in
    seconds (0 disables the background sampler). ``allowed_hosts`` are the names besides
    loopback ones it answers to (the ``Host`` header); by default a dashboard without
    ``auth`` answers to loopback names only (DNS rebinding), one with ``auth`` to any name.
    """
    board = Dashboard(
        potatoq_app, read_only=read_only, auth=auth, redact_args=redact_args, sample_every=sample_every
    )
    routes = [
        Route("/", board.overview, name="overview"),
        Route("/workers", board.workers, name="workers"),
        Route("/task", board.find_task, name="find_task"),
        Route("/tasks/{task_id:path}", board.task, name="task"),
        Route("/history", board.history, name="history"),
        Route("/history.json", board.history_json, name="history_json"),
        Route("/history/series.json", board.series_json, name="series_json"),
        Route("/dead", board.dead, name="dead"),
        Route("/dead/replay", board.replay, methods=["POST"], name="replay"),
        Route("/dead/purge", board.purge, methods=["POST"], name="purge"),
        Route("/queues/pause", board.pause, methods=["POST"], name="pause"),
        Route("/schedules", board.schedules, name="schedules"),
        Route("/limits", board.limits, name="limits"),
        Route("/limits/set", board.set_limit, methods=["POST"], name="set_limit"),
        Route("/metrics", board.metrics, name="metrics"),
        Route("/healthz", board.healthz, name="healthz"),
        Mount("/static", app=StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    hosts = allowed_hosts if allowed_hosts is not None else (None if auth is not None else ())
    middleware = [Middleware(SecurityHeaders), Middleware(HostCheck, allowed=hosts)]
    backoff = LoginBackoff()
    if auth is not None:
        middleware.append(Middleware(Guard, auth=auth, backoff=backoff, templates=board.templates))
    app = Starlette(routes=routes, middleware=middleware)
    app.state.login_backoff = backoff
    app.state.dashboard = board
    return app
