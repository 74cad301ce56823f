"""Outbox rows: helpdesk deliveries ("case") and platform writes ("post"), each claimed by one worker.

A row is claimed by one conditional UPDATE (due, or claimed by a worker that has gone quiet) and its
outcome recorded by another fenced by the attempt number, so a worker presumed dead cannot record a
late outcome over the claim that replaced it. A platform write is usually inserted already claimed by
the process that wrote it, which sends it at once: one UPDATE when it is sent, nothing else.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, exists, func, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.orm import aliased

from bot.store.columns import utcnow
from bot.store.engine import Repository
from bot.store.records import DeliveryRecord, DeliveryState, to_delivery_record
from bot.store.tables import OutboxRow


@dataclass(frozen=True)
class NewPost:
    """A platform write to insert: where it goes (the platform), what it says, what it belongs to."""

    destination: str
    payload: dict[str, Any]
    conversation_key: str
    inbox_id: str | None = None
    coalesce_key: str | None = None  # rows with one key describe one card: only the newest is sent


class OutboxRows(Repository):
    """The outbox table's statements; ``bot.delivery.outbox`` owns the rules."""

    async def add_posts(
        self, posts: Sequence[NewPost], *, claimed_by: str | None = None, conn: AsyncConnection | None = None
    ) -> list[DeliveryRecord]:
        """Insert platform writes in one statement; ``claimed_by`` inserts them claimed (attempt 1) by that worker.

        A message whose conversation has an earlier message still unsent (failed for now, perhaps on another
        replica) is inserted pending instead: the delivery loop sends it after that one, never above it.
        """
        if not posts:
            return []
        now = utcnow()
        async with self._begin(conn) as tx:
            behind = await self._behind(tx, posts) if claimed_by else set()
            rows = [_post_row(p, now, None if _waits(p, behind) else claimed_by) for p in posts]
            stmt = insert(OutboxRow).returning(*OutboxRow.__table__.columns)  # one cached statement, many rows
            inserted = [to_delivery_record(row) for row in await tx.execute(stmt, rows)]
        return sorted(inserted, key=lambda r: r.id)

    @staticmethod
    async def _behind(tx: AsyncConnection, posts: Sequence[NewPost]) -> set[str]:
        """The conversations, of those ``posts`` add messages to, with a message still to be sent."""
        keys = sorted({p.conversation_key for p in posts if p.coalesce_key is None})
        if not keys:
            return set()
        table = OutboxRow
        stmt = select(table.conversation_key).distinct().where(
            table.conversation_key.in_(keys), table.kind == "post", table.coalesce_key.is_(None),
            table.state.in_(("pending", "sending")),
        )
        return {str(key) for key in (await tx.execute(stmt)).scalars()}

    async def get(self, delivery_id: int) -> DeliveryRecord | None:
        async with self._engine.connect() as conn:
            row = (await conn.execute(select(OutboxRow.__table__).where(OutboxRow.id == delivery_id))).first()
        return to_delivery_record(row) if row else None

    async def deliveries(self, case_numbers: Sequence[int]) -> list[DeliveryRecord]:
        """The outbox rows of some cases, for status displays."""
        table = OutboxRow
        stmt = select(table.__table__).where(table.case_number.in_(list(case_numbers))).order_by(table.id)
        async with self._engine.connect() as conn:
            return [to_delivery_record(row) for row in await conn.execute(stmt)]

    async def of_conversation(self, key: str, limit: int = 100) -> list[DeliveryRecord]:
        """A conversation's platform writes, oldest first (for tests and operators)."""
        table = OutboxRow
        stmt = select(table.__table__).where(table.conversation_key == key).order_by(table.id.desc()).limit(limit)
        async with self._engine.connect() as conn:
            rows = [to_delivery_record(row) for row in await conn.execute(stmt)]
        return rows[::-1]

    async def posted_as(self, key: str, destination: str, external_ref: str) -> DeliveryRecord | None:
        """The delivered write in a conversation that the platform knows by ``external_ref`` (its message id)."""
        table = OutboxRow
        stmt = (
            select(table.__table__)
            .where(table.conversation_key == key, table.destination == destination)
            .where(table.external_ref == external_ref, table.state == "delivered")
            .order_by(table.id.desc())
            .limit(1)
        )
        async with self._engine.connect() as conn:
            row = (await conn.execute(stmt)).first()
        return to_delivery_record(row) if row else None

    async def due(
        self,
        destinations: Sequence[str],
        now: datetime,
        stale_before: datetime,
        *,
        case_number: int | None = None,
        limit: int = 50,
    ) -> list[DeliveryRecord]:
        """Rows due now, or claimed by a worker that has gone quiet; a worker must still claim each.

        A message waits while an earlier message of its conversation is unsent (conversation order holds
        after an outage); card updates do not wait (the newest state wins anyway).
        """
        table = OutboxRow
        stmt = select(table.__table__).where(table.destination.in_(list(destinations)), _claimable(now, stale_before))
        stmt = stmt.where(or_(table.coalesce_key.is_not(None), table.kind != "post", ~_earlier_unsent(table)))
        if case_number is not None:
            stmt = stmt.where(table.case_number == case_number)
        async with self._engine.connect() as conn:
            rows = await conn.execute(stmt.order_by(table.next_attempt_at, table.id).limit(limit))
            return [to_delivery_record(row) for row in rows]

    async def claim(self, delivery_id: int, owner: str, now: datetime, stale_before: datetime) -> int | None:
        """Take a row in one conditional UPDATE; the winner gets its attempt number, others None."""
        table = OutboxRow
        stmt = (
            update(table)
            .where(table.id == delivery_id, _claimable(now, stale_before))
            .values(state="sending", claimed_by=owner, claimed_at=now, attempts=table.attempts + 1)
            .returning(table.attempts)
        )
        async with self._engine.begin() as conn:
            attempt = (await conn.execute(stmt)).scalar_one_or_none()
        return None if attempt is None else int(attempt)

    async def settle(self, delivery_id: int, owner: str, attempt: int, state: DeliveryState, **fields: Any) -> bool:
        """Record a claimed row's outcome; False when the claim was lost (reclaimed as stale)."""
        table = OutboxRow
        stmt = update(table).where(
            table.id == delivery_id, table.state == "sending", table.claimed_by == owner, table.attempts == attempt
        )
        async with self._engine.begin() as conn:
            return (await conn.execute(stmt.values(state=state, **fields))).rowcount == 1

    async def reopen(self, delivery_id: int, owner: str, attempt: int, next_attempt_at: datetime) -> bool:
        """A row that failed for good at ``attempt`` whose hand-over to a person failed too: due again at
        ``next_attempt_at`` (its next attempt is final again, and hands it over again). Fenced as ``settle``."""
        table = OutboxRow
        stmt = update(table).where(
            table.id == delivery_id, table.state == "failed", table.claimed_by == owner, table.attempts == attempt
        )
        async with self._engine.begin() as conn:
            return (await conn.execute(stmt.values(state="pending", next_attempt_at=next_attempt_at))).rowcount == 1

    async def unsent(self, delivery_id: int) -> bool:
        """Whether a row is still to be sent (pending, or being sent)."""
        stmt = select(OutboxRow.state).where(OutboxRow.id == delivery_id)
        async with self._engine.connect() as conn:
            return (await conn.scalar(stmt)) in ("pending", "sending")

    async def newest_cards(self, keys: Sequence[str]) -> dict[str, int]:
        """The id of the newest row not retired for each card: an older row must not overwrite what it shows."""
        if not keys:
            return {}
        table = OutboxRow
        stmt = (
            select(table.coalesce_key, func.max(table.id))
            .where(table.coalesce_key.in_(list(keys)), table.state != "superseded")
            .group_by(table.coalesce_key)
        )
        async with self._engine.connect() as conn:
            return {str(key): int(newest) for key, newest in await conn.execute(stmt)}

    async def claimants(self) -> set[str]:
        """The workers holding rows they are sending: the sweeper's candidates for the dead."""
        stmt = select(OutboxRow.claimed_by).where(OutboxRow.state == "sending").distinct()
        async with self._engine.connect() as conn:
            return {str(owner) for owner in (await conn.execute(stmt)).scalars() if owner}

    async def supersede(self, delivery_ids: Sequence[int], owner: str) -> int:
        """Retire claimed card rows a newer row of the same card replaces (it is sent instead)."""
        table = OutboxRow
        stmt = update(table).where(table.id.in_(list(delivery_ids)), table.claimed_by == owner)
        async with self._engine.begin() as conn:
            return (await conn.execute(stmt.values(state="superseded", delivered_at=utcnow()))).rowcount

    async def reclaim(self, owners: Sequence[str], now: datetime) -> int:
        """Rows claimed by processes known dead: due again at once (their outcome is unknown)."""
        if not owners:
            return 0
        table = OutboxRow
        stmt = (
            update(table)
            .where(table.state == "sending", table.claimed_by.in_(list(owners)))
            .values(state="pending", next_attempt_at=now, last_error="interrupted: the sending process died")
        )
        async with self._engine.begin() as conn:
            return (await conn.execute(stmt)).rowcount

    async def retry_failed(self, now: datetime, case_number: int | None = None) -> int:
        """Put helpdesk deliveries that gave up back in the outbox, due now, with a fresh run of attempts."""
        table = OutboxRow
        stmt = update(table).where(table.state == "failed", table.kind == "case")
        if case_number is not None:
            stmt = stmt.where(table.case_number == case_number)
        async with self._engine.begin() as conn:
            return (await conn.execute(stmt.values(state="pending", attempts=0, next_attempt_at=now))).rowcount


