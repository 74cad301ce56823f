"""The database tables: one declarative ``Base`` and the ORM classes of every table PolicyPal keeps.

All models live on one declarative ``Base`` so Alembic can autogenerate migrations from
``Base.metadata``. Timestamps are timezone-aware UTC in and out (SQLite hands back naive values;
``UtcDateTime`` normalises them).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Float, Index, Integer, MetaData, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from bot.store.columns import UtcDateTime
from bot.types import Message


def _json() -> JSON:
    # none_as_null: a Python None is SQL NULL, not the JSON text 'null'.
    return JSON(none_as_null=True)


class Base(DeclarativeBase):
    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(table_name)s_%(column_0_N_name)s",
            "uq": "uq_%(table_name)s_%(column_0_N_name)s",
            "pk": "pk_%(table_name)s",
        }
    )


class InboxItem(Base):
    """An event a platform delivered, written before it was acknowledged: nothing acknowledged is lost.

    Keyed by the platform's event id, so a redelivery finds its row (the dedupe). The process that
    wrote it holds its lease (``owner``, ``epoch``) while it works; the sweeper gives the items of a
    process that died to a live one with the next epoch, and only the current epoch may finish.
    """

    __tablename__ = "inbox"
    __table_args__ = (Index(None, "state", "owner"),)

    id: Mapped[str] = mapped_column(String(255), primary_key=True)  # "slack:Ev123", "teams:<id>@<digest>"
    platform: Mapped[str] = mapped_column(String(32))
    kind: Mapped[str] = mapped_column(String(64))  # which handler processes it ("slack.request", ...)
    payload: Mapped[dict[str, Any]] = mapped_column(_json())
    received_at: Mapped[datetime] = mapped_column(UtcDateTime, index=True)
    state: Mapped[str] = mapped_column(String(16))  # leased, done, failed
    owner: Mapped[str] = mapped_column(String(255))
    epoch: Mapped[int] = mapped_column(Integer, default=1)
    attempts: Mapped[int] = mapped_column(Integer, default=1)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    last_error: Mapped[str | None] = mapped_column(Text)


class HistoryEntry(Base):
    """One append to a thread's history (a question and its reply). Rows are only ever inserted, so
    messages answered at once, by any number of processes, can never overwrite one another."""

    __tablename__ = "history_entries"
    __table_args__ = (Index(None, "conversation_key", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)  # the order of appends
    conversation_key: Mapped[str] = mapped_column(String(512))
    messages: Mapped[list[Message]] = mapped_column(_json())
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    audience: Mapped[list[str] | None] = mapped_column(_json())  # the groups it was built for (None: unknown)


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (
        Index(None, "status", "owner"),
        Index(None, "reason", "started_at"),
        # The console's filters and reports (bot.store.reports), newest first within each.
        Index(None, "user_id", "started_at"),
        Index(None, "platform", "started_at"),
        # Everything the overview reads of a run: its statements scan this range and never the rows (traces).
        Index(
            "ix_runs_report_window",
            "status",
            "started_at",
            "reason",
            "feedback",
            "guards",
            "steps",
            "input_tokens",
            "output_tokens",
            "cost_usd",
        ),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    conversation_key: Mapped[str] = mapped_column(String(512), index=True)
    platform: Mapped[str] = mapped_column(String(32))
    user_id: Mapped[str] = mapped_column(String(255))
    question: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(String(32))
    started_at: Mapped[datetime] = mapped_column(UtcDateTime, index=True)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    steps: Mapped[int] = mapped_column(Integer, default=0)
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cost_usd: Mapped[float] = mapped_column(Float, default=0.0)
    latency_ms: Mapped[float] = mapped_column(Float, default=0.0)
    model: Mapped[str] = mapped_column(String(255))
    trace: Mapped[list[dict[str, Any]]] = mapped_column(_json())
    # The asker's own rating, kept with the run in step with their ``run_feedback`` row (``Runs.set_feedback``):
    # what a line showing one rating per run reads. Everyone's ratings, the asker's included, are in ``run_feedback``.
    feedback: Mapped[str | None] = mapped_column(String(32))
    feedback_by: Mapped[str | None] = mapped_column(String(255))  # the asker, when they rated
    feedback_comment: Mapped[str | None] = mapped_column(Text)  # why, when the platform asks (Teams)
    owner: Mapped[str] = mapped_column(String(255))
    # The inbox item the run answers: unique, so one item has one run (and one reply) whoever ends it.
    inbox_id: Mapped[str | None] = mapped_column(String(255), unique=True)
    # The question and the answer the thread's history keeps of this run (None: nothing, e.g. a card).
    exchange: Mapped[list[Message] | None] = mapped_column(_json())
    # The groups the answer was built for: a later run reads the exchange only if its readers may.
    audience: Mapped[list[str] | None] = mapped_column(_json())
    place: Mapped[str | None] = mapped_column(String(16))  # "private" (the asker alone) or "shared"
    # What the answer cited ({title, heading, source}): the documents behind a "not helpful".
    citations: Mapped[list[dict[str, str]] | None] = mapped_column(_json())
    guards: Mapped[str | None] = mapped_column(String(255))  # the guards that fired, sorted, comma-separated


class RunFeedback(Base):
    """One person's rating of a run's answer: in a shared place anyone who sees it may rate it, and a
    person's click replaces only their own rating (its comment too)."""

    __tablename__ = "run_feedback"
    __table_args__ = (Index(None, "rating", "rated_at", "run_id"),)  # the answers rated not helpful (the console)

    run_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    rating: Mapped[str] = mapped_column(String(32))  # "helpful" / "not_helpful"
    comment: Mapped[str | None] = mapped_column(Text)  # what they wrote with it (Teams), redacted and bounded
    rated_at: Mapped[datetime] = mapped_column(UtcDateTime)  # the person's last click


