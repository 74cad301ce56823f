"""baseline: the tables create_all made before migrations

Revision ID: 0001_baseline
Revises:
Create Date: 2026-11-29 14:50:54.778942
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from bot.store.columns import UtcDateTime

revision: str = "0001_baseline"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "conversations",
        sa.Column("key", sa.String(length=512), nullable=False),
        sa.Column("messages", sa.JSON(), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_conversations")),
    )
    op.create_table(
        "handoff_deliveries",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("case_number", sa.Integer(), nullable=False),
        sa.Column("destination", sa.String(length=64), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", UtcDateTime(), nullable=False),
        sa.Column("claimed_by", sa.String(length=255), nullable=True),
        sa.Column("claimed_at", UtcDateTime(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("external_ref", sa.Text(), nullable=True),
        sa.Column("delivered_at", UtcDateTime(), nullable=True),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_handoff_deliveries")),
        sa.UniqueConstraint("case_number", "destination", name=op.f("uq_handoff_deliveries_case_number_destination")),
    )
    op.create_index(op.f("ix_handoff_deliveries_case_number"), "handoff_deliveries", ["case_number"], unique=False)
    op.create_index(
        op.f("ix_handoff_deliveries_state_next_attempt_at"),
        "handoff_deliveries",
        ["state", "next_attempt_at"],
        unique=False,
    )
    op.create_table(
        "handoffs",
        sa.Column("number", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("origin", sa.String(length=640), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("reason", sa.String(length=32), nullable=False),
        sa.Column("user_id", sa.String(length=255), nullable=False),
        sa.Column("user_name", sa.String(length=255), nullable=False),
        sa.Column("user_email", sa.String(length=255), nullable=True),
        sa.Column("platform", sa.String(length=32), nullable=False),
        sa.Column("tenant", sa.String(length=255), nullable=False),
        sa.Column("channel", sa.String(length=512), nullable=False),
        sa.Column("thread", sa.String(length=255), nullable=False),
        sa.Column("link", sa.Text(), nullable=True),
        sa.Column("conversation_key", sa.String(length=512), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=True),
        sa.Column("question", sa.Text(), nullable=False),
        sa.Column("reply_within", sa.String(length=64), nullable=False),
        sa.Column("transcript", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("number", name=op.f("pk_handoffs")),
        sa.UniqueConstraint("origin", name=op.f("uq_handoffs_origin")),
    )
    op.create_index(op.f("ix_handoffs_conversation_key"), "handoffs", ["conversation_key"], unique=False)
    op.create_index(op.f("ix_handoffs_created_at"), "handoffs", ["created_at"], unique=False)
    op.create_table(
        "pending_actions",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("conversation_key", sa.String(length=512), nullable=False),
        sa.Column("requester", sa.String(length=255), nullable=False),
        sa.Column("tool", sa.String(length=128), nullable=False),
        sa.Column("call_id", sa.String(length=255), nullable=False),
        sa.Column("arguments", sa.JSON(), nullable=False),
        sa.Column("args_hash", sa.String(length=64), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("expires_at", UtcDateTime(), nullable=False),
        sa.Column("decided_at", UtcDateTime(), nullable=True),
        sa.Column("decider", sa.String(length=255), nullable=True),
        sa.Column("finished_at", UtcDateTime(), nullable=True),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("platform_message", sa.JSON(), nullable=True),
        sa.Column("run_state", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pending_actions")),
    )
    op.create_index(
        op.f("ix_pending_actions_state_decided_at"), "pending_actions", ["state", "decided_at"], unique=False
    )
    op.create_index(
        op.f("ix_pending_actions_state_expires_at"), "pending_actions", ["state", "expires_at"], unique=False
    )
    op.create_table(
        "processed_events",
        sa.Column("event_id", sa.String(length=255), nullable=False),
        sa.Column("received_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("event_id", name=op.f("pk_processed_events")),
    )
    op.create_index(op.f("ix_processed_events_received_at"), "processed_events", ["received_at"], unique=False)
    op.create_table(
        "runs",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("conversation_key", sa.String(length=512), nullable=False),
        sa.Column("platform", sa.String(length=32), nullable=False),
        sa.Column("user_id", sa.String(length=255), nullable=False),
        sa.Column("question", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=32), nullable=True),
        sa.Column("started_at", UtcDateTime(), nullable=False),
        sa.Column("finished_at", UtcDateTime(), nullable=True),
        sa.Column("steps", sa.Integer(), nullable=False),
        sa.Column("input_tokens", sa.Integer(), nullable=False),
        sa.Column("output_tokens", sa.Integer(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        sa.Column("latency_ms", sa.Float(), nullable=False),
        sa.Column("model", sa.String(length=255), nullable=False),
        sa.Column("trace", sa.JSON(), nullable=False),
        sa.Column("feedback", sa.String(length=32), nullable=True),
        sa.Column("feedback_by", sa.String(length=255), nullable=True),
        sa.Column("owner", sa.String(length=255), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
    )
    op.create_index(op.f("ix_runs_conversation_key"), "runs", ["conversation_key"], unique=False)
    op.create_index(op.f("ix_runs_started_at"), "runs", ["started_at"], unique=False)
    op.create_index(op.f("ix_runs_status_owner"), "runs", ["status", "owner"], unique=False)
    op.create_table(
        "thread_places",
        sa.Column("key", sa.String(length=512), nullable=False),
        sa.Column("platform", sa.String(length=32), nullable=False),
        sa.Column("tenant", sa.String(length=255), nullable=False),
        sa.Column("channel", sa.String(length=512), nullable=False),
        sa.Column("thread", sa.String(length=255), nullable=False),
        sa.Column("link", sa.Text(), nullable=True),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_thread_places")),
    )
    op.create_table(
        "tickets",
        sa.Column("number", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("idempotency_key", sa.String(length=128), nullable=False),
        sa.Column("category", sa.String(length=64), nullable=False),
        sa.Column("summary", sa.String(length=255), nullable=False),
        sa.Column("urgency", sa.String(length=16), nullable=False),
        sa.Column("details", sa.Text(), nullable=False),
        sa.Column("requester_id", sa.String(length=255), nullable=False),
        sa.Column("requester_name", sa.String(length=255), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("number", name=op.f("pk_tickets")),
        sa.UniqueConstraint("idempotency_key", name=op.f("uq_tickets_idempotency_key")),
    )


def downgrade() -> None:
    op.drop_table("tickets")
    op.drop_table("thread_places")
    op.drop_index(op.f("ix_runs_status_owner"), table_name="runs")
    op.drop_index(op.f("ix_runs_started_at"), table_name="runs")
    op.drop_index(op.f("ix_runs_conversation_key"), table_name="runs")
    op.drop_table("runs")
    op.drop_index(op.f("ix_processed_events_received_at"), table_name="processed_events")
    op.drop_table("processed_events")
    op.drop_index(op.f("ix_pending_actions_state_expires_at"), table_name="pending_actions")
    op.drop_index(op.f("ix_pending_actions_state_decided_at"), table_name="pending_actions")
    op.drop_table("pending_actions")
    op.drop_index(op.f("ix_handoffs_created_at"), table_name="handoffs")
    op.drop_index(op.f("ix_handoffs_conversation_key"), table_name="handoffs")
    op.drop_table("handoffs")
    op.drop_index(op.f("ix_handoff_deliveries_state_next_attempt_at"), table_name="handoff_deliveries")
    op.drop_index(op.f("ix_handoff_deliveries_case_number"), table_name="handoff_deliveries")
    op.drop_table("handoff_deliveries")
    op.drop_table("conversations")
