"""Helpdesk cases. A case is inserted once per origin together with one outbox row per destination
(``bot.store.outbox`` claims and settles them).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.store.columns import utcnow
from bot.store.engine import Repository
from bot.store.outbox import new_case_delivery
from bot.store.records import (
    HandoffRecord,
    to_handoff_record,
)
from bot.store.tables import (
    Handoff,
    OutboxRow,
)

log = logging.getLogger(__name__)


class Cases(Repository):
    """Helpdesk cases and their outbox: one case per origin, one delivery row per destination."""

    async def create(
        self,
        origin: str,
        fields: Mapping[str, Any],
        destinations: Sequence[str],
        *,
        conn: AsyncConnection | None = None,
    ) -> tuple[HandoffRecord, bool]:
        """Insert a case once per origin, with one outbox row per destination, in one transaction.

        Returns the stored case and whether this call created it; a second call with the same origin
        (a retry, another replica) gets the first case back and adds no deliveries.
        """
        now = utcnow()
        stmt = self._insert(Handoff).values(origin=origin, created_at=now, **fields)
        stmt = stmt.on_conflict_do_nothing(index_elements=["origin"])
        query = select(Handoff.__table__).where(Handoff.origin == origin)
        async with self._begin(conn) as tx:
            if (row := (await tx.execute(query)).first()) is not None:  # a repeat: no sequence gap
                return to_handoff_record(row), False
            created = (await tx.execute(stmt)).rowcount == 1
            row = (await tx.execute(query)).one()
            if created and destinations:
                outbox = [new_case_delivery(row.number, name, now) for name in dict.fromkeys(destinations)]
                await tx.execute(insert(OutboxRow), outbox)
        return to_handoff_record(row), created

    async def get(self, number: int) -> HandoffRecord | None:
        """One case by number."""
        async with self._engine.connect() as conn:
            row = (await conn.execute(select(Handoff.__table__).where(Handoff.number == number))).first()
        return to_handoff_record(row) if row else None

    async def recent(
        self, limit: int = 20, *, failed_only: bool = False, before: int | None = None
    ) -> list[HandoffRecord]:
        """The newest cases first; ``failed_only``: those with a delivery that gave up; ``before``: older
        than that case number (the next page)."""
        stmt = select(Handoff.__table__).order_by(Handoff.number.desc()).limit(limit)
        if before is not None:
            stmt = stmt.where(Handoff.number < before)
        if failed_only:
            failed = select(OutboxRow.case_number).where(OutboxRow.state == "failed")
            stmt = stmt.where(Handoff.number.in_(failed))
        async with self._engine.connect() as conn:
            return [to_handoff_record(row) for row in await conn.execute(stmt)]
