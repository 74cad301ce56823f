"""The ticket backend ``POLICYPAL_TICKETS`` names, refused at start when its settings are incomplete.
"""

from __future__ import annotations

from typing import Any

from bot.config import Settings
from bot.delivery import HttpPolicy
from bot.errors import ConfigError
from bot.store import Store
from bot.tickets.base import TicketBackend
from bot.tickets.jira import JiraServiceDesk
from bot.tickets.local import LocalTickets
from bot.tickets.servicenow import ServiceNowIncidents
from bot.tickets.webhook import WebhookTickets


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
