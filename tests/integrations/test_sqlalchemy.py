"""SQLAlchemy sessions: tasks follow the session's transaction, on SQLite and PostgreSQL
(psycopg 3) engines, with the broker in the same database or elsewhere (memory://)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("sqlalchemy")

from sqlalchemy import ForeignKey, String, create_engine, text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from potatoq import Potatoq
from potatoq.contrib.sqlalchemy import SessionTransactions, follow_transactions
from potatoq.testing import drain
from tests import services


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(primary_key=True)
    item: Mapped[str] = mapped_column(String(50))


class Shipment(Base):
    __tablename__ = "shipments"
    id: Mapped[int] = mapped_column(primary_key=True)
    order_id: Mapped[int] = mapped_column(ForeignKey("orders.id"))


@dataclass
class Setup:
    app: Potatoq
    engine: Engine
    Session: sessionmaker[Session]
    follower: SessionTransactions
    same_database: bool

    def waiting(self) -> int:
        """Tasks as the broker sees them (its own connection: committed rows only)."""
        return sum(s.waiting + s.delayed for s in self.app.broker.queue_stats())

    def shipped(self) -> list[str]:
        with self.Session() as session:
            rows = session.execute(text("SELECT o.item FROM shipments s JOIN orders o ON o.id = s.order_id"))
            return sorted(r[0] for r in rows)


LAYOUTS = ["sqlite", "postgres", "sqlite+memory-broker", "postgres+memory-broker"]


@pytest.fixture(params=LAYOUTS)
def setup(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Setup]:
    layout: str = request.param
    unique = uuid.uuid4().hex[:10]
    schema = None
    if layout.startswith("postgres"):
        url = services.require("postgres")
        schema = f"pq_sa_{unique}"
        admin = create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
        with admin.begin() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        engine = create_engine(
            url.replace("postgresql://", "postgresql+psycopg://"),
            connect_args={"options": f"-csearch_path={schema}"},
        )
        broker_url = url
        options = {"schema": schema}
    else:
        path = tmp_path / "app.sqlite3"
        engine = create_engine(f"sqlite:///{path}")
        broker_url = f"sqlite:///{path}"
        options = {"busy_timeout": 300}  # the lock test below waits this long
    same = not layout.endswith("memory-broker")
    if not same:
        broker_url, options = f"memory://sa-{unique}", {}
    app = Potatoq(f"sa{unique}", broker=broker_url, broker_transport_options=options, set_as_current=False)
    Base.metadata.create_all(engine)
    app.broker.migrate()  # the broker's tables exist before the first transaction uses them
    maker = sessionmaker(engine)

    @app.task(name="ship")
    def ship(order_id: int) -> str:
        with maker.begin() as session:
            order = session.get(Order, order_id)
            assert order is not None, "the task ran before its order was committed"
            session.add(Shipment(order_id=order_id))
            return order.item

    @app.task(name="note", enqueue_on_commit=False)
    def note(text_: str) -> str:
        return text_

    follower = follow_transactions(app, maker)
    try:
        yield Setup(app, engine, maker, follower, same)
    finally:
        follower.uninstall()
        app.close()
        engine.dispose()
        if schema is not None:
            with admin.begin() as conn:
                conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
            admin.dispose()


def test_commit_sends_the_task_and_it_sees_the_committed_row(setup: Setup) -> None:
    with setup.Session.begin() as session:
        order = Order(item="book")
        session.add(order)
        session.flush()
        result = setup.app.tasks["ship"].delay(order.id)
        assert setup.waiting() == 0  # not visible outside the transaction yet
        if setup.same_database:  # … but already written in it
            count = session.execute(
                text("SELECT COUNT(*) FROM potatoq_jobs WHERE id = :id"), {"id": result.id}
            ).scalar_one()
            assert count == 1
    assert setup.waiting() == 1
    assert drain(setup.app, fast_forward=False) == 1
    assert result.get(timeout=5) == "book"
    assert setup.shipped() == ["book"]


def test_rollback_drops_the_task(setup: Setup) -> None:
    with pytest.raises(RuntimeError), setup.Session.begin() as session:
        order = Order(item="lamp")
        session.add(order)
        session.flush()
        setup.app.tasks["ship"].delay(order.id)
        raise RuntimeError("rolled back")
    session = setup.Session()
    session.add(Order(item="never committed"))
    session.flush()
    setup.app.tasks["ship"].delay(1)
    session.close()  # closing without commit is a rollback too
    assert setup.waiting() == 0
    assert drain(setup.app, fast_forward=False) == 0


def test_savepoints_keep_released_and_drop_rolled_back_tasks(setup: Setup) -> None:
    ship = setup.app.tasks["ship"]
    with setup.Session.begin() as session:
        kept = Order(item="kept")
        session.add(kept)
        session.flush()
        with session.begin_nested():
            ship.delay(kept.id)  # released savepoint: follows the outer transaction
        try:
            with session.begin_nested():
                dropped = Order(item="dropped")
                session.add(dropped)
                session.flush()
                ship.delay(dropped.id)
                raise RuntimeError("roll back the savepoint")
        except RuntimeError:
            pass
        assert setup.waiting() == 0
    assert setup.waiting() == 1
    drain(setup.app, fast_forward=False)
    assert setup.shipped() == ["kept"]


# One writer per SQLite file: with the broker in the session's file, see the next test.
@pytest.mark.parametrize("setup", [x for x in LAYOUTS if x != "sqlite"], indirect=True)
def test_outside_a_transaction_and_opted_out_tasks_are_sent_at_once(setup: Setup) -> None:
    setup.app.tasks["note"].delay("no session")
    assert setup.waiting() == 1
    with pytest.raises(RuntimeError), setup.Session.begin() as session:
        session.add(Order(item="x"))
        session.flush()
        setup.app.tasks["note"].delay("opted out")  # enqueue_on_commit=False
        assert setup.waiting() == 2
        setup.app.tasks["note"].delay_on_commit("follows anyway")
        raise RuntimeError
    assert setup.waiting() == 2
    assert drain(setup.app, fast_forward=False) == 2


@pytest.mark.parametrize("setup", ["sqlite"], indirect=True)
def test_opted_out_task_on_a_locked_sqlite_file_says_why(setup: Setup) -> None:
    """SQLite, broker in the session's file: after the session has written, an opted-out
    task can't be sent outside the transaction (this thread holds the file's write lock)."""
    from potatoq.exceptions import OperationalError

    with setup.Session.begin() as session:
        session.add(Order(item="x"))
        session.flush()
        with pytest.raises(OperationalError, match="locked by this thread's own open transaction"):
            setup.app.tasks["note"].delay("opted out")
        setup.app.tasks["note"].delay_on_commit("follows")  # what the error suggests
    assert setup.waiting() == 1


def test_other_sessions_are_not_followed(setup: Setup) -> None:
    """Only sessions from the sessionmaker given to follow_transactions are followed."""
    with Session(setup.engine) as other, other.begin():
        other.execute(text("SELECT COUNT(*) FROM orders"))  # reads only: SQLite's lock stays free
        setup.app.tasks["note"].delay_on_commit("sent now")
        assert setup.waiting() == 1


def test_missing_broker_tables_on_a_locked_sqlite_file_say_what_to_do(tmp_path: Path) -> None:
    """The broker can't create its tables while the session holds the file's write lock."""
    from potatoq.exceptions import OperationalError

    path = tmp_path / "fresh.sqlite3"
    engine = create_engine(f"sqlite:///{path}")
    Base.metadata.create_all(engine)
    app = Potatoq(
        "fresh",
        broker=f"sqlite:///{path}",
        broker_transport_options={"busy_timeout": 200},
        set_as_current=False,
    )
    maker = sessionmaker(engine)
    follower = follow_transactions(app, maker)
    try:
        with maker.begin() as session:
            session.add(Order(item="x"))
            session.flush()
            with pytest.raises(OperationalError, match="create them before the transaction"):
                app.send_task("anything")
    finally:
        follower.uninstall()
        app.close()
        engine.dispose()
