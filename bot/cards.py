"""What a pending action's card says, worded once for every surface (Slack, Teams, the terminal).

Each surface renders these sentences in its own markup (a Slack mention, a Teams name in bold);
the words, the date format and what a state is called live here, so a card reads the same everywhere.
"""

from __future__ import annotations

from datetime import datetime

# How a later click describes the state the action is already in.
_DECIDED_AS = {
    "executing": "confirmed",
    "done": "confirmed",
    "failed": "confirmed",
    "unknown": "confirmed",
    "cancelled": "cancelled",
    "expired": "expired",
}


def when(moment: datetime | None) -> str:
    """A card's time: minutes, in UTC, said so (the people deciding may be anywhere)."""
    return moment.strftime("%Y-%m-%d %H:%M UTC") if moment else "an unknown time"


def decided_as(state: str) -> str:
    """The word for an action already decided: "confirmed", "cancelled" or "expired"."""
    return _DECIDED_AS.get(state, state)


def already_decided(state: str, decider: str, decided_at: datetime | None) -> str:
    """What a late click is told; ``decider`` as the surface shows a person (a mention, a name)."""
    at = f" at {when(decided_at)}" if decided_at else ""
    return f"Already {decided_as(state)} by {decider}{at}."


def expired(expires_at: datetime) -> str:
    """What an expired card and a click on it say: nothing was done, and what to do instead."""
    return f"This request expired at {when(expires_at)}. Nothing was done; ask again if you still need it."
