"""A signed JSON webhook as the ticket backend: the receiver creates the ticket and answers its id.

The pending action id goes as the ``Idempotency-Key`` header (and in the body); the receiver dedupes.
"""

from __future__ import annotations

from typing import Any

from bot.delivery import HttpPolicy, JsonHttp, error_message, json_bytes, signed_headers
from bot.errors import RemoteError
from bot.tickets.answers import ticket_id, ticket_url
from bot.tickets.base import Ticket, TicketRequest
from bot.tickets.remote import create_with_retries


class WebhookTickets:
    """Tickets by a signed JSON POST to any system; ``Idempotency-Key`` lets the receiver dedupe retries."""

    name = "webhook"

    def __init__(self, url: str, secret: str | None = None, policy: HttpPolicy | None = None) -> None:
        self._url = url
        self._secret = secret
        self._http = JsonHttp("the ticket webhook", policy)

    async def create(self, request: TicketRequest) -> Ticket:
        body = self._payload(request)

        async def attempt() -> Ticket:
            raw = json_bytes(body)
            headers = {"Idempotency-Key": request.idempotency_key, **signed_headers(self._secret, raw)}
            response = await self._http.send("POST", self._url, data=raw, headers=headers, error_text=error_message)
            return self._ticket(response.body)

        return await create_with_retries(self._http, attempt)

    async def aclose(self) -> None:
        await self._http.aclose()

    def _payload(self, request: TicketRequest) -> dict[str, Any]:
        user = request.requester
        return {
            "idempotency_key": request.idempotency_key,
            "category": request.category,
            "summary": request.summary,
            "urgency": request.urgency,
            "details": request.details,
            "description": request.description(),
            "requester": {"id": user.id, "name": user.name, "email": user.email},
        }

    def _ticket(self, body: Any) -> Ticket:
        if not isinstance(body, dict):
            raise RemoteError("the ticket webhook answered without an id", kind="protocol")
        found = body.get("id") if body.get("id") is not None else body.get("ticket_id")
        return Ticket(id=ticket_id(found, "the ticket webhook"), url=ticket_url(body.get("url")))
