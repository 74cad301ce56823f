"""Ticket backends behind one interface: what a ticket request is, what comes back, what failure looks like.

The local store is the embedded default (``bot.tickets.local``); the remote ones are Jira Service
Management, ServiceNow and a signed webhook; ``bot.tickets.choice`` picks one from settings. Every
backend gets the pending action id as ``idempotency_key`` and sends it the way its API allows, so
a retry never makes a second ticket where the API lets us check. A backend that fails raises
``TicketError`` with a message the model can explain to the user; the ticket tool turns it into an
``{"error": ...}`` result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from bot.types import UserRef


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


class TicketBackend(Protocol):
    async def create(self, request: TicketRequest) -> Ticket: ...
