"""Small helpers shared across layers."""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import unquote

# "scheme://": where a URL's userinfo may start.
_SCHEME = re.compile(r"[a-zA-Z][a-zA-Z0-9+.\-]*://")
# A user name shown as it is: anything else (a space, an unencoded '@' …) means the URL is
# malformed, and then no part of the userinfo is shown.
_PLAIN_USER = re.compile(r"[\w.~%!$&*+,;=\-]*")
# Characters that end a URL quoted in a message ('…', "…", <…>).
_QUOTES = re.compile(r"['\"<>]")
# ?password=… / &sslpassword=… : libpq and redis-py both read credentials from the query too
_QUERY_SECRET = re.compile(r"(?P<key>[?&;](?:ssl)?(?:password|passwd|pwd)=)[^&;#\s'\"]*", re.IGNORECASE)


def _userinfo_end(text: str, start: int, stop: int) -> int:
    """Index of the '@' that ends the userinfo of the URL starting at ``start``, or -1.

    The last '@' before the next URL (or a quote): a password may (wrongly, but it happens)
    hold an unencoded '@', '#', '/' or a space, so nothing of it may be taken for the host.
    """
    quote = _QUOTES.search(text, start, stop)
    end = quote.start() if quote else stop
    return text.rfind("@", start, end)


def mask_url(url: str) -> str:
    """``url`` (or a text holding URLs) with every password replaced by ``***``, for logs
    and CLI output. A malformed userinfo is hidden whole."""
    starts = [m.end() for m in _SCHEME.finditer(url)]
    pieces: list[str] = []
    done = 0
    for i, start in enumerate(starts):
        stop = starts[i + 1] if i + 1 < len(starts) else len(url)
        at = _userinfo_end(url, start, stop)
        if at < start:
            continue
        user, colon, _password = url[start:at].partition(":")
        if not colon and _PLAIN_USER.fullmatch(user):
            continue  # a user name alone: nothing secret
        shown = f"{user}:***" if colon and _PLAIN_USER.fullmatch(user) else "***"
        pieces += [url[done:start], shown]
        done = at
    masked = "".join(pieces) + url[done:]
    return _QUERY_SECRET.sub(lambda m: f"{m['key']}***", masked)


def url_secrets(url: str) -> tuple[list[str], list[str]]:
    """The passwords of ``url`` (whole), and the fragments of them a client library might
    print (split at the characters a URL parser cuts at), each longest first."""
    whole: set[str] = set()
    found: set[str] = set()
    for match in _SCHEME.finditer(url):
        at = _userinfo_end(url, match.end(), len(url))
        if at < match.end():
            continue
        userinfo = url[match.end() : at]
        user, colon, password = userinfo.partition(":")
        secret = password if colon and _PLAIN_USER.fullmatch(user) else userinfo
        for text in (secret, unquote(secret)):
            whole.add(text)
            found.update(re.split(r"[:@#/?\s]+", text))
    for match in _QUERY_SECRET.finditer(url):
        whole.add(url[match.end("key") : match.end()])
    # Fragments of one or two characters would blank out ordinary words: too short to matter.
    return _longest_first(whole), _longest_first(found - whole)


def _longest_first(texts: set[str]) -> list[str]:
    return sorted((t for t in texts if len(t) >= 3), key=len, reverse=True)


def scrub(text: str, urls: Iterable[str]) -> str:
    """``text`` (an error message) with the URLs masked and any piece of their passwords
    replaced by ``***``, wherever a client library put it (e.g. "can't resolve host
    'pass@db'" from a password with an unencoded '@')."""
    text = mask_url(text)
    for url in urls:
        whole, fragments = url_secrets(url)
        for secret in whole:
            text = text.replace(secret, "***")
        for fragment in fragments:  # as a word: "pass" of "secret pass" leaves "password" be
            text = re.sub(rf"(?<![^\W_]){re.escape(fragment)}(?![^\W_])", "***", text)
    return text
