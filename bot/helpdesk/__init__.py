"""The helpdesk handoff: when PolicyPal cannot finish, a person gets the case with its whole transcript.

``Helpdesk.open_case`` writes a case (once per origin) with one outbox row per destination before
the user hears its id; the ``Outbox`` delivers it (a Slack or Teams channel, a signed webhook,
email), surviving failures and restarts. Platform destinations live with their adapters and are
passed in by the composition root.
"""

from bot.helpdesk.case import CASE_PREFIX, DEFAULT_REPLY_WITHIN, Destination, HandoffCase, case_id_for, case_number
from bot.helpdesk.desk import Helpdesk, TranscriptLimits, asks_for_human
from bot.helpdesk.destinations import EmailDestination, WebhookDestination
from bot.helpdesk.markdown import case_markdown
from bot.helpdesk.outbox import Delivery, DeliveryResult, Outbox, OutboxPolicy, TrackedDestination
from bot.helpdesk.reasons import ACTION_UNKNOWN, CARD_NOT_SHOWN, TICKET_FAILED, USER_REQUEST, opening, reason_label

__all__ = [
    "ACTION_UNKNOWN",
    "CARD_NOT_SHOWN",
    "CASE_PREFIX",
    "DEFAULT_REPLY_WITHIN",
    "TICKET_FAILED",
    "USER_REQUEST",
    "Delivery",
    "DeliveryResult",
    "Destination",
    "EmailDestination",
    "HandoffCase",
    "Helpdesk",
    "Outbox",
    "OutboxPolicy",
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
