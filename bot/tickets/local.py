"""Tickets in PolicyPal's own database: the embedded default, with readable ids (IT-1001, ...).

The pending action id is the row's idempotency key. A database error before the COMMIT means no ticket
(``unavailable``); one while committing is answered by looking the row up by that key: found, the ticket
was created; else nobody can tell, and the outcome is ``unknown``, as for a remote backend that got the
request and never answered.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sqlalchemy.exc import SQLAlchemyError

from bot.errors import TicketError
from bot.tickets.base import Ticket, TicketRequest
from bot.tickets.remote import UNKNOWN

if TYPE_CHECKING:
    from bot.store import Store

log = logging.getLogger(__name__)

LOCAL_TICKET_OFFSET = 1000  # IT-1001 is the first ticket: readable ids that never look like a count


class LocalTickets:
    """Tickets in PolicyPal's own database, with readable ids (IT-1001, ...): the embedded default."""

    name = "local"

    def __init__(self, store: Store, prefix: str = "IT") -> None:
        self._store = store
        self._prefix = prefix

    async def create(self, request: TicketRequest) -> Ticket:
        try:
            made = await self._store.tickets.create(
                request.idempotency_key,
                category=request.category,
                summary=request.summary,
                urgency=request.urgency,
                details=request.details,
                requester_id=request.requester.id,
                requester_name=request.requester.name,
            )
        except (SQLAlchemyError, OSError) as exc:  # before the COMMIT: nothing was written
            log.warning("ticket %s: the database failed before it was saved", request.idempotency_key, exc_info=True)
            failed = f"the ticket database failed before saving it ({type(exc).__name__})"
            raise TicketError(failed, kind="unavailable") from exc
        if made is None:
            raise TicketError(
                "the ticket database failed while saving it, and no check could confirm it was saved", kind=UNKNOWN
            )
        return Ticket(id=self.ticket_id(made[0]))

    def ticket_id(self, number: int) -> str:
        return f"{self._prefix}-{number + LOCAL_TICKET_OFFSET}"
