"""``potatoq shell``: Python with ``app`` and the app's tasks already imported.

On a terminal it is an interactive console (tab completion where ``readline`` exists). With
stdin piped in (``echo 'print(add.delay(2, 3).id)' | potatoq -A proj shell``) or ``-c CODE``
the code runs as one program, so scripts behave as they read; an exception in it prints
its traceback and exits 1.
"""

from __future__ import annotations

import argparse
import code
import sys
import traceback
from typing import Any

from .session import Exit, Registrar, Session, guarded

__all__ = ["namespace", "register"]


def namespace(app: Any) -> dict[str, Any]:
    """What the shell starts with: the app, canvas helpers, and each task by its short name.

    A task is also reachable as ``app.tasks["full.name"]``; a short name shared by two tasks
    is left out rather than pick one silently. potatoq's own tasks (``potatoq.*``) are skipped.
    """
    import potatoq
    from potatoq import states

    found: dict[str, Any] = {
        "app": app,
        "celery": app,
        "potatoq": potatoq,
        "states": states,
        "AsyncResult": app.AsyncResult,
        "signature": potatoq.signature,
        "chain": potatoq.chain,
        "group": potatoq.group,
        "chord": potatoq.chord,
        "chunks": potatoq.chunks,
    }
    by_short: dict[str, list[Any]] = {}
    for name, task in sorted(app.tasks.items()):
        if name.startswith("potatoq."):
            continue
        by_short.setdefault(name.rsplit(".", 1)[-1], []).append(task)
    for short, tasks in by_short.items():
        if len(tasks) == 1 and short.isidentifier() and short not in found:
            found[short] = tasks[0]
    return found


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-c", "--command", dest="code", metavar="CODE", help="run CODE and exit")


def _run(source: str, where: str, names: dict[str, Any]) -> int:
    try:
        exec(compile(source, where, "exec"), names)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except Exception:  # noqa: BLE001 - the user's code: show its traceback, exit 1
        traceback.print_exc()
        return 1
    return 0


def cmd_shell(session: Session) -> int:
    """An interactive Python with app and the tasks loaded."""
    app = session.app
    app.finalize()
    names = namespace(app)
    names["__name__"] = "__console__"
    if session.args.code is not None:
        return _run(session.args.code, "<potatoq shell -c>", names)
    if not sys.stdin.isatty():
        return _run(sys.stdin.read(), "<stdin>", names)
    try:
        import readline
        import rlcompleter

        readline.set_completer(rlcompleter.Completer(names).complete)
        readline.parse_and_bind("tab: complete")
    except ImportError:  # pragma: no cover - no readline on this Python
        pass
    tasks = sorted(k for k, v in names.items() if k not in {"app", "celery"} and v in app.tasks.values())
    banner = (
        f"potatoq shell: app = {app!r}\n"
        f"tasks: {', '.join(tasks) or '(none)'}; also chain, group, chord, signature, AsyncResult"
    )
    code.interact(banner=banner, local=names, exitmsg="")
    return Exit.OK


def register(command: Registrar) -> None:
    command("shell", "Python with app and its tasks loaded (stdin or -c runs code)", arguments=_arguments)(
        guarded(cmd_shell)
    )
