"""The store: PolicyPal's tables behind one object per process, one repository per aggregate.

Repositories: ``threads`` (event dedupe, history, places), ``runs`` and ``workers`` (runs and the
processes' heartbeats), ``pending`` (pending actions), ``tickets`` (local tickets), ``cases``
(helpdesk cases and their outbox) and ``rates`` (rate windows).

Statements are single statements wherever correctness across processes depends on it: a claim is
one ``INSERT ... ON CONFLICT DO NOTHING``, a pending transition one ``UPDATE ... WHERE id = :id AND
state IN (...)``, an outbox delivery is claimed by one ``UPDATE ... WHERE id = :id AND (due or
stale)``; the affected row count is the answer, so no process ever acts on a stale read. The tables
are in ``bot.store.tables``; what the repositories return, in ``bot.store.records`` (plain frozen
values, never ORM rows).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.store.cases import Cases
from bot.store.engine import SchemaPolicy, open_engine
from bot.store.pending import PendingRows
from bot.store.rates import RateWindows
from bot.store.runs import Runs, Workers
from bot.store.threads import Threads
from bot.store.tickets import TicketRows


class Store:
    """Async access to PolicyPal's tables; open one per process and share it."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self.threads = Threads(engine)
        self.runs = Runs(engine)
        self.workers = Workers(engine)
        self.pending = PendingRows(engine)
        self.tickets = TicketRows(engine)
        self.cases = Cases(engine)
        self.rates = RateWindows(engine)

    @classmethod
    async def open(
        cls, url: str, *, connect_args: Mapping[str, Any] | None = None, schema: SchemaPolicy = "auto"
    ) -> Store:
        """Connect and make sure the schema is this release's; ``connect_args`` go to the driver.

        ``schema``: "upgrade" migrates to head, "require" refuses (``DatabaseNotReady``) unless at head,
        "auto" upgrades the embedded SQLite default and requires PostgreSQL to be upgraded by an
        operator (``policypal db upgrade``), since replicas share it. See ``bot.store.migrate``.
        """
        return cls(await open_engine(url, connect_args, schema))

    async def ping(self) -> None:
        """One round trip to the database, for readiness checks."""
        async with self._engine.connect() as conn:
            await conn.execute(select(1))

    async def close(self) -> None:
        """Release every pooled connection."""
        await self._engine.dispose()
