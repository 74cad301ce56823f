"""Ticket backends behind one interface; the local store is the embedded default."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from bot.store import Store
from bot.types import UserRef

LOCAL_TICKET_OFFSET = 1000  # IT-1001 is the first ticket: readable ids that never look like a count


@dataclass(frozen=True)
class TicketRequest:
    category: str
    summary: str
    urgency: str
    details: str
    requester: UserRef
    idempotency_key: str  # the pending action id: a retried create must not make a second ticket


@dataclass(frozen=True)
class Ticket:
    id: str
    url: str | None = None


class TicketBackend(Protocol):
    async def create(self, request: TicketRequest) -> Ticket: ...


class LocalTickets:
    """Tickets in PolicyPal's own database, with readable ids (IT-1001, ...): the embedded default."""

    def __init__(self, store: Store, prefix: str = "IT") -> None:
        self._store = store
        self._prefix = prefix

    async def create(self, request: TicketRequest) -> Ticket:
        number, _ = await self._store.create_ticket(
            request.idempotency_key,
            category=request.category,
            summary=request.summary,
            urgency=request.urgency,
            details=request.details,
            requester_id=request.requester.id,
            requester_name=request.requester.name,
        )
        return Ticket(id=self.ticket_id(number))

    def ticket_id(self, number: int) -> str:
        return f"{self._prefix}-{number + LOCAL_TICKET_OFFSET}"
