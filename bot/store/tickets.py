"""The local ticket backend's rows: one ticket per idempotency key, numbered by the database."""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import Select, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.store.columns import utcnow
from bot.store.engine import Repository
from bot.store.tables import (
    TicketRow,
)

log = logging.getLogger(__name__)


class TicketRows(Repository):
    """The local ticket backend's tickets, one per idempotency key."""

    async def create(self, idempotency_key: str, **fields: Any) -> tuple[int, bool] | None:
        """Insert a ticket once per idempotency key; returns (number, created now), or None: nobody can tell.

        A database error before the COMMIT is raised as it came: nothing was written. An error during or after
        the COMMIT (the connection lost while committing) may hide a row that was written, so the row is looked
        up by its key on a new connection: found, it is returned; not found, or the look-up failing too, None.
        """
        committing = False
        try:
            async with self._engine.connect() as conn:
                number, created = await self._insert_once(conn, idempotency_key, fields)
                committing = True
                await conn.commit()
        except Exception:
            if not committing:
                raise
            log.warning("ticket %s: the database failed while committing it", idempotency_key, exc_info=True)
            return await self._look_again(idempotency_key, created)
        return number, created

    async def _insert_once(self, conn: AsyncConnection, key: str, fields: dict[str, Any]) -> tuple[int, bool]:
        stmt = self._insert(TicketRow).values(idempotency_key=key, created_at=utcnow(), **fields)
        stmt = stmt.on_conflict_do_nothing(index_elements=["idempotency_key"])
        # Looking first keeps PostgreSQL's sequence from skipping a number on every repeat;
        # the conditional INSERT still decides a race.
        if (number := await conn.scalar(_number_of(key))) is not None:
            return int(number), False
        created = (await conn.execute(stmt)).rowcount == 1
        number = await conn.scalar(_number_of(key))
        if number is None:  # pragma: no cover - the INSERT or a racing one made the row
            raise RuntimeError(f"ticket {key!r} vanished right after its insert")
        return int(number), created

    async def _look_again(self, idempotency_key: str, created: bool) -> tuple[int, bool] | None:
        """After a failed COMMIT: the row, if it was written. Not found is no proof it never will be (a COMMIT
        already sent may still reach the server, or PostgreSQL still be finishing it), so that is None too."""
        try:
            number = await self.find(idempotency_key)
        except Exception:
            log.warning("ticket %s: the look-up after its failed commit failed too", idempotency_key, exc_info=True)
            return None
        return (number, created) if number is not None else None

    async def find(self, idempotency_key: str) -> int | None:
        """The number of the ticket made for this key, if there is one."""
        async with self._engine.connect() as conn:
            number = await conn.scalar(_number_of(idempotency_key))
        return int(number) if number is not None else None

    async def get(self, number: int) -> dict[str, Any] | None:
        """One local ticket as a plain dict, for tests and the CLI."""
        query = select(TicketRow.__table__).where(TicketRow.number == number)
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return dict(row._mapping) if row else None

    async def count(self) -> int:
        async with self._engine.connect() as conn:
            return int(await conn.scalar(select(func.count()).select_from(TicketRow)) or 0)


def _number_of(idempotency_key: str) -> Select[Any]:
    return select(TicketRow.number).where(TicketRow.idempotency_key == idempotency_key)
