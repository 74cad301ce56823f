"""The local ticket backend's rows: one ticket per idempotency key, numbered by the database."""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import func, select

from bot.store.columns import utcnow
from bot.store.engine import Repository
from bot.store.tables import (
    TicketRow,
)

log = logging.getLogger(__name__)


class TicketRows(Repository):
    """The local ticket backend's tickets, one per idempotency key."""

    async def create(self, idempotency_key: str, **fields: Any) -> tuple[int, bool]:
        """Insert a ticket once per idempotency key; returns (number, created now)."""
        stmt = self._insert(TicketRow).values(idempotency_key=idempotency_key, created_at=utcnow(), **fields)
        stmt = stmt.on_conflict_do_nothing(index_elements=["idempotency_key"])
        query = select(TicketRow.number).where(TicketRow.idempotency_key == idempotency_key)
        async with self._engine.begin() as conn:
            # Looking first keeps PostgreSQL's sequence from skipping a number on every repeat;
            # the conditional INSERT still decides a race.
            if (number := await conn.scalar(query)) is not None:
                return int(number), False
            created = (await conn.execute(stmt)).rowcount == 1
            number = await conn.scalar(query)
        if number is None:  # pragma: no cover - the INSERT or a racing one made the row
            raise RuntimeError(f"ticket {idempotency_key!r} vanished right after its insert")
        return int(number), created

    async def get(self, number: int) -> dict[str, Any] | None:
        """One local ticket as a plain dict, for tests and the CLI."""
        query = select(TicketRow.__table__).where(TicketRow.number == number)
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return dict(row._mapping) if row else None

    async def count(self) -> int:
        async with self._engine.connect() as conn:
            return int(await conn.scalar(select(func.count()).select_from(TicketRow)) or 0)
