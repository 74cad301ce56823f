"""A platform write as the core describes it: what to post, where, and what it belongs to.

The core never renders Block Kit or Adaptive Cards. A run's reply, a notice, a card's new state or a
private note is stored in the outbox as a ``Post`` (plain JSON), and the platform's sender renders it
when it sends: so a row written by one replica can be sent by another, and a card row always shows
the state it was written with.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from bot.types import Answer, Citation, GaveUp, Outcome, Pending, PendingAction, TerminationReason

PostKind = Literal["reply", "notice", "card", "private", "direct"]


def post_destination(platform: str) -> str:
    """The outbox destination of a platform's writes ("slack:chat"), apart from its helpdesk channel ("slack")."""
    return f"{platform}:chat"


@dataclass(frozen=True)
class Address:
    """Where a post goes: a thread on a platform, with what that platform needs to post there later."""

    platform: str
    channel: str
    thread: str
    reference: dict[str, Any] | None = None  # Teams: the conversation reference
    user: str = ""  # who it is for: a private note's reader, the person a failed reply is about
    user_name: str = ""

    @property
    def conversation_key(self) -> str:
        return f"{self.platform}:{self.channel}:{self.thread}"


@dataclass(frozen=True)
class Post:
    """One write: ``reply`` (a run's outcome), ``notice`` (text in the thread), ``card`` (a pending action's
    card shown anew), ``private`` (only ``address.user`` sees it), ``direct`` (to the person, outside the thread)."""

    kind: PostKind
    address: Address
    text: str = ""
    run_id: str | None = None
    reason: str | None = None
    outcome: dict[str, Any] | None = None  # reply: the Outcome as JSON (``outcome_to_json``)
    from_a_run: bool = True  # reply: feedback and "Still need help?" buttons only under a run's answer
    case_id: str | None = None
    card: dict[str, Any] | None = None  # card: the CardView as JSON
    target: dict[str, Any] = field(default_factory=dict)  # card: where the card was posted (its message)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Post:
        return cls(**{**data, "address": Address(**data["address"])})

    def reply_outcome(self) -> Outcome:
        if self.outcome is None:
            raise ValueError(f"a {self.kind} post has no outcome")
        return outcome_from_json(self.outcome)


def outcome_to_json(outcome: Outcome) -> dict[str, Any]:
    """An outcome as plain JSON: what a reply row carries."""
    if isinstance(outcome, Answer):
        return {"type": "answer", "text": outcome.text, "citations": [asdict(c) for c in outcome.citations]}
    if isinstance(outcome, Pending):
        action = asdict(outcome.action) | {"expires_at": outcome.action.expires_at.isoformat()}
        return {"type": "pending", "text": outcome.text, "action": action}
    return {"type": "gave_up", "reason": outcome.reason.value, "text": outcome.text, "case_id": outcome.case_id}


def outcome_from_json(data: dict[str, Any]) -> Outcome:
    from datetime import datetime

    if data["type"] == "answer":
        return Answer(data["text"], tuple(Citation.from_json(c) for c in data.get("citations", [])))
    if data["type"] == "pending":
        action = {**data["action"], "expires_at": datetime.fromisoformat(data["action"]["expires_at"])}
        return Pending(data["text"], PendingAction(**action))
    return GaveUp(TerminationReason(data["reason"]), data["text"], case_id=data.get("case_id"))