class TicketRow(Base):
    """Tickets of the local backend: the embedded default's ticketing system."""

    __tablename__ = "tickets"

    number: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    idempotency_key: Mapped[str] = mapped_column(String(128), unique=True)
    category: Mapped[str] = mapped_column(String(64))
    summary: Mapped[str] = mapped_column(String(255))
    urgency: Mapped[str] = mapped_column(String(16))
    details: Mapped[str] = mapped_column(Text, default="")
    requester_id: Mapped[str] = mapped_column(String(255))
    requester_name: Mapped[str] = mapped_column(String(255), default="")
    status: Mapped[str] = mapped_column(String(16), default="open")
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)


class PendingActionRow(Base):
    __tablename__ = "pending_actions"
    __table_args__ = (Index(None, "state", "expires_at"), Index(None, "state", "decided_at"))

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    run_id: Mapped[str] = mapped_column(String(64))
    conversation_key: Mapped[str] = mapped_column(String(512))
    requester: Mapped[str] = mapped_column(String(255))
    tool: Mapped[str] = mapped_column(String(128))
    call_id: Mapped[str] = mapped_column(String(255))
    arguments: Mapped[dict[str, Any]] = mapped_column(_json())
    args_hash: Mapped[str] = mapped_column(String(64))
    text: Mapped[str] = mapped_column(Text)
    state: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime)
    decided_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    decider: Mapped[str | None] = mapped_column(String(255))
    executor: Mapped[str | None] = mapped_column(String(255))  # the process running the confirmed call
    decided_item: Mapped[str | None] = mapped_column(String(255))  # the inbox item (click) that decided it
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    result: Mapped[dict[str, Any] | None] = mapped_column(_json())
    platform_message: Mapped[dict[str, Any] | None] = mapped_column(_json())
    run_state: Mapped[dict[str, Any]] = mapped_column(_json())


class ThreadPlace(Base):
    """Where a conversation lives on its platform, kept from its first message for handoffs."""

    __tablename__ = "thread_places"

    key: Mapped[str] = mapped_column(String(512), primary_key=True)
    platform: Mapped[str] = mapped_column(String(32))
    tenant: Mapped[str] = mapped_column(String(255), default="")
    channel: Mapped[str] = mapped_column(String(512))  # Teams conversation ids run long
    thread: Mapped[str] = mapped_column(String(255))
    link: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    address: Mapped[dict[str, Any] | None] = mapped_column(_json())  # how to post here unprompted (Teams)


class Worker(Base):
    """A serving process and its last heartbeat: the sweeper takes over runs of processes gone quiet."""

    __tablename__ = "workers"

    owner: Mapped[str] = mapped_column(String(255), primary_key=True)
    started_at: Mapped[datetime] = mapped_column(UtcDateTime)
    heartbeat_at: Mapped[datetime] = mapped_column(UtcDateTime)


