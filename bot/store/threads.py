"""Thread history and where each conversation lives: what a new message reads and writes."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import insert, select, union_all
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.store.columns import utcnow
from bot.store.engine import Repository
from bot.store.records import (
    Place,
)
from bot.store.tables import (
    HistoryEntry,
    Run,
    ThreadPlace,
)
from bot.types import Message

log = logging.getLogger(__name__)


class Threads(Repository):
    """Thread history and where each conversation lives."""

    async def load_history(
        self, key: str, readable: Callable[[Sequence[str] | None], bool] | None = None
    ) -> list[Message]:
        """The stored messages of a thread, oldest first; empty for a new thread.

        Each run keeps its own exchange (written with the run); entries hold what came without one.
        ``readable(audience)`` keeps only what was built for readers the caller's readers include
        (None: everything). One SELECT either way.
        """
        entries = select(
            HistoryEntry.messages.label("messages"),
            HistoryEntry.audience.label("audience"),
            HistoryEntry.created_at.label("at"),
        )
        entries = entries.where(HistoryEntry.conversation_key == key)
        runs = select(Run.exchange.label("messages"), Run.audience.label("audience"), Run.finished_at.label("at"))
        runs = runs.where(Run.conversation_key == key, Run.exchange.is_not(None))
        stmt: Any = union_all(entries, runs).order_by("at")
        async with self._engine.connect() as conn:
            rows = (await conn.execute(stmt)).all()
        kept = [row for row in rows if readable is None or readable(row.audience)]
        return [message for row in kept for message in (row.messages or [])]

    async def append_history(
        self,
        key: str,
        messages: Sequence[Message],
        *,
        audience: Sequence[str] | None = None,
        conn: AsyncConnection | None = None,
    ) -> None:
        """Add messages to the end of a thread's history in one INSERT: concurrent appends all stay."""
        row = {
            "conversation_key": key,
            "messages": list(messages),
            "created_at": utcnow(),
            "audience": list(audience) if audience is not None else None,
        }
        async with self._begin(conn) as tx:
            await tx.execute(insert(HistoryEntry).values(row))

    async def remember_place(self, place: Place, *, conn: AsyncConnection | None = None) -> None:
        """Keep where a conversation lives; the first message's place wins (its link is the thread's)."""
        stmt = self._insert(ThreadPlace).values(**dataclasses.asdict(place), created_at=utcnow())
        async with self._begin(conn) as tx:
            await tx.execute(stmt.on_conflict_do_nothing(index_elements=["key"]))

    async def get_place(self, key: str) -> Place | None:
        """Where a conversation lives, if its first message was seen by this release."""
        columns = [getattr(ThreadPlace, f.name) for f in dataclasses.fields(Place)]
        async with self._engine.connect() as conn:
            row = (await conn.execute(select(*columns).where(ThreadPlace.key == key))).first()
        return Place(**row._mapping) if row else None
