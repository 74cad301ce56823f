"""The local ticket backend on a real database (SQLite, and PostgreSQL when configured) whose connection
fails at each point of a ticket's write: before anything is written, during the COMMIT, after it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.exc import OperationalError

from bot.agent import ToolContext
from bot.errors import TicketError
from bot.policy_tools import ticket_result_text, ticket_tool
from bot.store import Store
from bot.tickets import LocalTickets, TicketRequest
from bot.types import UserRef
from tests.databases import POSTGRES_URL_ENV, _run_admin

ALICE = UserRef("U_ALICE", "Alice", "alice@example.com")
KEY = "pa_0123456789abcdef"  # the pending action id: the ticket row's idempotency key
ARGUMENTS = {"category": "network_vpn", "summary": "VPN fails with NG-809", "urgency": "high", "details": "wifi"}


def request() -> TicketRequest:
    return TicketRequest(**ARGUMENTS, requester=ALICE, idempotency_key=KEY)


async def confirmed(store: Store) -> dict[str, Any]:
    """The ticket tool's result for a confirmed call, as the requester's reply is written from it."""
    tool = ticket_tool(LocalTickets(store))
    return await tool.handler(dict(ARGUMENTS), ToolContext(ALICE, "run_1", "console::t1", idempotency_key=KEY))


@contextlib.contextmanager
def connection_lost_at_commit(store: Store, *, committed: bool) -> Iterator[None]:
    """Every COMMIT on the store's engine fails as a connection dropped at that moment does: the database
    either made the transaction durable (``committed``: only its answer was lost) or never got the COMMIT
    and rolled it back, and the client is told the connection was reset."""

    def lost(conn: Any) -> None:
        driver = conn.connection.dbapi_connection  # the real driver's connection, under SQLAlchemy's
        if committed:
            driver.commit()
        else:
            driver.rollback()
        raise OperationalError("COMMIT", {}, ConnectionResetError("connection reset by peer"))

    engine = store._engine.sync_engine
    event.listen(engine, "commit", lost)
    try:
        yield
    finally:
        event.remove(engine, "commit", lost)


async def test_a_ticket_committed_before_the_connection_dropped_is_found_and_reported_created(store: Store) -> None:
    with connection_lost_at_commit(store, committed=True):
        ticket = await LocalTickets(store).create(request())
    assert ticket.id == "IT-1001"
    assert await store.tickets.count() == 1 and await store.tickets.find(KEY) == 1
    assert (await LocalTickets(store).create(request())).id == "IT-1001"  # and still one ticket per key


async def test_a_connection_lost_at_the_commit_leaves_the_ticket_unknown_never_not_created(store: Store) -> None:
    with connection_lost_at_commit(store, committed=False):
        with pytest.raises(TicketError) as caught:
            await LocalTickets(store).create(request())
        result = await confirmed(store)
    assert caught.value.kind == "unknown"
    assert result["status"] == "unknown" and result["kind"] == "unknown"
    told = ticket_result_text(result)
    assert told.startswith("I couldn't tell whether the ticket was created") and "not created" not in told
    assert await store.tickets.count() == 0  # it was not, in fact; nobody could have told at the time


async def test_a_postgres_session_killed_just_before_its_commit_leaves_the_ticket_unknown(store: Store) -> None:
    if store._engine.dialect.name != "postgresql":
        pytest.skip("a SQLite connection lives in this process: no server can end it")
    url = os.environ[POSTGRES_URL_ENV]

    def killed(conn: Any) -> None:  # the server ends the session, and has ended it when the COMMIT goes out
        pid = conn.connection.driver_connection.get_server_pid()
        with ThreadPoolExecutor(1) as admin:
            admin.submit(asyncio.run, _run_admin(url, f"SELECT pg_terminate_backend({pid}, 5000)")).result()

    engine = store._engine.sync_engine
    event.listen(engine, "commit", killed)
    try:
        with pytest.raises(TicketError) as caught:
            await LocalTickets(store).create(request())
    finally:
        event.remove(engine, "commit", killed)
    assert caught.value.kind == "unknown"
    assert await store.tickets.count() == 0


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_database_that_cannot_be_reached_means_no_ticket(store: Store, tmp_path: Path) -> None:
    def unreachable(dialect: Any, record: Any, cargs: list[Any], cparams: dict[str, Any]) -> None:
        if dialect.name == "sqlite":
            cargs[0] = str(tmp_path / "no such folder" / "policypal.db")  # SQLite cannot open the file
        else:
            cparams.update(host="127.0.0.1", port=_closed_port())  # nobody listens: connection refused

    engine = store._engine.sync_engine
    await store._engine.dispose()  # no pooled connection left: the next one must be opened
    event.listen(engine, "do_connect", unreachable)
    try:
        with pytest.raises(TicketError) as caught:
            await LocalTickets(store).create(request())
        result = await confirmed(store)
    finally:
        event.remove(engine, "do_connect", unreachable)
    assert caught.value.kind == "unavailable"
    assert result["status"] == "failed" and result["error"].startswith("The ticket was not created")
    assert await store.tickets.count() == 0
