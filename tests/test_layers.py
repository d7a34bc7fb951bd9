"""Which way imports run (DESIGN.md, "Which way imports run"), checked on the source.

Every ``import`` in potatoq/ is read with :mod:`ast`, those inside functions too (a lazy
import is still a dependency), and resolved to the potatoq module it names:

* a broker (``potatoq.brokers.<name>`` and everything in its package) imports only its own
  package, the contract (``brokers.base`` and the value types it re-exports from
  ``brokers.records``, ``brokers.history``; ``brokers.limits``, the concurrency-limit header
  and usage record; ``brokers.unique``, the unique-task header), the shared SQL helpers
  ``brokers.sqlfiles``, ``brokers.history_sql`` and ``brokers.history_rollup`` (the
  charts' per-minute rollups), the shared count estimates
  ``brokers.estimates``, and the bottom layer:
  ``message``, ``serialization``, ``exceptions`` and the leaf helpers ``states`` and
  ``utils``. Never the worker, the app, tasks, canvas or another broker;
* that bottom layer imports nothing above it, so a broker can't reach the app through it;
* the worker knows brokers only through the contract (and the URL registry);
* the core (app, task, canvas, result, config, eager, testing) never imports the CLI,
  ``contrib`` or the dashboard: those sit on top of it.

Imports of third-party packages (optional extras such as ``redis`` or ``pika``) are not
this test's business; only edges between potatoq's own modules are checked.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "potatoq"

BROKERS = ("memory", "sqlite", "postgres", "redis", "rabbitmq")
CONTRACT = (
    "potatoq.brokers.base",
    "potatoq.brokers.records",
    "potatoq.brokers.limits",
    "potatoq.brokers.unique",
    "potatoq.brokers.sqlfiles",
    "potatoq.brokers.history",
    "potatoq.brokers.sqlfiles",
    "potatoq.brokers.history_sql",
    "potatoq.brokers.history_buffer",
    "potatoq.brokers.estimates",
    "potatoq.brokers.history_compact",
    "potatoq.brokers.history_rollup",
)
BOTTOM = ("potatoq.message", "potatoq.serialization", "potatoq.exceptions", "potatoq.states", "potatoq.utils")
CORE = (
    "potatoq.app",
    "potatoq.task",
    "potatoq.canvas",
    "potatoq.result",
    "potatoq.config",
    "potatoq.eager",
    "potatoq.testing",
)
ON_TOP = ("potatoq.cli", "potatoq.cli_ops", "potatoq.contrib", "potatoq.dashboard")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.cache
def modules() -> dict[str, Path]:
    return {module_name(path): path for path in ROOT.rglob("*.py")}


def within(name: str, prefix: str) -> bool:
    """``name`` is the module ``prefix`` or inside the package ``prefix``."""
    return name == prefix or name.startswith(prefix + ".")


@functools.cache
def imports_of(name: str) -> frozenset[str]:
    """The potatoq modules ``name`` imports, wherever in the file the import statement is."""
    path = modules()[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            # ``from pkg import mod`` imports the module pkg.mod; ``from mod import name``
            # imports mod.
            submodules = {f"{source}.{alias.name}" for alias in node.names} & modules().keys()
            found.update(submodules or {source})
            if len(submodules) < len(node.names):
                found.add(source)
    return frozenset(n for n in found if within(n, "potatoq"))


def broker_of(name: str) -> str | None:
    for broker in BROKERS:
        if within(name, f"potatoq.brokers.{broker}"):
            return broker
    return None


def test_the_checker_sees_imports_inside_functions_and_relative_ones() -> None:
    # result imports the app lazily, inside a method; the registry imports base relatively.
    assert "potatoq.app" in imports_of("potatoq.result")
    assert "potatoq.brokers.base" in imports_of("potatoq.brokers")
    assert "potatoq.brokers.sqlfiles" in imports_of("potatoq.brokers.sqlite.setup")
    assert {f"potatoq.brokers.{b}" for b in BROKERS} <= modules().keys()


@pytest.mark.parametrize("broker", BROKERS)
def test_a_broker_imports_only_its_package_the_contract_and_the_bottom_layer(broker: str) -> None:
    package = f"potatoq.brokers.{broker}"
    wrong = {
        f"{name} imports {target}"
        for name in modules()
        if within(name, package)
        for target in imports_of(name)
        if not within(target, package)
        and not any(within(target, allowed) for allowed in (*CONTRACT, *BOTTOM))
        and target != "potatoq"  # ``from potatoq import serialization`` names the package
    }
    assert not wrong, sorted(wrong)


def test_the_contract_and_the_bottom_layer_import_nothing_above_them() -> None:
    wrong = {
        f"{name} imports {target}"
        for name in modules()
        if any(within(name, low) for low in (*CONTRACT, *BOTTOM))
        for target in imports_of(name)
        if target != "potatoq" and not any(within(target, low) for low in (*CONTRACT, *BOTTOM))
    }
    assert not wrong, sorted(wrong)


def test_the_worker_knows_brokers_only_through_the_contract() -> None:
    wrong = {
        f"{name} imports {target}"
        for name in modules()
        if within(name, "potatoq.worker")
        for target in imports_of(name)
        if within(target, "potatoq.brokers") and target != "potatoq.brokers" and target not in CONTRACT
    }
    assert not wrong, sorted(wrong)


def test_the_core_never_imports_the_cli_contrib_or_the_dashboard() -> None:
    wrong = {
        f"{name} imports {target}"
        for name in modules()
        if any(within(name, core) for core in CORE)
        for target in imports_of(name)
        if any(within(target, top) for top in ON_TOP)
    }
    assert not wrong, sorted(wrong)


def test_tasks_signatures_and_results_reach_the_eager_runner_through_the_app() -> None:
    # task.apply() and task_always_eager call app.apply_eagerly(): the eager runner (which
    # builds on canvas, result and testing) sits above them, not in a circle with them.
    wrong = {
        f"{name} imports {target}"
        for name in ("potatoq.task", "potatoq.canvas", "potatoq.result")
        for target in imports_of(name)
        if target in ("potatoq.eager", "potatoq.testing")
    }
    assert not wrong, sorted(wrong)


def test_no_broker_module_is_longer_than_about_600_lines() -> None:
    # One module, one concern: a broker module far past this has grown a second job.
    long = {
        f"{name}: {lines} lines"
        for name, path in modules().items()
        if within(name, "potatoq.brokers")
        and (lines := len(path.read_text(encoding="utf-8").splitlines())) > 650
    }
    assert not long, sorted(long)
