"""``python manage.py potatoq COMMAND …``: the ``potatoq`` command, with the project's app.

Every ``potatoq`` command works (``worker``, ``beat``, ``migrate`` …), with the same options;
``-A`` is filled in with the app made from Django's settings.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any

from django.core.management.base import BaseCommand

APP_SPEC = "potatoq.contrib.django:app"

# Django's own options, already applied by manage.py before the command runs.
_DJANGO_OPTIONS = ("--settings", "--pythonpath")


def potatoq_argv(argv: list[str]) -> list[str]:
    """``manage.py potatoq ARGS`` → the ``potatoq`` command line, with ``-A`` and without
    Django's ``--settings``/``--pythonpath``."""
    rest: list[str] = []
    skip = False
    for arg in argv[2:]:
        if skip:
            skip = False
            continue
        if arg in _DJANGO_OPTIONS:
            skip = True
            continue
        if arg.startswith(tuple(o + "=" for o in _DJANGO_OPTIONS)):
            continue
        rest.append(arg)
    return ["-A", APP_SPEC, *rest]


class Command(BaseCommand):  # type: ignore[misc]  # Django ships no types
    help = "Run a potatoq command (worker, beat, migrate …) with this project's app."

    def run_from_argv(self, argv: list[str]) -> None:
        from potatoq.contrib.django import get_app

        get_app()  # a clear error now if the app isn't configured
        status = _cli_main(potatoq_argv(argv))
        sys.exit(status)

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("args", nargs=argparse.REMAINDER, help="a potatoq command and its options")

    def print_help(self, prog_name: str, subcommand: str) -> None:
        _cli_main(["--help"])

    def handle(self, *args: Any, **options: Any) -> None:
        # call_command("potatoq", "migrate") arrives here instead of run_from_argv.
        status = _cli_main(["-A", APP_SPEC, *args])
        if status:
            sys.exit(status)


def _cli_main(argv: list[str]) -> int:
    main = importlib.import_module("potatoq.cli").main  # the worker's package, imported when used
    try:
        return int(main(argv))
    except SystemExit as exc:  # argparse's --help and usage errors
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
