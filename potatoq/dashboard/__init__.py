"""The web dashboard (the ``[dashboard]`` extra: Starlette, Jinja2, uvicorn).

``create_app(potatoq_app, read_only=False, auth=None, redact_args=False)`` returns an ASGI
app; ``potatoq dashboard`` serves it. Importing this package doesn't import Starlette, so
the CLI can register its command without the extra installed; nor its security module
(hashlib, hmac, secrets): a worker process, which imports the CLI, never loads them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import create_app
    from .security import Auth, InsecureBind, check_bind

__all__ = ["Auth", "InsecureBind", "check_bind", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from .app import create_app

        return create_app
    if name in ("Auth", "InsecureBind", "check_bind"):
        from . import security

        return getattr(security, name)
    raise AttributeError(name)
