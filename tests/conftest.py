"""Shared fixtures: every broker in the contract suite, each isolated per test.

Each broker has a module in ``tests/factories/`` defining ``NAME`` and
``make_config(ctx) -> BrokerConfig``; the ``broker`` fixture runs a test once per module.
"""

from __future__ import annotations

import contextlib
import importlib
import pkgutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from potatoq.brokers import create_broker
from potatoq.brokers.base import Broker, BrokerConfig

from . import factories, services


@dataclass
class FactoryContext:
    """What a broker factory gets: a temp dir, a unique name and a place to register cleanup."""

    tmp_path: Path
    unique: str
    overrides: dict[str, Any]
    finalizers: list[Callable[[], None]] = field(default_factory=list)

    def cleanup(self, fn: Callable[[], None]) -> None:
        self.finalizers.append(fn)


def _factory_modules() -> dict[str, Any]:
    found = {}
    for info in pkgutil.iter_modules(factories.__path__):
        module = importlib.import_module(f"{factories.__name__}.{info.name}")
        if hasattr(module, "make_config"):
            found[module.NAME] = module
    return dict(sorted(found.items(), key=lambda kv: getattr(kv[1], "ORDER", 50)))


FACTORIES = _factory_modules()


class BrokerMaker:
    """Makes brokers (and their configs) for one broker kind, all sharing one isolated namespace."""

    def __init__(self, name: str, module: Any, tmp_path: Path) -> None:
        self.name = name
        self.module = module
        self.ctx = FactoryContext(tmp_path=tmp_path, unique=f"t{uuid.uuid4().hex[:10]}", overrides={})
        self.brokers: list[Broker] = []
        self._config: BrokerConfig | None = None

    def config(self, **overrides: Any) -> BrokerConfig:
        """The isolated config; ``overrides`` replace BrokerConfig fields."""
        if self._config is None:
            self._config = self.module.make_config(self.ctx)
        import dataclasses

        return dataclasses.replace(self._config, **overrides) if overrides else self._config

    def __call__(self, **overrides: Any) -> Broker:
        broker = create_broker(self.config(**overrides))
        self.brokers.append(broker)
        return broker

    def close(self) -> None:
        for broker in self.brokers:
            with contextlib.suppress(Exception):
                broker.close()
        for fn in reversed(self.ctx.finalizers):
            fn()


@pytest.fixture(params=list(FACTORIES))
def make_broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BrokerMaker]:
    """A maker of isolated brokers, once per broker kind in ``tests/factories``."""
    module = FACTORIES[request.param]
    service = getattr(module, "SERVICE", None)
    if service:
        services.require(service)
    maker = BrokerMaker(request.param, module, tmp_path)
    yield maker
    maker.close()


@pytest.fixture
def broker(make_broker: BrokerMaker) -> Broker:
    return make_broker()


#: Parameter values that put a test on a server: the services, and the factories that use one.
SERVER_PARAMS = set(services.DEFAULTS) | {n for n, m in FACTORIES.items() if getattr(m, "SERVICE", None)}


#: Fixtures that put a test on a SQLite file shared with real worker/CLI processes.
SQLITE_FIXTURES = {"env"}


def _brokers_of(item: pytest.Item) -> set[str]:
    """The broker-ish words of the item's parameters (``"postgres+memory-broker"`` gives both)."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return set()
    return {part for value in callspec.params.values() if isinstance(value, str) for part in value.split("+")}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``server`` the tests parametrized onto a broker that needs a server, and ``sqlite``
    those on the SQLite broker (parametrized onto it, or using a fixture of ``SQLITE_FIXTURES``).

    That covers every fixture that runs a test once per broker (``make_broker``,
    ``broker_env``, ``fault_env``, the guide's ``world``, the integrations' layouts), so a new
    test on one of them lands in the right bucket by itself: ``make test-fast`` keeps only
    their memory-broker copies. A test that asks for a server in its own body is caught at
    run time by ``services.require``.
    """
    for item in items:
        words = _brokers_of(item)
        if words & SERVER_PARAMS:
            item.add_marker(pytest.mark.server)
        if "sqlite" in words or SQLITE_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.sqlite)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if services.UNREACHABLE:
        terminalreporter.section("UNREACHABLE SERVICES: their tests were skipped", sep="!", red=True)
        for name, problem in services.UNREACHABLE.items():
            terminalreporter.write_line(f"  {name}: {problem}", red=True)
