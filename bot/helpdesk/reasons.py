"""Why a helpdesk case was opened: the reason codes, and their words for helpdesk agents and for users.

A case's reason is a ``TerminationReason`` value (the run gave up) or one of the four codes below
(no run gave up: the user asked, or a confirmed action failed or may not have happened). Every
surface and destination words them from here.
"""

from __future__ import annotations

from bot.types import TerminationReason

USER_REQUEST = "user_request"
TICKET_FAILED = "ticket_failed"
ACTION_UNKNOWN = "action_unknown"
CARD_NOT_SHOWN = "card_not_shown"
REPLY_NOT_DELIVERED = "reply_not_delivered"

_REASON_LABELS = {
    "step_budget": "ran out of steps",
    "token_budget": "ran out of tokens",
    "deadline": "ran out of time",
    "cost_budget": "hit the cost cap",
    "no_progress": "made no progress",
    "policy_denied": "asked for something only the helpdesk can do",
    "model_error": "the model failed",
    "cancelled": "the run was cancelled",
    "internal_error": "PolicyPal hit an internal error (its log has the traceback)",
    USER_REQUEST: "the user asked for a human",
    TICKET_FAILED: "the ticket system refused a confirmed ticket",
    ACTION_UNKNOWN: "a confirmed action was interrupted; check whether it happened",
    CARD_NOT_SHOWN: "the confirmation card could not be posted, so nothing was done",
    REPLY_NOT_DELIVERED: "PolicyPal's reply could not be posted in the conversation",
}


def reason_label(reason: str) -> str:
    """A few words a helpdesk agent understands without knowing the termination reasons."""
    return _REASON_LABELS.get(reason, reason.replace("_", " "))


_OPENINGS = {
    TerminationReason.POLICY_DENIED.value: "I'm not allowed to do that for you.",
    TerminationReason.CANCELLED.value: "This request was stopped before it finished.",
    TICKET_FAILED: "I couldn't create the ticket.",
    ACTION_UNKNOWN: "I couldn't tell whether your confirmed request went through.",
    CARD_NOT_SHOWN: "I couldn't show you the confirmation for that request, so nothing was done.",
    REPLY_NOT_DELIVERED: "I couldn't post my reply in the conversation.",
    USER_REQUEST: "Sure.",
}
_DEFAULT_OPENING = "I couldn't finish this reliably."


def opening(reason: str) -> str:
    """The first sentence the user reads: what went wrong, before the case id and what happens next."""
    return _OPENINGS.get(reason, _DEFAULT_OPENING)
