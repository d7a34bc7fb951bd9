"""``potatoq control …`` and ``potatoq events``: Celery's broadcast commands, answered.

Celery sends these to every worker over a broadcast channel; potatoq has none (workers
share state through the broker only), so each command is refused in one line that says
what does the job here. They exist so that a migrated script fails with that line (exit 2)
rather than with argparse's "invalid choice".
"""

from __future__ import annotations

import argparse

from .session import CliError, Exit, Registrar, Session, guarded

__all__ = ["INSTEAD", "register"]

#: Celery's ``control`` commands → what to do instead.
INSTEAD = {
    "shutdown": "send the worker SIGTERM (it finishes its tasks or requeues them)",
    "add_consumer": "start a worker with -Q for that queue",
    "cancel_consumer": "restart the worker with the -Q it should consume",
    "rate_limit": "set rate_limit on the task (or in task_annotations) and restart the workers",
    "time_limit": "set time_limit / soft_time_limit on the task and restart the workers",
    "pool_grow": "restart the worker with a larger -c",
    "pool_shrink": "restart the worker with a smaller -c",
    "autoscale": "run more workers (or a larger -c)",
    "revoke": "use `potatoq revoke ID`",
    "terminate": "use `potatoq revoke ID` (a running task finishes)",
    "enable_events": "there are no task events: `potatoq status` and the dashboard read heartbeats",
    "disable_events": "there are no task events",
    "heartbeat": "workers write heartbeats to the broker by themselves",
    "election": "every worker schedules periodic tasks; the broker runs each fire time once",
}


def _control_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", metavar="COMMAND", help=f"one of Celery's: {', '.join(INSTEAD)}")
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="its arguments (ignored)")


def cmd_control(session: Session) -> int:
    action = str(session.args.action)
    instead = INSTEAD.get(action)
    if instead is None:
        raise CliError(f"unknown control command {action!r}; Celery's are {', '.join(INSTEAD)}", Exit.USAGE)
    raise CliError(
        f"`control {action}` is not supported (potatoq has no broadcast channel): {instead}", Exit.USAGE
    )


def _events_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="Celery's options (ignored)")


def cmd_events(session: Session) -> int:
    raise CliError(
        "`events` is not supported: potatoq sends no task events; "
        "use `potatoq status`, `potatoq inspect active` or `potatoq dashboard`",
        Exit.USAGE,
    )


def register(command: Registrar) -> None:
    command(
        "control", "Celery's broadcast commands: each says what to use instead", arguments=_control_arguments
    )(guarded(cmd_control))
    command("events", "Celery's event monitor: says what to use instead", arguments=_events_arguments)(
        guarded(cmd_events)
    )
