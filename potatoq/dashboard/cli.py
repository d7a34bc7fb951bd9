"""``potatoq dashboard`` and the worker's ``--metrics-port`` / ``--health-port`` options.

:func:`register` is called once by ``potatoq.cli``. It adds the ``dashboard`` command and
wraps the ``worker`` command's registry entry with two options that install the metrics
and health endpoints (a ``worker_init`` receiver, see ``potatoq.metrics``) before the
worker runs: the worker code itself is unchanged.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

__all__ = ["register"]


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"port must be 1-65535, got {value}")
    return value


def _dashboard_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=_port, default=5555, help="port (default 5555)")
    auth = parser.add_mutually_exclusive_group()
    auth.add_argument("--token", help="require this bearer token (browsers: open /?token=TOKEN once)")
    auth.add_argument("--basic-auth", metavar="USER:PASSWORD", help="require HTTP basic auth")
    parser.add_argument("--read-only", action="store_true", help="hide and refuse replay/purge")
    parser.add_argument("--redact-args", action="store_true", help="show task arguments as [redacted]")


def _dashboard_auth(args: argparse.Namespace) -> Any:
    from potatoq.cli import UsageError

    from .security import Auth, InsecureBind, check_bind

    try:
        auth = Auth(token=args.token) if args.token is not None else None
        if args.basic_auth is not None:
            auth = Auth.basic(args.basic_auth)
        check_bind(args.host, auth)
    except (ValueError, InsecureBind) as exc:
        raise UsageError(str(exc)) from None
    return auth


def cmd_dashboard(ctx: Any) -> int:
    from potatoq.cli import UsageError

    args = ctx.args
    auth = _dashboard_auth(args)  # refuse an unsafe bind before importing or connecting anything
    try:
        import uvicorn

        from .app import create_app
    except ImportError as exc:
        raise UsageError(f"the dashboard needs its extra: pip install 'potatoq[dashboard]' ({exc})") from None
    app = create_app(ctx.app, read_only=args.read_only, auth=auth, redact_args=args.redact_args)
    ctx.print(f"potatoq dashboard on http://{args.host}:{args.port}/ (Ctrl-C stops it)")
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


def _with_endpoint_options(worker: Any) -> Any:
    def arguments(parser: argparse.ArgumentParser) -> None:
        if worker.arguments is not None:
            worker.arguments(parser)
        parser.add_argument("--metrics-port", type=_port, help="serve Prometheus /metrics on this port")
        parser.add_argument("--health-port", type=_port, help="serve /healthz, /readyz, /livez on this port")
        parser.add_argument(
            "--endpoints-host", default="0.0.0.0", help="address for those ports (default all interfaces)"
        )

    def run(ctx: Any) -> int:
        args = ctx.args
        if args.metrics_port is not None or args.health_port is not None:
            from potatoq.metrics import install_worker_endpoints

            install_worker_endpoints(args.metrics_port, args.health_port, host=args.endpoints_host)
        return int(worker.run(ctx))

    return dataclasses.replace(worker, arguments=arguments, run=run)


def register(commands: dict[str, Any], command_type: Any) -> None:
    """Add ``dashboard`` to ``commands`` and the endpoint options to its ``worker``."""
    commands["dashboard"] = command_type(
        "dashboard", "serve the web dashboard (the [dashboard] extra)", cmd_dashboard, _dashboard_arguments
    )
    if "worker" in commands:
        commands["worker"] = _with_endpoint_options(commands["worker"])