class RateWindow(Base):
    """A sliding-window counter (this fixed window and the one before), shared by every replica."""

    __tablename__ = "rate_windows"

    key: Mapped[str] = mapped_column(String(512), primary_key=True)
    window_index: Mapped[int] = mapped_column(BigInteger, index=True)  # floor(epoch seconds / window length)
    count: Mapped[int] = mapped_column(Integer)
    previous: Mapped[int] = mapped_column(Integer)


class PlaceJoin(Base):
    """Someone joined a place (a channel, a group chat, a team): one row per place, counted up by each join.

    Written by whichever replica gets the platform's join event; every replica reads it before trusting
    a cached member list (``bot.audience.MemberLists``). ``joins`` is the version a list is compared by
    (no clock is); ``joined_at`` is the database's time of the last join, for pruning only.
    """

    __tablename__ = "place_joins"

    place: Mapped[str] = mapped_column(String(512), primary_key=True)  # "slack:T1:C1", "teams:<tenant>:19:..."
    joins: Mapped[int] = mapped_column(BigInteger)
    joined_at: Mapped[datetime] = mapped_column(UtcDateTime, index=True)


class StopRequest(Base):
    """Someone pressed Stop in a conversation: one row per conversation, counted up by each press.

    Written by whichever replica gets the platform's stop event; a run reads it when it starts and once a
    turn (``bot.service``) and stops when the row has changed since. ``stops`` and ``stopped_at`` (the
    database's time of the last press) are the version compared, so no replica's clock takes part.
    """

    __tablename__ = "stop_requests"

    conversation_key: Mapped[str] = mapped_column(String(512), primary_key=True)
    stops: Mapped[int] = mapped_column(BigInteger)
    stopped_at: Mapped[datetime] = mapped_column(UtcDateTime, index=True)


class Handoff(Base):
    """A helpdesk case: who, where, the question and the redacted transcript. Never updated."""

    __tablename__ = "handoffs"

    number: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    origin: Mapped[str] = mapped_column(String(640), unique=True)  # what caused it: one case per cause
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, index=True)
    reason: Mapped[str] = mapped_column(String(32))
    user_id: Mapped[str] = mapped_column(String(255))
    user_name: Mapped[str] = mapped_column(String(255), default="")
    user_email: Mapped[str | None] = mapped_column(String(255))
    platform: Mapped[str] = mapped_column(String(32))
    tenant: Mapped[str] = mapped_column(String(255), default="")
    channel: Mapped[str] = mapped_column(String(512), default="")
    thread: Mapped[str] = mapped_column(String(255), default="")
    link: Mapped[str | None] = mapped_column(Text)
    conversation_key: Mapped[str] = mapped_column(String(512), index=True)
    run_id: Mapped[str | None] = mapped_column(String(64))
    question: Mapped[str] = mapped_column(Text)
    reply_within: Mapped[str] = mapped_column(String(64), default="")
    transcript: Mapped[dict[str, Any]] = mapped_column(_json())


class OutboxRow(Base):
    """The outbox: every platform write and every helpdesk delivery, sent exactly once by whoever claims it.

    A helpdesk delivery (``kind`` "case") names its case and destination; a platform write (``kind``
    "post") carries what to post (``payload``) and the platform as its destination. Rows are written
    in the same transaction as the outcome they belong to.
    """

    __tablename__ = "outbox"
    __table_args__ = (UniqueConstraint("case_number", "destination"), Index(None, "state", "next_attempt_at"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(16))
    case_number: Mapped[int | None] = mapped_column(Integer, index=True)
    destination: Mapped[str] = mapped_column(String(64))
    payload: Mapped[dict[str, Any] | None] = mapped_column(_json())
    conversation_key: Mapped[str | None] = mapped_column(String(512), index=True)
    inbox_id: Mapped[str | None] = mapped_column(String(255))
    coalesce_key: Mapped[str | None] = mapped_column(String(255), index=True)  # card updates: newest wins
    state: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(UtcDateTime)
    claimed_by: Mapped[str | None] = mapped_column(String(255))
    claimed_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    last_error: Mapped[str | None] = mapped_column(Text)
    external_ref: Mapped[str | None] = mapped_column(Text)  # the destination's id; mid-delivery, its progress
    delivered_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    # Random, written with the row and sent on every attempt: case ids repeat across databases
    # (a restore, staging and prod, a move to PostgreSQL), so a receiver cannot dedupe on them.
    idempotency_key: Mapped[str] = mapped_column(String(64))