def _waits(post: NewPost, behind: set[str]) -> bool:
    """A message (not a card update) of a conversation with an earlier message unsent waits its turn."""
    return post.coalesce_key is None and post.conversation_key in behind


def _earlier_unsent(table: type[OutboxRow]) -> Any:
    """An earlier message (not a card update) of the same conversation that is not sent yet."""
    earlier = aliased(OutboxRow)
    return exists().where(
        earlier.conversation_key == table.conversation_key,
        earlier.id < table.id,
        earlier.kind == "post",
        earlier.coalesce_key.is_(None),
        earlier.state.in_(("pending", "sending")),
    )


def _claimable(now: datetime, stale_before: datetime) -> Any:
    table = OutboxRow
    due = and_(table.state == "pending", table.next_attempt_at <= now)
    stale = and_(table.state == "sending", table.claimed_at < stale_before)
    return or_(due, stale)


def new_case_delivery(case_number: int, destination: str, now: datetime) -> dict[str, Any]:
    """The row of one case's delivery to one destination."""
    return {
        "kind": "case",
        "case_number": case_number,
        "destination": destination,
        "state": "pending",
        "attempts": 0,
        "next_attempt_at": now,
        "created_at": now,
        "idempotency_key": str(uuid.uuid4()),  # once, here: every retry sends the same key
    }


def _post_row(post: NewPost, now: datetime, claimed_by: str | None) -> dict[str, Any]:
    return {
        "kind": "post",
        "case_number": None,
        "destination": post.destination,
        "payload": post.payload,
        "conversation_key": post.conversation_key,
        "inbox_id": post.inbox_id,
        "coalesce_key": post.coalesce_key,
        "state": "sending" if claimed_by else "pending",
        "attempts": 1 if claimed_by else 0,
        "claimed_by": claimed_by,
        "claimed_at": now if claimed_by else None,
        "next_attempt_at": now,
        "created_at": now,
        "idempotency_key": str(uuid.uuid4()),
    }
