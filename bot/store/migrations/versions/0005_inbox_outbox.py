"""inbox and outbox: events written before the ack, every platform write an outbox row, fenced runs

Revision ID: 0005_inbox_outbox
Revises: 0004_delivery_keys
Create Date: 2026-12-01 12:00:00.000000

``processed_events`` becomes ``inbox`` (each claimed event id is kept as a finished item, so an event
an earlier release handled is still not run again), ``handoff_deliveries`` becomes ``outbox`` (each
delivery kept as a "case" row), runs name the inbox item they answer (unique), and a pending action
names the process executing it. A run also keeps the exchange its thread's history shows (one row
written per run instead of two; history entries remain for what has no run, like a hand-over).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from bot.store.columns import UtcDateTime

revision: str = "0005_inbox_outbox"
down_revision: str | Sequence[str] | None = "0004_delivery_keys"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DELIVERY_COLUMNS = (
    "id",
    "case_number",
    "destination",
    "state",
    "attempts",
    "next_attempt_at",
    "claimed_by",
    "claimed_at",
    "last_error",
    "external_ref",
    "delivered_at",
    "created_at",
    "idempotency_key",
)


def upgrade() -> None:
    _create_inbox()
    op.execute(
        "INSERT INTO inbox (id, platform, kind, payload, received_at, state, owner, epoch, attempts, finished_at) "
        "SELECT event_id, '', 'legacy', '{}', received_at, 'done', '', 1, 1, received_at FROM processed_events"
    )
    op.drop_index("ix_processed_events_received_at", table_name="processed_events")
    op.drop_table("processed_events")
    _create_outbox()
    columns = ", ".join(DELIVERY_COLUMNS)
    op.execute(f"INSERT INTO outbox (kind, {columns}) SELECT 'case', {columns} FROM handoff_deliveries")
    _drop_deliveries()
    if op.get_bind().dialect.name == "postgresql":  # the copied ids must not collide with new ones
        op.execute("SELECT setval(pg_get_serial_sequence('outbox', 'id'), COALESCE(MAX(id), 0) + 1, false) FROM outbox")
    with op.batch_alter_table("runs") as batch_op:
        batch_op.add_column(sa.Column("inbox_id", sa.String(length=255), nullable=True))
        batch_op.add_column(sa.Column("exchange", sa.JSON(), nullable=True))
        batch_op.create_unique_constraint("uq_runs_inbox_id", ["inbox_id"])
    with op.batch_alter_table("pending_actions") as batch_op:
        batch_op.add_column(sa.Column("executor", sa.String(length=255), nullable=True))
        batch_op.add_column(sa.Column("decided_item", sa.String(length=255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("pending_actions") as batch_op:
        batch_op.drop_column("decided_item")
        batch_op.drop_column("executor")
    with op.batch_alter_table("runs") as batch_op:
        batch_op.drop_constraint("uq_runs_inbox_id", type_="unique")
        batch_op.drop_column("exchange")
        batch_op.drop_column("inbox_id")
    _create_deliveries()
    columns = ", ".join(DELIVERY_COLUMNS)
    op.execute(f"INSERT INTO handoff_deliveries ({columns}) SELECT {columns} FROM outbox WHERE kind = 'case'")
    op.drop_index("ix_outbox_conversation_key", table_name="outbox")
    op.drop_index("ix_outbox_coalesce_key", table_name="outbox")
    op.drop_index("ix_outbox_case_number", table_name="outbox")
    op.drop_index("ix_outbox_state_next_attempt_at", table_name="outbox")
    op.drop_table("outbox")
    op.create_table(
        "processed_events",
        sa.Column("event_id", sa.String(length=255), nullable=False),
        sa.Column("received_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("event_id", name=op.f("pk_processed_events")),
    )
    op.create_index("ix_processed_events_received_at", "processed_events", ["received_at"], unique=False)
    op.execute("INSERT INTO processed_events (event_id, received_at) SELECT id, received_at FROM inbox")
    op.drop_index("ix_inbox_state_owner", table_name="inbox")
    op.drop_index("ix_inbox_received_at", table_name="inbox")
    op.drop_table("inbox")


def _create_inbox() -> None:
    op.create_table(
        "inbox",
        sa.Column("id", sa.String(length=255), nullable=False),
        sa.Column("platform", sa.String(length=32), nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("received_at", UtcDateTime(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("owner", sa.String(length=255), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("finished_at", UtcDateTime(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_inbox")),
    )
    op.create_index("ix_inbox_received_at", "inbox", ["received_at"], unique=False)
    op.create_index("ix_inbox_state_owner", "inbox", ["state", "owner"], unique=False)


def _create_outbox() -> None:
    op.create_table(
        "outbox",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("case_number", sa.Integer(), nullable=True),
        sa.Column("destination", sa.String(length=64), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=True),
        sa.Column("conversation_key", sa.String(length=512), nullable=True),
        sa.Column("inbox_id", sa.String(length=255), nullable=True),
        sa.Column("coalesce_key", sa.String(length=255), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", UtcDateTime(), nullable=False),
        sa.Column("claimed_by", sa.String(length=255), nullable=True),
        sa.Column("claimed_at", UtcDateTime(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("external_ref", sa.Text(), nullable=True),
        sa.Column("delivered_at", UtcDateTime(), nullable=True),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("idempotency_key", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_outbox")),
        sa.UniqueConstraint("case_number", "destination", name=op.f("uq_outbox_case_number_destination")),
    )
    op.create_index("ix_outbox_case_number", "outbox", ["case_number"], unique=False)
    op.create_index("ix_outbox_coalesce_key", "outbox", ["coalesce_key"], unique=False)
    op.create_index("ix_outbox_conversation_key", "outbox", ["conversation_key"], unique=False)
    op.create_index("ix_outbox_state_next_attempt_at", "outbox", ["state", "next_attempt_at"], unique=False)


def _create_deliveries() -> None:
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
        sa.Column("idempotency_key", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_handoff_deliveries")),
        sa.UniqueConstraint("case_number", "destination", name=op.f("uq_handoff_deliveries_case_number_destination")),
    )
    op.create_index("ix_handoff_deliveries_case_number", "handoff_deliveries", ["case_number"], unique=False)
    op.create_index(
        "ix_handoff_deliveries_state_next_attempt_at",
        "handoff_deliveries",
        ["state", "next_attempt_at"],
        unique=False,
    )


def _drop_deliveries() -> None:
    op.drop_index("ix_handoff_deliveries_state_next_attempt_at", table_name="handoff_deliveries")
    op.drop_index("ix_handoff_deliveries_case_number", table_name="handoff_deliveries")
    op.drop_table("handoff_deliveries")
