"""Inbox items: every platform event written before its ack, leased by the process working on it.

``accept`` is one ``INSERT ... ON CONFLICT DO NOTHING`` keyed by the platform's event id: the first
delivery creates the item already leased to its writer (epoch 1), a redelivery finds it and does
nothing. The lease passes to another process only by ``relet``, one conditional UPDATE that raises
the epoch, so a process that lost its item can tell (its epoch is no longer the item's). An item is
answered once a run names it (``runs.inbox_id``, unique) or it is marked ``done``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, exists, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from bot.store.columns import utcnow
from bot.store.engine import Repository
from bot.store.records import InboxRecord, to_inbox_record
from bot.store.tables import InboxItem, Run


@dataclass(frozen=True)
class NewItem:
    """An event to write: its id (the platform's event id), who handles it, what it carried."""

    id: str
    platform: str
    kind: str
    payload: dict[str, Any]


class InboxRows(Repository):
    """The inbox table's statements; ``bot.delivery.inbox`` owns the rules.

    ``accept`` runs on the store's ack engine (its own connection), so an ack never waits behind a run.
    """

    def __init__(self, engine: AsyncEngine, ack_engine: AsyncEngine) -> None:
        super().__init__(engine)
        self._ack_engine = ack_engine

    async def accept(self, item_id: str, platform: str, kind: str, payload: dict[str, Any], owner: str) -> bool:
        """Write an event leased to ``owner``; False when it was written before (a redelivery)."""
        return item_id in await self.accept_many([NewItem(item_id, platform, kind, payload)], owner)

    async def accept_many(self, items: Sequence[NewItem], owner: str) -> set[str]:
        """Write events in one INSERT, each leased to ``owner``; the ids written now (not redeliveries).

        Executed as many parameter sets of one cached statement (SQLAlchemy batches them into one
        multi-row INSERT): compiling a fresh multi-VALUES statement per burst cost ~6x the CPU on the
        ack path.
        """
        now = utcnow()
        rows = [
            {
                "id": item.id,
                "platform": item.platform,
                "kind": item.kind,
                "payload": item.payload,
                "received_at": now,
                "state": "leased",
                "owner": owner,
                "epoch": 1,
                "attempts": 1,
            }
            for item in {item.id: item for item in items}.values()
        ]
        stmt = self._insert(InboxItem).on_conflict_do_nothing(index_elements=["id"]).returning(InboxItem.id)
        async with self._ack_engine.begin() as conn:
            written = await conn.execute(stmt, rows)
            return {str(row_id) for row_id in written.scalars()}

    async def remember(self, item_id: str) -> bool:
        """Mark an event id seen without work to do (an older release's key); False when it was seen."""
        now = utcnow()
        values = {
            "id": item_id,
            "platform": "",
            "kind": "legacy",
            "payload": {},
            "received_at": now,
            "state": "done",
            "owner": "",
            "epoch": 1,
            "attempts": 1,
            "finished_at": now,
        }
        stmt = self._insert(InboxItem).values(values).on_conflict_do_nothing(index_elements=["id"])
        async with self._engine.begin() as conn:
            return (await conn.execute(stmt)).rowcount == 1

    async def get(self, item_id: str) -> InboxRecord | None:
        async with self._engine.connect() as conn:
            row = (await conn.execute(select(InboxItem.__table__).where(InboxItem.id == item_id))).first()
        return to_inbox_record(row) if row else None

    async def finish(
        self, item_id: str, epoch: int, *, error: str | None = None, conn: AsyncConnection | None = None
    ) -> bool:
        """Mark an item done (or failed, with ``error``) if ``epoch`` still holds it; False when superseded."""
        table = InboxItem
        stmt = (
            update(table)
            .where(table.id == item_id, table.epoch == epoch, table.state == "leased")
            .values(state="failed" if error else "done", finished_at=utcnow(), last_error=error)
        )
        async with self._begin(conn) as tx:
            return (await tx.execute(stmt)).rowcount == 1

    async def unanswered(self, since: datetime, limit: int = 200) -> list[InboxRecord]:
        """Leased items received since ``since`` that no run answers yet: in flight somewhere, or orphaned."""
        table = InboxItem
        answered = exists().where(Run.inbox_id == table.id)
        stmt = (
            select(table.__table__)
            .where(table.state == "leased", table.received_at >= since, ~answered)
            .order_by(table.received_at)
            .limit(limit)
        )
        async with self._engine.connect() as conn:
            return [to_inbox_record(row) for row in await conn.execute(stmt)]

    async def relet(self, item_id: str, epoch: int, owner: str) -> int | None:
        """Take over an item held at ``epoch`` (its holder is gone): the new epoch, or None if another won.

        An item whose row is locked is skipped (None), not waited for: its holder is mid-transaction,
        perhaps frozen there, and one frozen transaction must not stall every other replica's sweep.
        (``FOR UPDATE SKIP LOCKED`` on PostgreSQL; SQLite has one writer and no row locks.)
        """
        table = InboxItem
        free = (
            select(table.id)
            .where(table.id == item_id, table.epoch == epoch, table.state == "leased")
            .with_for_update(skip_locked=True)
            .scalar_subquery()
        )
        stmt = (
            update(table)
            .where(table.id == free, table.epoch == epoch, table.state == "leased")
            .values(owner=owner, epoch=table.epoch + 1, attempts=table.attempts + 1, last_error=None)
            .returning(table.epoch)
        )
        async with self._engine.begin() as conn:
            new = (await conn.execute(stmt)).scalar_one_or_none()
        return None if new is None else int(new)

    async def note(self, item_id: str, epoch: int, error: str) -> bool:
        """Say how the attempt ``epoch`` ended while leaving the item unanswered (``relet`` clears it), so the
        next holder can tell an attempt that ended from one whose process died. False when superseded."""
        table = InboxItem
        stmt = (
            update(table)
            .where(table.id == item_id, table.epoch == epoch, table.state == "leased")
            .values(last_error=error)
        )
        async with self._engine.begin() as conn:
            return (await conn.execute(stmt)).rowcount == 1

    async def give_back(self, item_id: str, epoch: int) -> bool:
        """The attempt ``epoch`` made did not happen (its work never began): whoever takes the item over next
        counts that attempt again. False when another process holds the item by now."""
        table = InboxItem
        stmt = (
            update(table)
            .where(table.id == item_id, table.epoch == epoch, table.state == "leased", table.attempts > 0)
            .values(attempts=table.attempts - 1)
        )
        async with self._engine.begin() as conn:
            return (await conn.execute(stmt)).rowcount == 1

    async def holds(self, item_id: str, epoch: int, conn: AsyncConnection | None = None) -> bool:
        """Whether ``epoch`` is still the item's (nobody took it over)."""
        stmt = select(InboxItem.epoch).where(InboxItem.id == item_id, InboxItem.state == "leased")
        async with self._begin(conn) as tx:
            return (await tx.scalar(stmt)) == epoch

    async def prune(self, before: datetime) -> int:
        """Forget items received before ``before`` (platforms stop redelivering within minutes)."""
        async with self._engine.begin() as conn:
            return (await conn.execute(delete(InboxItem).where(InboxItem.received_at < before))).rowcount
