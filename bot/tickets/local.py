"""Tickets in PolicyPal's own database: the embedded default, with readable ids (IT-1001, ...)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bot.tickets.base import Ticket, TicketRequest

if TYPE_CHECKING:
    from bot.store import Store

LOCAL_TICKET_OFFSET = 1000  # IT-1001 is the first ticket: readable ids that never look like a count


class LocalTickets:
    """Tickets in PolicyPal's own database, with readable ids (IT-1001, ...): the embedded default."""

    name = "local"

    def __init__(self, store: Store, prefix: str = "IT") -> None:
        self._store = store
        self._prefix = prefix

    async def create(self, request: TicketRequest) -> Ticket:
        number, _ = await self._store.tickets.create(
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
