"""Pending actions' rows. ``bot.pending`` owns the rules (states, who may decide); these are its
statements, each one conditional UPDATE where a race is decided.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import String, and_, func, insert, literal, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.store.engine import Repository
from bot.store.records import (
    PendingRecord,
    to_pending_record,
)
from bot.store.tables import (
    Handoff,
    PendingActionRow,
)

log = logging.getLogger(__name__)

_PENDING_COLUMNS = frozenset(f.name for f in dataclasses.fields(PendingRecord))


class PendingRows(Repository):
    """Pending actions, low level: ``bot.pending`` owns the rules, these are its statements."""

    async def insert(self, record: PendingRecord, *, conn: AsyncConnection | None = None) -> None:
        """Store a newly proposed action."""
        values = dataclasses.asdict(record)
        async with self._begin(conn) as tx:
            await tx.execute(insert(PendingActionRow).values(values))

    async def get(self, pending_id: str) -> PendingRecord | None:
        """One pending action as currently stored."""
        stmt = select(PendingActionRow.__table__).where(PendingActionRow.id == pending_id)
        async with self._engine.connect() as conn:
            row = (await conn.execute(stmt)).first()
        return to_pending_record(row) if row else None

    async def transition(
        self,
        pending_id: str,
        from_states: tuple[str, ...],
        to_state: str,
        *,
        not_expired_at: datetime | None = None,
        **fields: Any,
    ) -> bool:
        """Move a pending action between states in one conditional UPDATE; True only for the winner.

        ``not_expired_at`` adds ``AND expires_at > :t`` so a confirm cannot land after expiry.
        """
        _check_pending_columns(list(fields))
        table = PendingActionRow
        stmt = update(table).where(table.id == pending_id, table.state.in_(from_states))
        if not_expired_at is not None:
            stmt = stmt.where(table.expires_at > not_expired_at)
        async with self._engine.begin() as conn:
            result = await conn.execute(stmt.values(state=to_state, **fields))
        return result.rowcount == 1

    async def decide(
        self, pending_id: str, requester: str, to_state: str, now: datetime, *, args_hash: str, **fields: Any
    ) -> PendingRecord | None:
        """The requester's click on an open, unexpired action, in one conditional UPDATE that returns the
        row as decided; None when it did not win (someone else, another state, past expiry, no such id)."""
        _check_pending_columns(list(fields))
        table = PendingActionRow
        stmt = (
            update(table)
            .where(table.id == pending_id, table.state == "open", table.requester == requester)
            .where(table.args_hash == args_hash, table.expires_at > now)
            .values(state=to_state, **fields)
            .returning(*table.__table__.columns)
        )
        async with self._engine.begin() as conn:
            row = (await conn.execute(stmt)).first()
        return to_pending_record(row) if row else None

    async def executing_by(self, owners: Sequence[str], limit: int = 100) -> list[PendingRecord]:
        """Actions still executing in processes known dead: their call may or may not have happened."""
        if not owners:
            return []
        table = PendingActionRow
        stmt = select(table.__table__).where(table.state == "executing", table.executor.in_(list(owners)))
        async with self._engine.connect() as conn:
            return [to_pending_record(row) for row in await conn.execute(stmt.order_by(table.created_at).limit(limit))]

    async def update(self, pending_id: str, **fields: Any) -> bool:
        """Set non-state fields (e.g. the platform message); False when the id is unknown."""
        _check_pending_columns(list(fields))
        if "state" in fields:
            raise TypeError("change state with transition(), never unconditionally")
        stmt = update(PendingActionRow).where(PendingActionRow.id == pending_id).values(**fields)
        async with self._engine.begin() as conn:
            return (await conn.execute(stmt)).rowcount == 1

    async def find(
        self,
        state: str,
        *,
        expires_by: datetime | None = None,
        decided_by: datetime | None = None,
        limit: int = 500,
    ) -> list[PendingRecord]:
        """Actions in one state, optionally due by expiry or decision time; sweepers' candidates."""
        table = PendingActionRow
        stmt = select(table.__table__).where(table.state == state)
        if expires_by is not None:
            stmt = stmt.where(table.expires_at <= expires_by)
        if decided_by is not None:
            stmt = stmt.where(table.decided_at <= decided_by)
        async with self._engine.connect() as conn:
            rows = await conn.execute(stmt.order_by(table.created_at).limit(limit))
            return [to_pending_record(row) for row in rows]

    async def claim_caseless_unknown(self, marked_by: datetime, now: datetime, limit: int = 100) -> list[PendingRecord]:
        """Unknown actions marked by ``marked_by`` that still have no case: their recovery failed part way.

        Each is claimed with one conditional UPDATE (``finished_at`` moved to ``now``), so one caller
        retries it, and nobody else until ``marked_by`` passes ``now``.
        """
        table = PendingActionRow
        has_case = select(Handoff.number).where(Handoff.origin == literal("action:", String) + table.id)
        due = and_(table.state == "unknown", table.finished_at <= marked_by, ~has_case.exists())
        stmt = select(table.__table__).where(due).order_by(table.created_at).limit(limit)
        async with self._engine.connect() as conn:
            candidates = [to_pending_record(row) for row in await conn.execute(stmt)]
        claimed = []
        for record in candidates:
            async with self._engine.begin() as conn:
                won = await conn.execute(update(table).where(table.id == record.id, due).values(finished_at=now))
            if won.rowcount == 1:
                claimed.append(dataclasses.replace(record, finished_at=now))
        return claimed

    async def counts(self) -> dict[str, int]:
        """How many pending actions are in each state (for metrics)."""
        stmt = select(PendingActionRow.state, func.count()).group_by(PendingActionRow.state)
        async with self._engine.connect() as conn:
            return {state: int(count) for state, count in await conn.execute(stmt)}

    async def of_conversation(self, key: str, limit: int = 50) -> list[PendingRecord]:
        """A conversation's pending actions, oldest first (the last ``limit``: the one a case is about is newest)."""
        table = PendingActionRow
        stmt = select(table.__table__).where(table.conversation_key == key)
        stmt = stmt.order_by(table.created_at.desc(), table.id.desc()).limit(limit)
        async with self._engine.connect() as conn:
            rows = [to_pending_record(row) for row in await conn.execute(stmt)]
        return rows[::-1]


def _check_pending_columns(names: Sequence[str]) -> None:
    unknown = set(names) - _PENDING_COLUMNS
    if unknown:
        raise TypeError(f"not pending_actions columns: {sorted(unknown)}")
