"""Helpdesk cases and their outbox rows. A case is inserted once per origin together with one delivery
row per destination; a delivery is claimed, and its outcome recorded, by conditional UPDATEs fenced
by the attempt number.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, insert, or_, select, update

from bot.store.columns import utcnow
from bot.store.engine import Repository
from bot.store.records import (
    DeliveryRecord,
    DeliveryState,
    HandoffRecord,
    to_delivery_record,
    to_handoff_record,
)
from bot.store.tables import (
    Handoff,
    HandoffDelivery,
)

log = logging.getLogger(__name__)


class Cases(Repository):
    """Helpdesk cases and their outbox: one case per origin, one delivery row per destination."""

    async def create(
        self, origin: str, fields: Mapping[str, Any], destinations: Sequence[str]
    ) -> tuple[HandoffRecord, bool]:
        """Insert a case once per origin, with one outbox row per destination, in one transaction.

        Returns the stored case and whether this call created it; a second call with the same origin
        (a retry, another replica) gets the first case back and adds no deliveries.
        """
        now = utcnow()
        stmt = self._insert(Handoff).values(origin=origin, created_at=now, **fields)
        stmt = stmt.on_conflict_do_nothing(index_elements=["origin"])
        query = select(Handoff.__table__).where(Handoff.origin == origin)
        async with self._engine.begin() as conn:
            if (row := (await conn.execute(query)).first()) is not None:  # a repeat: no sequence gap
                return to_handoff_record(row), False
            created = (await conn.execute(stmt)).rowcount == 1
            row = (await conn.execute(query)).one()
            if created and destinations:
                outbox = [_new_delivery(row.number, name, now) for name in dict.fromkeys(destinations)]
                await conn.execute(insert(HandoffDelivery), outbox)
        return to_handoff_record(row), created

    async def get(self, number: int) -> HandoffRecord | None:
        """One case by number."""
        async with self._engine.connect() as conn:
            row = (await conn.execute(select(Handoff.__table__).where(Handoff.number == number))).first()
        return to_handoff_record(row) if row else None

    async def recent(self, limit: int = 20, *, failed_only: bool = False) -> list[HandoffRecord]:
        """The newest cases first; ``failed_only``: those with a delivery that gave up."""
        stmt = select(Handoff.__table__).order_by(Handoff.number.desc()).limit(limit)
        if failed_only:
            failed = select(HandoffDelivery.case_number).where(HandoffDelivery.state == "failed")
            stmt = stmt.where(Handoff.number.in_(failed))
        async with self._engine.connect() as conn:
            return [to_handoff_record(row) for row in await conn.execute(stmt)]

    async def deliveries(self, case_numbers: Sequence[int]) -> list[DeliveryRecord]:
        """The outbox rows of some cases, for status displays."""
        table = HandoffDelivery
        stmt = select(table.__table__).where(table.case_number.in_(list(case_numbers))).order_by(table.id)
        async with self._engine.connect() as conn:
            return [to_delivery_record(row) for row in await conn.execute(stmt)]

    async def due_deliveries(
        self,
        destinations: Sequence[str],
        now: datetime,
        stale_before: datetime,
        *,
        case_number: int | None = None,
        limit: int = 50,
    ) -> list[DeliveryRecord]:
        """Deliveries due now, or claimed by a worker that has gone quiet; a worker must still claim each."""
        table = HandoffDelivery
        stmt = select(table.__table__).where(table.destination.in_(list(destinations)), _claimable(now, stale_before))
        if case_number is not None:
            stmt = stmt.where(table.case_number == case_number)
        async with self._engine.connect() as conn:
            rows = await conn.execute(stmt.order_by(table.next_attempt_at, table.id).limit(limit))
            return [to_delivery_record(row) for row in rows]

    async def claim_delivery(self, delivery_id: int, owner: str, now: datetime, stale_before: datetime) -> int | None:
        """Take a delivery in one conditional UPDATE; the winner gets its attempt number, others None.

        The attempt number fences the result: a worker presumed dead whose delivery was reclaimed
        cannot record its late outcome over the new claim.
        """
        table = HandoffDelivery
        stmt = (
            update(table)
            .where(table.id == delivery_id, _claimable(now, stale_before))
            .values(state="sending", claimed_by=owner, claimed_at=now, attempts=table.attempts + 1)
            .returning(table.attempts)
        )
        async with self._engine.begin() as conn:
            attempt = (await conn.execute(stmt)).scalar_one_or_none()
        return None if attempt is None else int(attempt)

    async def settle_delivery(
        self, delivery_id: int, owner: str, attempt: int, state: DeliveryState, **fields: Any
    ) -> bool:
        """Record a claimed delivery's outcome; False when the claim was lost (reclaimed as stale)."""
        table = HandoffDelivery
        stmt = update(table).where(
            table.id == delivery_id, table.state == "sending", table.claimed_by == owner, table.attempts == attempt
        )
        async with self._engine.begin() as conn:
            return (await conn.execute(stmt.values(state=state, **fields))).rowcount == 1

    async def retry_failed(self, now: datetime, case_number: int | None = None) -> int:
        """Put deliveries that gave up back in the outbox, due now, with a fresh run of attempts."""
        table = HandoffDelivery
        stmt = update(table).where(table.state == "failed")
        if case_number is not None:
            stmt = stmt.where(table.case_number == case_number)
        async with self._engine.begin() as conn:
            return (await conn.execute(stmt.values(state="pending", attempts=0, next_attempt_at=now))).rowcount


def _claimable(now: datetime, stale_before: datetime) -> Any:
    table = HandoffDelivery
    due = and_(table.state == "pending", table.next_attempt_at <= now)
    stale = and_(table.state == "sending", table.claimed_at < stale_before)
    return or_(due, stale)


def _new_delivery(case_number: int, destination: str, now: datetime) -> dict[str, Any]:
    return {
        "case_number": case_number,
        "destination": destination,
        "state": "pending",
        "attempts": 0,
        "next_attempt_at": now,
        "created_at": now,
        "idempotency_key": str(uuid.uuid4()),  # once, here: every retry sends the same key
    }
