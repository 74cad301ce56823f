"""IT tickets behind one interface: the local store by default, or Jira SM, ServiceNow or a webhook.

A backend creates the ticket a requester confirmed, sending the pending action id as its
idempotency key; ``build_ticket_backend`` picks the one ``POLICYPAL_TICKETS`` names.
"""

from bot.tickets.base import Ticket, TicketBackend, TicketRequest
from bot.tickets.choice import build_ticket_backend
from bot.tickets.jira import JiraServiceDesk
from bot.tickets.local import LocalTickets
from bot.tickets.servicenow import ServiceNowIncidents
from bot.tickets.webhook import WebhookTickets

__all__ = [
    "JiraServiceDesk",
    "LocalTickets",
    "ServiceNowIncidents",
    "Ticket",
    "TicketBackend",
    "TicketRequest",
    "WebhookTickets",
    "build_ticket_backend",
]
