"""What the store hands out: plain frozen dataclasses, never ORM rows, so callers hold no session.

Each record's fields are its table's columns one to one, so a row selected from the table converts
by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from bot.types import PendingAction

RunStatus = Literal["running", "recovering", "finished"]
DeliveryState = Literal["pending", "sending", "delivered", "failed", "superseded"]
InboxState = Literal["leased", "done", "failed"]
PendingState = Literal["open", "executing", "done", "failed", "cancelled", "expired", "unknown"]


@dataclass(frozen=True)
class RunRow:
    """One run as stored: what the CLI lists and a sweeper inspects."""

    id: str
    conversation_key: str
    platform: str
    user_id: str
    question: str
    status: RunStatus
    reason: str | None
    started_at: datetime
    finished_at: datetime | None
    steps: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    latency_ms: float
    model: str
    trace: list[dict[str, Any]]
    feedback: str | None  # the asker's own rating (everyone's: ``Runs.ratings``)
    feedback_by: str | None  # the asker, when they rated
    owner: str
    feedback_comment: str | None = None  # what the asker wrote with the rating (Teams' feedback loop)
    inbox_id: str | None = None  # the inbox item this run answers (None: the terminal)
    exchange: list[dict[str, Any]] | None = None  # what the thread's history keeps of it
    audience: list[str] | None = None  # the groups its answer was built for (None: before audiences)
    place: str | None = None  # "private" or "shared" (None: before places were recorded)
    citations: list[dict[str, str]] | None = None  # what the answer cited: title, heading, source
    guards: str | None = None  # the guards that refused a call, sorted and comma-separated ("" for none)


@dataclass(frozen=True)
class Rating:
    """One person's rating of a run's answer (a ``run_feedback`` row)."""

    run_id: str
    user_id: str
    rating: str  # "helpful" / "not_helpful"
    comment: str | None
    rated_at: datetime


@dataclass(frozen=True)
class KnowledgeGap:
    """A question the policies did not answer: runs that ended ``not_covered`` with this (redacted) text."""

    question: str
    count: int
    askers: int  # different user ids
    first_asked: datetime
    last_asked: datetime


@dataclass(frozen=True)
class PendingRecord:
    """Everything stored about a pending action, including the frozen call and the run to resume."""

    id: str
    run_id: str
    conversation_key: str
    requester: str
    tool: str
    call_id: str
    arguments: dict[str, Any]
    args_hash: str
    text: str
    state: PendingState
    created_at: datetime
    expires_at: datetime
    decided_at: datetime | None
    decider: str | None
    executor: str | None  # the process that ran (or is running) the confirmed call
    finished_at: datetime | None
    result: dict[str, Any] | None
    platform_message: dict[str, Any] | None
    run_state: dict[str, Any]
    decided_item: str | None = None  # the inbox item (the click) that decided it: only its retry resumes the run

    def as_action(self) -> PendingAction:
        """The public view adapters render as a card."""
        return PendingAction(
            id=self.id,
            tool=self.tool,
            arguments=self.arguments,
            args_hash=self.args_hash,
            requester=self.requester,
            text=self.text,
            expires_at=self.expires_at,
            state=self.state,
        )


@dataclass(frozen=True)
class Place:
    """Where a conversation lives: what a handoff links back to."""

    key: str
    platform: str
    tenant: str
    channel: str
    thread: str
    link: str | None
    address: dict[str, Any] | None = None  # the platform's reference for posting here later

    @classmethod
    def from_key(cls, key: str) -> Place:
        """Best effort for conversations older than ``thread_places``: the platform is the key's first part."""
        platform, _, rest = key.partition(":")
        tenant, _, rest = rest.partition(":")
        return cls(key=key, platform=platform, tenant=tenant, channel=rest, thread="", link=None)


@dataclass(frozen=True)
class HandoffRecord:
    """A stored helpdesk case."""

    number: int
    origin: str
    created_at: datetime
    reason: str
    user_id: str
    user_name: str
    user_email: str | None
    platform: str
    tenant: str
    channel: str
    thread: str
    link: str | None
    conversation_key: str
    run_id: str | None
    question: str
    reply_within: str
    transcript: dict[str, Any]


@dataclass(frozen=True)
class DeliveryRecord:
    """One outbox row: a case's delivery to one destination ("case"), or a platform write ("post")."""

    id: int
    kind: str
    case_number: int | None
    destination: str
    payload: dict[str, Any] | None
    conversation_key: str | None
    inbox_id: str | None
    coalesce_key: str | None
    state: DeliveryState
    attempts: int
    next_attempt_at: datetime
    claimed_by: str | None
    claimed_at: datetime | None
    last_error: str | None
    external_ref: str | None  # once delivered, the destination's id; before, what a partial attempt saved
    delivered_at: datetime | None
    created_at: datetime
    idempotency_key: str  # random per row, the same on every attempt


def to_run_row(row: Any) -> RunRow:
    """A ``runs`` row as the record callers get."""
    return RunRow(**row._mapping)


def to_pending_record(row: Any) -> PendingRecord:
    """A ``pending_actions`` row as the record callers get."""
    return PendingRecord(**row._mapping)


def to_handoff_record(row: Any) -> HandoffRecord:
    """A ``handoffs`` row as the record callers get."""
    return HandoffRecord(**row._mapping)


def to_delivery_record(row: Any) -> DeliveryRecord:
    """An ``outbox`` row as the record callers get."""
    return DeliveryRecord(**row._mapping)


@dataclass(frozen=True)
class InboxRecord:
    """One inbox item: an event as the platform delivered it, and who holds its lease."""

    id: str
    platform: str
    kind: str
    payload: dict[str, Any]
    received_at: datetime
    state: InboxState
    owner: str
    epoch: int
    attempts: int
    finished_at: datetime | None
    last_error: str | None


def to_inbox_record(row: Any) -> InboxRecord:
    """An ``inbox`` row as the record callers get."""
    return InboxRecord(**row._mapping)
