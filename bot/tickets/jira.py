"""Jira Service Management: customer requests through its REST API (basic auth: email + API token).

Jira has no idempotency header; the pending action id is written into the description
("PolicyPal request id: ...") and, before any retry, a JQL text search looks for it.
"""

from __future__ import annotations

from typing import Any

from bot.delivery import HttpPolicy, JsonHttp
from bot.errors import RemoteError
from bot.tickets.answers import ticket_id, ticket_url
from bot.tickets.base import Ticket, TicketRequest
from bot.tickets.remote import basic_auth, create_with_retries


class JiraServiceDesk:
    """Customer requests through the Jira Service Management REST API (basic auth: email + API token)."""

    name = "jira"

    def __init__(
        self,
        url: str,
        email: str,
        api_token: str,
        service_desk_id: str,
        request_type_id: str,
        policy: HttpPolicy | None = None,
    ) -> None:
        self._base = url.rstrip("/")
        self._desk, self._type = service_desk_id, request_type_id
        auth = basic_auth(email, api_token)
        self._http = JsonHttp("Jira Service Management", policy, headers={"Authorization": auth})

    async def create(self, request: TicketRequest) -> Ticket:
        async def attempt() -> Ticket:
            url = f"{self._base}/rest/servicedeskapi/request"
            response = await self._http.send("POST", url, body=self._payload(request), error_text=jira_error)
            return self._ticket(response.body)

        return await create_with_retries(self._http, attempt, lambda: self.find(request.idempotency_key))

    async def find(self, key: str) -> Ticket | None:
        """The request carrying our id in its description, if one was created (JQL text search)."""
        term = key.replace('"', "").replace("\\", "")  # our own id; never let it break out of the JQL string
        params = {"jql": f'text ~ "{term}" ORDER BY created DESC', "fields": "summary", "maxResults": "1"}
        url = f"{self._base}/rest/api/3/search/jql"
        response = await self._http.send("GET", url, params=params, error_text=jira_error)
        issues = (response.body or {}).get("issues") or []
        if not issues:
            return None
        issue_key = issues[0]["key"]
        return Ticket(id=issue_key, url=f"{self._base}/browse/{issue_key}")

    async def aclose(self) -> None:
        await self._http.aclose()

    def _payload(self, request: TicketRequest) -> dict[str, Any]:
        return {
            "serviceDeskId": self._desk,
            "requestTypeId": self._type,
            "requestFieldValues": {"summary": request.summary, "description": request.description()},
        }

    def _ticket(self, body: Any) -> Ticket:
        if not isinstance(body, dict) or not body.get("issueKey"):
            raise RemoteError("Jira Service Management answered without an issue key", kind="protocol")
        key = ticket_id(body["issueKey"], "Jira Service Management")
        links = body.get("_links")
        web = ticket_url(links.get("web")) if isinstance(links, dict) else None
        return Ticket(id=key, url=web or f"{self._base}/browse/{key}")

def jira_error(body: Any) -> str | None:
    """Jira Service Management says ``errorMessage``; the Jira platform ``errorMessages`` and ``errors``."""
    if not isinstance(body, dict):
        return None
    messages = [body["errorMessage"]] if body.get("errorMessage") else []
    messages += list(body.get("errorMessages") or [])
    messages += [f"{field}: {text}" for field, text in (body.get("errors") or {}).items()]
    return "; ".join(str(m) for m in messages) or None
