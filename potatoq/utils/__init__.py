"""Small helpers shared across layers."""

from __future__ import annotations

import re

# scheme://user:password@ — the password may (wrongly, but it happens) hold '/' or '@'
# unencoded: mask up to the last '@' of the URL rather than show any part of it.
_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.\-]*://)(?P<user>[^:@/\s'\"]*):[^\s'\"]*@")
# ?password=… / &sslpassword=… : libpq and redis-py both read credentials from the query too
_QUERY_SECRET = re.compile(r"(?P<key>[?&;](?:ssl)?(?:password|passwd|pwd)=)[^&;#\s'\"]*", re.IGNORECASE)


def mask_url(url: str) -> str:
    """``url`` with any password replaced by ``***``, for logs and CLI output."""
    masked = _CREDENTIALS.sub(lambda m: f"{m['scheme']}{m['user']}:***@", url)
    return _QUERY_SECRET.sub(lambda m: f"{m['key']}***", masked)
