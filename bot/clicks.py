"""What a click that did not decide is told, worded once for every surface (``who`` shows a person)."""

from __future__ import annotations

from collections.abc import Callable

from bot import cards
from bot.pending import Decision


def click_notice(verdict: Decision, who: Callable[[str], str], decision: str = "decide") -> str:
    """Why nothing happened: gone, expired, someone else's, another call's or another card's button, or decided."""
    record = verdict.action
    if record is None:
        return verdict.message
    if verdict.status == "expired":
        return cards.expired(record.expires_at)
    if verdict.status == "already_decided" and record.decider:
        return cards.already_decided(record.state, who(record.decider), record.decided_at)
    if verdict.status == "not_requester":
        return f"Only {who(record.requester)} can {decision} this."
    return verdict.message
