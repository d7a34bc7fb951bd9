"""Asking before a destructive command (``purge``, ``dead purge``) unless ``-f`` is given."""

from __future__ import annotations

import sys

from .session import Session

__all__ = ["confirm"]


def confirm(session: Session, question: str) -> bool:
    """True when the user answers yes; end of input (``</dev/null``, a closed pipe) is no.

    The question goes to stderr so that stdout stays the command's output.
    """
    session.err.write(f"{question} (use -f to skip this question) [y/N] ")
    session.err.flush()
    try:
        answer = input()
    except EOFError:
        session.err.write("\n")
        return False
    if not sys.stdin.isatty():  # a piped answer isn't echoed: show it, so the log reads right
        session.err.write(answer + "\n")
    return answer.strip().lower() in {"y", "yes"}
