"""The helpdesk handoff: when PolicyPal cannot finish, a person gets the case with its whole transcript.

``Helpdesk.open_case`` writes a case (once per origin) with one outbox row per destination before
the user hears its id; the outbox (``bot.delivery``) delivers it through ``CaseDeliveries`` to each
destination (a Slack or Teams channel, a signed webhook, email), surviving failures and restarts.
Platform destinations live with their adapters and are passed in by the composition root.
"""

from bot.helpdesk.case import CASE_PREFIX, DEFAULT_REPLY_WITHIN, Destination, HandoffCase, case_id_for, case_number
from bot.helpdesk.deliveries import CaseDeliveries, TrackedDestination
from bot.helpdesk.desk import Helpdesk, TranscriptLimits, asks_for_human
from bot.helpdesk.destinations import EmailDestination, WebhookDestination
from bot.helpdesk.markdown import case_markdown
from bot.helpdesk.reasons import (
    ACTION_UNKNOWN,
    CARD_NOT_SHOWN,
    REPLY_NOT_DELIVERED,
    TICKET_FAILED,
    USER_REQUEST,
    opening,
    reason_label,
)

__all__ = [
    "ACTION_UNKNOWN",
    "CARD_NOT_SHOWN",
    "CASE_PREFIX",
    "DEFAULT_REPLY_WITHIN",
    "REPLY_NOT_DELIVERED",
    "TICKET_FAILED",
    "USER_REQUEST",
    "CaseDeliveries",
    "Destination",
    "EmailDestination",
    "HandoffCase",
    "Helpdesk",
    "TrackedDestination",
    "TranscriptLimits",
    "WebhookDestination",
    "asks_for_human",
    "case_id_for",
    "case_markdown",
    "case_number",
    "opening",
    "reason_label",
]
