"""What a pending action's card says, worded once for every surface (Slack, Teams, the terminal).

Each surface renders these sentences in its own markup (a Slack mention, a Teams name in bold);
the words, the date format and what a state is called live here, so a card reads the same everywhere.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bot.store import PendingRecord

# How a later click describes the state the action is already in.
_DECIDED_AS = {
    "executing": "confirmed",
    "done": "confirmed",
    "failed": "confirmed",
    "unknown": "confirmed",
    "cancelled": "cancelled",
    "expired": "expired",
}


ERROR_CHARS = 300  # of a ticket system's error on a card: its JSON can run to pages (the case keeps it all)


def short_error(error: object) -> str:
    """A ticket system's error as a card shows it: one line, at most ``ERROR_CHARS``, cut visibly."""
    line = " ".join(str(error).split()).rstrip(".")
    return line if len(line) <= ERROR_CHARS else line[: ERROR_CHARS - 1].rstrip() + "…"


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


def card_id(pending_id: str) -> str:
    """The id of a pending action's card, which its buttons carry beside the pending id and the hash.

    One card per pending action, so it is derived, not stored: every rendering of the card (posted,
    shown again after a refused click) carries the same one.
    """
    return hashlib.sha256(f"card:{pending_id}".encode()).hexdigest()[:12]


# A posted card's stored location -> (conversation, message id), as the platform that stored it reads it.
Located = Callable[[dict[str, Any]], tuple[str, str] | None]


@dataclass(frozen=True)
class ClickedCard:
    """The card a click came from: the card id its button carried and the message it was clicked in.

    ``message`` is (conversation, message id) as the platform names them (Slack: channel and ts; Teams:
    conversation and activity id), and ``located`` reads the same pair from where the card was posted,
    as that platform stored it (``PolicyPal.card_posted``). ``card_id`` is None for a button of a card
    posted by an earlier release, whose value names no card.
    """

    card_id: str | None
    message: tuple[str, str] | None
    located: Located

    def belongs_to(self, pending_id: str, posted: dict[str, Any] | None) -> bool:
        """Is this click from ``pending_id``'s own card, which was posted at ``posted``?

        A button naming another card never is. Otherwise the clicked message decides: a value copied
        from one card and clicked on another (same call, same hash) comes from the wrong message. Where
        the card's message is unknown (the platform answered the post without an id, or the click beat
        the post's record by milliseconds), the click is taken, card id or not: the value still binds
        it to the frozen call and its requester, and refusing would leave a card nobody can decide.
        Buttons from an earlier release carry no card id and meet the same location check, so the
        cards already in people's threads keep working.
        """
        if self.card_id is not None and self.card_id != card_id(pending_id):
            return False
        where = self.located(posted) if posted else None
        return where is None or where == self.message


CARD_STATES = ("open", "working", "executing", "done", "failed", "unknown", "cancelled", "expired")


@dataclass(frozen=True)
class CardView:
    """What a pending action's card shows now, on every surface: the frozen call, its state, who and when.

    ``working`` is the moment after the requester's click, before the decision is stored (buttons gone
    at once); every other state is the action's own. Buttons show only while the card is ``open``.
    """

    pending_id: str
    args_hash: str
    tool: str
    text: str  # what the model said alongside the proposal
    arguments: dict[str, Any]
    requester: str
    state: str
    expires_at: datetime
    decider: str | None = None
    decided_at: datetime | None = None
    result: dict[str, Any] | None = None
    case_id: str | None = None
    choice: str | None = None  # working: "confirm" or "cancel"

    @property
    def buttons(self) -> bool:
        return self.state == "open"

    @classmethod
    def of(cls, record: PendingRecord, *, case_id: str | None = None) -> CardView:
        """The card for an action as stored; ``case_id`` when a helpdesk case follows it up."""
        result = record.result or {}
        return cls(
            pending_id=record.id,
            args_hash=record.args_hash,
            tool=record.tool,
            text=record.text,
            arguments=record.arguments,
            requester=record.requester,
            state=record.state,
            expires_at=record.expires_at,
            decider=record.decider,
            decided_at=record.decided_at,
            result=record.result,
            case_id=case_id or result.get("case_id"),
        )

    def working(self, actor: str, at: datetime, choice: str) -> CardView:
        """The card right after ``actor``'s click, while the decision is made."""
        return replace(self, state="working", decider=actor, decided_at=at, choice=choice)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for name in ("expires_at", "decided_at"):
            data[name] = data[name].isoformat() if data[name] else None
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CardView:
        moments = {n: datetime.fromisoformat(data[n]) if data.get(n) else None for n in ("expires_at", "decided_at")}
        return cls(**{**data, **moments})

    def status(
        self,
        who: Callable[[str], str],
        strong: Callable[[str], str] = str,
        ticket: Callable[[str, str | None], str] | None = None,
        text: Callable[[str], str] = str,
    ) -> str:
        """One sentence for the card's state; ``who`` shows a person (a mention, a name), ``strong`` an id,
        ``ticket`` a ticket id with its link (``strong`` by default), ``text`` what another system wrote
        (a ticket system's error may quote "<!channel>": a surface that reads markup escapes it)."""
        by = f"{who(self.decider)} at {when(self.decided_at)}" if self.decider else "someone"
        result = self.result or {}
        follow_up = f" Helpdesk case {strong(self.case_id)} will follow up." if self.case_id else ""
        if self.state == "open":
            return f"Waiting for {who(self.requester)} to confirm. Expires {when(self.expires_at)}."
        if self.state == "working":
            return f"{who(self.decider or self.requester)} clicked {(self.choice or 'confirm').capitalize()} " \
                   f"at {when(self.decided_at)}. Working on it…"
        if self.state == "executing":
            return f"Confirmed by {by}. Creating it now…"
        if self.state == "done":
            show = ticket or (lambda number, _url: strong(number))
            made = f"Ticket {show(str(result['ticket_id']), result.get('url'))} created." if result.get("ticket_id") \
                else "Done."
            return f"Confirmed by {by}. {made}"
        if self.state == "failed":
            error = text(short_error(result.get("error", "unknown error")))
            return f"Confirmed by {by}, but it failed: {error}.{follow_up}"
        if self.state == "unknown":
            return f"Confirmed by {by}, but it is not known whether it went through; nothing will be retried." \
                   f"{follow_up or ' A person will check.'}"
        if self.state == "cancelled":
            return f"Cancelled by {by}. Nothing was created."
        if self.state == "expired":
            return expired(self.expires_at)
        return f"State: {self.state}."
