"""Ticket backends behind one interface; the local store is the embedded default.

``bot.ticket_backends`` holds the remote ones (Jira Service Management, ServiceNow, a signed
webhook) and picks one from settings. Every backend gets the pending action id as
``idempotency_key`` and sends it the way its API allows, so a retry never makes a second ticket
where the API lets us check. A backend that fails raises ``TicketError`` with a message the model
can explain to the user; the ticket tool turns it into an ``{"error": ...}`` result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from bot.store.store import Store
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

    def description(self) -> str:
        """The body a remote ticket gets: the details, who asked, and our correlation id."""
        who = self.requester.name or self.requester.id
        email = f" <{self.requester.email}>" if self.requester.email else ""
        lines = [
            self.details.strip() or self.summary,
            "",
            f"Requested by {who}{email} ({self.requester.id}) via PolicyPal.",
            f"Category: {self.category}. Urgency: {self.urgency}.",
            f"PolicyPal request id: {self.idempotency_key}",
        ]
        return "\n".join(lines)


@dataclass(frozen=True)
class Ticket:
    id: str
    url: str | None = None


class TicketError(Exception):
    """The ticket system refused or failed; the message is shown to the model and the user.

    ``kind`` is one of auth, validation, rate_limited, unavailable, timeout, protocol, config.
    """

    def __init__(self, message: str, *, kind: str = "unavailable") -> None:
        super().__init__(message)
        self.kind = kind


class TicketBackend(Protocol):
    async def create(self, request: TicketRequest) -> Ticket: ...


class LocalTickets:
    """Tickets in PolicyPal's own database, with readable ids (IT-1001, ...): the embedded default."""

    name = "local"

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
