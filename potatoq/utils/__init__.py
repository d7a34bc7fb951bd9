"""Small helpers shared across layers."""

from __future__ import annotations

import re

_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.\-]*://)(?P<user>[^:@/]*):[^@/]*@")


def mask_url(url: str) -> str:
    """``url`` with any password replaced by ``***``, for logs and CLI output."""
    return _CREDENTIALS.sub(lambda m: f"{m['scheme']}{m['user']}:***@", url)
