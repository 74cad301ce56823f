"""What the service hands back and what it posts: a run's ``Reply``, a click's ``DecisionReply``, and the
outbox rows that carry them to the platform.

A reply reaches Slack or Teams only through the outbox: ``reply_posts`` turns it into the rows
committed with the run, and the platform's sender renders them. The terminal renders the ``Reply``
it gets back instead (no outbox for it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from bot.audience import Audience, asker_audience, place_audience
from bot.cards import CardView
from bot.delivery import Address, Post, outcome_to_json, post_destination
from bot.helpdesk import HandoffCase, case_number
from bot.pending import Decision
from bot.store import NewPost
from bot.types import Inbound, Outcome, TerminationReason

RefusalReason = Literal["rate_limited", "busy"]


@dataclass(frozen=True)
class Reply:
    """One run's outcome and the ids to show or act on."""

    run_id: str
    reason: TerminationReason
    outcome: Outcome
    conversation_key: str
    steps: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    refused: RefusalReason | None = None  # set when no run started: the outcome is a polite refusal

    @property
    def from_a_run(self) -> bool:
        """Whether a run is behind this reply: only then is there a trace to rate and a run to hand off.

        A polite refusal (rate limited, busy) starts no run, and a typed request for a person opens a
        case instead (the reply's id is the case id): feedback or "Still need help?" buttons under
        either could only fail.
        """
        return self.refused is None and case_number(self.run_id) is None


@dataclass(frozen=True)
class DecisionReply:
    """The answer to a click: the decision, the call's result, the card as it stands, the continued run."""

    decision: Decision
    result: dict[str, Any] | None = None  # the frozen call's result, or "cancelled by user"
    reply: Reply | None = None
    case: HandoffCase | None = None  # opened when the confirmed call failed or may not have happened
    card: CardView | None = None  # the card as it stands after this click
    notice: str | None = None  # what the clicker alone is told (a refused or late click)

    @property
    def status(self) -> str:
        return self.decision.status


@dataclass(frozen=True)
class Where:
    """Where a run's reply goes: the conversation, the platform's address, and what the helpdesk links to."""

    platform: str
    conversation_key: str
    question: str
    link: str | None = None
    address: Address | None = None  # None: no outbox for this surface (the terminal)
    readers: Audience | None = None  # who reads the reply here (None: the asker)
    asker: Audience | None = None  # set when the asker may read more than ``readers``: the private part
    private_channel: bool = False  # the private part can be sent (a Slack DM); else the asker is told where

    @classmethod
    def of(cls, inbound: Inbound) -> Where:
        address = Address(
            inbound.platform, inbound.channel, inbound.thread, inbound.address, inbound.user.id, inbound.user.name
        )
        readers, asker = place_audience(inbound), asker_audience(inbound.user)
        more = asker if not set(asker.groups) <= set(readers.groups) else None
        return cls(inbound.platform, inbound.conversation_key, inbound.text, inbound.link, address, readers, more,
                   inbound.private_channel)


PRIVATE_PART = "private_part"  # a direct post's reason: the part of a thread's answer only its asker may read


def reply_posts(reply: Reply, where: Where, inbox_id: str | None) -> list[NewPost]:
    """The outbox row a reply becomes (none for a surface without an outbox)."""
    if where.address is None:
        return []
    post = Post(
        "reply",
        where.address,
        run_id=reply.run_id,
        reason=reply.reason.value,
        outcome=outcome_to_json(reply.outcome),
        from_a_run=reply.from_a_run,
    )
    return [NewPost(post_destination(where.platform), post.to_json(), where.conversation_key, inbox_id)]


def text_post(kind: Literal["notice", "private", "direct"], text: str, where: Where, inbox_id: str | None,
              *, run_id: str | None = None, case_id: str | None = None, reason: str | None = None) -> list[NewPost]:
    """A notice in the thread, a note only the person sees, or a message to them outside the thread."""
    if where.address is None:
        return []
    post = Post(kind, where.address, text=text, run_id=run_id, case_id=case_id, reason=reason)
    return [NewPost(post_destination(where.platform), post.to_json(), where.conversation_key, inbox_id)]


def card_post(view: CardView, target: dict[str, Any] | None, where: Where, inbox_id: str | None) -> list[NewPost]:
    """The card shown anew where it was posted; rows for one card coalesce (the newest is sent)."""
    if where.address is None or not target:
        return []
    post = Post("card", where.address, card=view.to_json(), target=target)
    key = f"card:{view.pending_id}"
    destination = post_destination(where.platform)
    return [NewPost(destination, post.to_json(), where.conversation_key, inbox_id, coalesce_key=key)]
