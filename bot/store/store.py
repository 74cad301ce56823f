"""The store: PolicyPal's tables behind one object per process, one repository per aggregate.

Repositories: ``inbox`` (events written before their ack), ``outbox`` (platform writes and helpdesk
deliveries), ``threads`` (history, places), ``runs`` and ``workers`` (runs and the processes'
heartbeats), ``pending`` (pending actions), ``tickets`` (local tickets), ``cases`` (helpdesk cases),
``rates`` (rate windows), ``joins`` (who joined which place, for member lists), ``stops`` (Stop
pressed in a conversation, for its runs on every replica) and ``reports`` (the operators' console's
reads). ``transaction()`` lets writes that belong together commit together.

Statements are single statements wherever correctness across processes depends on it: a claim is
one ``INSERT ... ON CONFLICT DO NOTHING``, a pending transition one ``UPDATE ... WHERE id = :id AND
state IN (...)``, an outbox delivery is claimed by one ``UPDATE ... WHERE id = :id AND (due or
stale)``; the affected row count is the answer, so no process ever acts on a stale read. The tables
are in ``bot.store.tables``; what the repositories return, in ``bot.store.records`` (plain frozen
values, never ORM rows).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from bot.store.cases import Cases
from bot.store.engine import SchemaPolicy, open_ack_engine, open_engine
from bot.store.inbox import InboxRows
from bot.store.joins import PlaceJoins
from bot.store.outbox import OutboxRows
from bot.store.pending import PendingRows
from bot.store.rates import RateWindows
from bot.store.reports import Reports
from bot.store.runs import Runs, Workers
from bot.store.stops import StopRequests
from bot.store.threads import Threads
from bot.store.tickets import TicketRows

ACK_WRITERS = 2  # PostgreSQL: a burst's next batch of events is written while the first is


class Store:
    """Async access to PolicyPal's tables; open one per process and share it."""

    def __init__(self, engine: AsyncEngine, ack_engine: AsyncEngine | None = None) -> None:
        self._engine = engine
        self._ack_engine = ack_engine
        self.inbox = InboxRows(engine, ack_engine or engine)
        self.outbox = OutboxRows(engine)
        self.threads = Threads(engine)
        self.runs = Runs(engine)
        self.workers = Workers(engine)
        self.pending = PendingRows(engine)
        self.tickets = TicketRows(engine)
        self.cases = Cases(engine)
        self.rates = RateWindows(engine)
        self.joins = PlaceJoins(engine)
        self.stops = StopRequests(engine)
        self.reports = Reports(engine)

    @classmethod
    async def open(
        cls, url: str, *, connect_args: Mapping[str, Any] | None = None, schema: SchemaPolicy = "auto"
    ) -> Store:
        """Connect and make sure the schema is this release's; ``connect_args`` go to the driver.

        ``schema``: "upgrade" migrates to head, "require" refuses (``DatabaseNotReady``) unless at head,
        "auto" upgrades the embedded SQLite default and requires PostgreSQL to be upgraded by an
        operator (``policypal db upgrade``), since replicas share it. See ``bot.store.migrate``.
        """
        engine = await open_engine(url, connect_args, schema)
        ack_engine = open_ack_engine(engine, url, connect_args)
        store = cls(engine, ack_engine)
        async with contextlib.AsyncExitStack() as warm:  # connected now: a burst's acks wait for no login
            for _ in range(store.ack_writers):
                conn = await warm.enter_async_context(ack_engine.connect())
                await conn.execute(select(1))
        return store

    @property
    def ack_writers(self) -> int:
        """How many inbox writes may run at once: SQLite has one writer; PostgreSQL takes them side by side."""
        return 1 if self._engine.dialect.name == "sqlite" else ACK_WRITERS

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncConnection]:
        """One transaction for several repositories' writes (pass it as ``conn=``): all commit, or none."""
        async with self._engine.begin() as conn:
            yield conn

    async def ping(self) -> None:
        """One round trip to the database, for readiness checks."""
        async with self._engine.connect() as conn:
            await conn.execute(select(1))

    async def close(self) -> None:
        """Release every pooled connection."""
        if self._ack_engine is not None:
            await self._ack_engine.dispose()
        await self._engine.dispose()
