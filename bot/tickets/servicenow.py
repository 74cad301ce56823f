"""ServiceNow incidents through the Table API (a bearer token, or basic auth).

The pending action id is the incident's ``correlation_id``; before any retry a Table API query
``correlation_id=<id>`` looks for it.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from bot.delivery import HttpPolicy, JsonHttp
from bot.errors import RemoteError
from bot.tickets.base import Ticket, TicketRequest
from bot.tickets.remote import basic_auth, create_with_retries

SERVICENOW_URGENCY = {"critical": "1", "high": "1", "normal": "2", "low": "3"}

SERVICENOW_CATEGORY = {"hardware": "hardware", "software": "software", "network_vpn": "network"}  # else inquiry

_FIELDS = {"sysparm_fields": "sys_id,number"}

class ServiceNowIncidents:
    """Incidents through the ServiceNow Table API (basic auth, or an OAuth bearer token)."""

    name = "servicenow"

    def __init__(
        self,
        url: str,
        *,
        user: str | None = None,
        password: str | None = None,
        token: str | None = None,
        policy: HttpPolicy | None = None,
    ) -> None:
        self._base = url.rstrip("/")
        auth = f"Bearer {token}" if token else basic_auth(user or "", password or "")
        self._http = JsonHttp("ServiceNow", policy, headers={"Authorization": auth})

    async def create(self, request: TicketRequest) -> Ticket:
        async def attempt() -> Ticket:
            response = await self._http.send(
                "POST", self._table, body=self._payload(request), params=_FIELDS, error_text=servicenow_error
            )
            return self._ticket((response.body or {}).get("result"))

        return await create_with_retries(self._http, attempt, lambda: self.find(request.idempotency_key))

    async def find(self, key: str) -> Ticket | None:
        """The incident whose correlation_id is our id, if one was created."""
        params = {**_FIELDS, "sysparm_query": f"correlation_id={key}", "sysparm_limit": "1"}
        response = await self._http.send("GET", self._table, params=params, error_text=servicenow_error)
        found = (response.body or {}).get("result") or []
        return self._ticket(found[0]) if found else None

    async def aclose(self) -> None:
        await self._http.aclose()

    @property
    def _table(self) -> str:
        return f"{self._base}/api/now/table/incident"

    def _payload(self, request: TicketRequest) -> dict[str, Any]:
        caller = request.requester.email or request.requester.name or request.requester.id
        return {
            "short_description": request.summary,
            "description": request.description(),
            "urgency": SERVICENOW_URGENCY.get(request.urgency, "2"),
            "category": SERVICENOW_CATEGORY.get(request.category, "inquiry"),
            "caller_id": caller,
            "correlation_id": request.idempotency_key,
            "correlation_display": "PolicyPal",
        }

    def _ticket(self, result: Any) -> Ticket:
        if not isinstance(result, dict) or not result.get("number") or not result.get("sys_id"):
            raise RemoteError("ServiceNow answered without an incident number", kind="protocol")
        link = f"{self._base}/nav_to.do?uri={quote('incident.do?sys_id=' + result['sys_id'], safe='')}"
        return Ticket(id=result["number"], url=link)

def servicenow_error(body: Any) -> str | None:
    """ServiceNow errors are ``{"error": {"message": ..., "detail": ...}, "status": "failure"}``."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return None
    return ": ".join(str(part) for part in (error.get("message"), error.get("detail")) if part) or None
