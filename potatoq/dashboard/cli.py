"""``potatoq dashboard`` and the worker's ``--metrics-port`` / ``--health-port`` options.

:func:`register` is called once by ``potatoq.cli``. It adds the ``dashboard`` command and
wraps the ``worker`` command's registry entry with two options that install the metrics
and health endpoints (a ``worker_init`` receiver, see ``potatoq.metrics``) before the
worker runs: the worker code itself is unchanged.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any

__all__ = ["TOKEN_ENV", "register"]

#: the token from the environment: unlike ``--token`` it doesn't show in ``ps``
TOKEN_ENV = "POTATOQ_DASHBOARD_TOKEN"


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
    auth.add_argument(
        "--token", help=f"require this bearer token (better: set ${TOKEN_ENV}, which ps doesn't show)"
    )
    auth.add_argument("--basic-auth", metavar="USER:PASSWORD", help="require HTTP basic auth")
    parser.add_argument("--read-only", action="store_true", help="hide and refuse replay/purge")
    parser.add_argument(
        "--redact-args", action="store_true", help="show arguments, results and errors as [redacted]"
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        metavar="NAME",
        help="a host name it is reached by besides loopback ones (repeatable; default: the --host "
        "name, or any name when a token or basic auth is set)",
    )


def _dashboard_auth(args: argparse.Namespace) -> Any:
    from potatoq.cli import UsageError

    from .security import Auth, InsecureBind, check_bind

    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV) or None
    try:
        auth = Auth(token=token) if token is not None and args.basic_auth is None else None
        if args.basic_auth is not None:
            auth = Auth.basic(args.basic_auth)
        check_bind(args.host, auth)
    except (ValueError, InsecureBind) as exc:
        raise UsageError(str(exc)) from None
    return auth


def _allowed_hosts(args: argparse.Namespace, auth: Any) -> list[str] | None:
    """The ``Host`` names to answer to: those given, else the bound name (not a wildcard)."""
    if args.allowed_host:
        return list(args.allowed_host)
    if auth is not None:
        return None  # credentials protect it; a rebinding page has none
    return [] if args.host in ("0.0.0.0", "::", "") else [args.host]


def cmd_dashboard(ctx: Any) -> int:
    from potatoq.cli import UsageError

    args = ctx.args
    auth = _dashboard_auth(args)  # refuse an unsafe bind before importing or connecting anything
    try:
        import uvicorn

        from .app import create_app
    except ImportError as exc:
        raise UsageError(f"the dashboard needs its extra: pip install 'potatoq[dashboard]' ({exc})") from None
    app = create_app(
        ctx.app,
        read_only=args.read_only,
        auth=auth,
        redact_args=args.redact_args,
        allowed_hosts=_allowed_hosts(args, auth),
    )
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
            "--endpoints-host",
            default="127.0.0.1",
            help="address for those ports (default 127.0.0.1; 0.0.0.0 for a scraper on another host)",
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
