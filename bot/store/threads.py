"""Event dedupe, thread history and where each conversation lives: what a new message reads and writes.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import delete, insert, select

from bot.store.columns import utcnow
from bot.store.engine import Repository
from bot.store.records import (
    Place,
)
from bot.store.tables import (
    HistoryEntry,
    ProcessedEvent,
    ThreadPlace,
)
from bot.types import Message

log = logging.getLogger(__name__)


class Threads(Repository):
    """Event dedupe, thread history and where each conversation lives."""

    async def claim_event(self, event_id: str) -> bool:
        """True the first time an event id is seen by any process; False for a platform retry."""
        stmt = self._insert(ProcessedEvent).values(event_id=event_id, received_at=utcnow())
        async with self._engine.begin() as conn:
            result = await conn.execute(stmt.on_conflict_do_nothing(index_elements=["event_id"]))
        return result.rowcount == 1

    async def prune_events(self, before: datetime) -> int:
        """Forget event ids received before ``before`` (platforms stop retrying within minutes)."""
        stmt = delete(ProcessedEvent).where(ProcessedEvent.received_at < before)
        async with self._engine.begin() as conn:
            return (await conn.execute(stmt)).rowcount

    async def load_history(self, key: str) -> list[Message]:
        """The stored messages of a thread, oldest first; empty for a new thread."""
        table = HistoryEntry
        stmt = select(table.messages).where(table.conversation_key == key).order_by(table.id)
        async with self._engine.connect() as conn:
            entries = (await conn.scalars(stmt)).all()
        return [message for messages in entries for message in messages]

    async def append_history(self, key: str, messages: Sequence[Message]) -> None:
        """Add messages to the end of a thread's history in one INSERT: concurrent appends all stay."""
        row = {"conversation_key": key, "messages": list(messages), "created_at": utcnow()}
        async with self._engine.begin() as conn:
            await conn.execute(insert(HistoryEntry).values(row))

    async def remember_place(self, place: Place) -> None:
        """Keep where a conversation lives; the first message's place wins (its link is the thread's)."""
        stmt = self._insert(ThreadPlace).values(**dataclasses.asdict(place), created_at=utcnow())
        async with self._engine.begin() as conn:
            await conn.execute(stmt.on_conflict_do_nothing(index_elements=["key"]))

    async def get_place(self, key: str) -> Place | None:
        """Where a conversation lives, if its first message was seen by this release."""
        columns = [getattr(ThreadPlace, f.name) for f in dataclasses.fields(Place)]
        async with self._engine.connect() as conn:
            row = (await conn.execute(select(*columns).where(ThreadPlace.key == key))).first()
        return Place(**row._mapping) if row else None
