"""Remote ticket backends: Jira Service Management, ServiceNow and a signed JSON webhook.

Each sends the pending action id the way its API allows, so a retry after a timeout or a 5xx does
not create a second ticket:

- Jira Service Management has no idempotency header; the id is written into the description
  ("PolicyPal request id: ...") and, before any retry, a JQL text search looks for it.
- ServiceNow: the id is the incident's ``correlation_id``; before any retry a Table API query
  ``correlation_id=<id>`` looks for it.
- The webhook gets it as the ``Idempotency-Key`` header (and in the body); the receiver dedupes.

Failures become ``TicketError`` with the API's own message, after retries for what is retryable.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

from bot.config import ConfigError, Settings
from bot.delivery.http_json import HttpPolicy, JsonHttp, RemoteError, json_bytes, signed_headers, with_retries
from bot.store.store import Store
from bot.tickets.base import LocalTickets, Ticket, TicketBackend, TicketError, TicketRequest

SERVICENOW_URGENCY = {"critical": "1", "high": "1", "normal": "2", "low": "3"}
SERVICENOW_CATEGORY = {"hardware": "hardware", "software": "software", "network_vpn": "network"}  # else inquiry


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


async def _create(
    http: JsonHttp,
    attempt: Callable[[], Awaitable[Ticket]],
    recover: Callable[[], Awaitable[Ticket | None]] | None = None,
) -> Ticket:
    """Retries as the policy allows; what still fails becomes a TicketError the model can explain."""
    try:
        ticket: Ticket = await with_retries(attempt, http.policy, recover=recover)
    except RemoteError as exc:
        raise TicketError(str(exc), kind=exc.kind) from None
    return ticket


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
        self._http = JsonHttp("Jira Service Management", policy, headers={"Authorization": _basic(email, api_token)})

    async def create(self, request: TicketRequest) -> Ticket:
        async def attempt() -> Ticket:
            url = f"{self._base}/rest/servicedeskapi/request"
            response = await self._http.send("POST", url, body=self._payload(request), error_text=jira_error)
            return self._ticket(response.body)

        return await _create(self._http, attempt, lambda: self.find(request.idempotency_key))

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
        web = (body.get("_links") or {}).get("web")
        return Ticket(id=body["issueKey"], url=web or f"{self._base}/browse/{body['issueKey']}")


def jira_error(body: Any) -> str | None:
    """Jira Service Management says ``errorMessage``; the Jira platform ``errorMessages`` and ``errors``."""
    if not isinstance(body, dict):
        return None
    messages = [body["errorMessage"]] if body.get("errorMessage") else []
    messages += list(body.get("errorMessages") or [])
    messages += [f"{field}: {text}" for field, text in (body.get("errors") or {}).items()]
    return "; ".join(str(m) for m in messages) or None


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
        auth = f"Bearer {token}" if token else _basic(user or "", password or "")
        self._http = JsonHttp("ServiceNow", policy, headers={"Authorization": auth})

    async def create(self, request: TicketRequest) -> Ticket:
        async def attempt() -> Ticket:
            response = await self._http.send(
                "POST", self._table, body=self._payload(request), params=_FIELDS, error_text=servicenow_error
            )
            return self._ticket((response.body or {}).get("result"))

        return await _create(self._http, attempt, lambda: self.find(request.idempotency_key))

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


_FIELDS = {"sysparm_fields": "sys_id,number"}


def servicenow_error(body: Any) -> str | None:
    """ServiceNow errors are ``{"error": {"message": ..., "detail": ...}, "status": "failure"}``."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return None
    return ": ".join(str(part) for part in (error.get("message"), error.get("detail")) if part) or None


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
            response = await self._http.send("POST", self._url, data=raw, headers=headers, error_text=webhook_error)
            return self._ticket(response.body)

        return await _create(self._http, attempt)

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
        ticket_id = body.get("id") or body.get("ticket_id") if isinstance(body, dict) else None
        if not ticket_id:
            raise RemoteError("the ticket webhook answered without an id", kind="protocol")
        return Ticket(id=str(ticket_id), url=body.get("url"))


def webhook_error(body: Any) -> str | None:
    """A webhook's ``{"error": ...}`` or ``{"message": ...}``, whichever it sent."""
    if isinstance(body, dict):
        error = body.get("error") or body.get("message")
        return str(error.get("message", error)) if isinstance(error, dict) else (str(error) if error else None)
    return None


def build_ticket_backend(settings: Settings, store: Store) -> TicketBackend:
    """The backend ``POLICYPAL_TICKETS`` names, refusing at start when its settings are incomplete."""
    policy = HttpPolicy(timeout_s=settings.tickets_timeout_s, attempts=settings.tickets_attempts)
    if settings.tickets == "jira":
        _require(settings, "jira_url", "jira_email", "jira_api_token", "jira_service_desk_id", "jira_request_type_id")
        return JiraServiceDesk(
            settings.jira_url or "",
            settings.jira_email or "",
            _secret(settings.jira_api_token) or "",
            settings.jira_service_desk_id or "",
            settings.jira_request_type_id or "",
            policy,
        )
    if settings.tickets == "servicenow":
        _require(settings, "servicenow_url")
        if not settings.servicenow_token and not (settings.servicenow_user and settings.servicenow_password):
            raise ConfigError(
                "POLICYPAL_TICKETS=servicenow needs POLICYPAL_SERVICENOW_TOKEN, or "
                "POLICYPAL_SERVICENOW_USER and POLICYPAL_SERVICENOW_PASSWORD"
            )
        return ServiceNowIncidents(
            settings.servicenow_url or "",
            user=settings.servicenow_user,
            password=_secret(settings.servicenow_password),
            token=_secret(settings.servicenow_token),
            policy=policy,
        )
    if settings.tickets == "webhook":
        _require(settings, "tickets_webhook_url")
        return WebhookTickets(settings.tickets_webhook_url or "", _secret(settings.tickets_webhook_secret), policy)
    return LocalTickets(store)


def _require(settings: Settings, *names: str) -> None:
    missing = [f"POLICYPAL_{name.upper()}" for name in names if not getattr(settings, name)]
    if missing:
        raise ConfigError(f"POLICYPAL_TICKETS={settings.tickets} needs {', '.join(missing)}")


def _secret(value: Any) -> str | None:
    return value.get_secret_value() if value is not None else None
