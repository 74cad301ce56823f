"""stop_requests: a Stop pressed in a conversation, seen by the run there on whichever replica it runs

Revision ID: 0011_stop_requests
Revises: 0010_place_joins
Create Date: 2026-12-10 09:00:00.000000

Slack's stop button cancelled only the runs of the replica that got the event; a run on another one
went on and answered anyway. A press is now one upsert here (a count per conversation, and the
database's time of the last one), which a run reads when it starts and once a turn. Down again, a stop
reaches only the runs of the replica that got it, as before.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from bot.store.columns import UtcDateTime

revision: str = "0011_stop_requests"
down_revision: str | Sequence[str] | None = "0010_place_joins"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "stop_requests",
        sa.Column("conversation_key", sa.String(length=512), nullable=False),
        sa.Column("stops", sa.BigInteger(), nullable=False),
        sa.Column("stopped_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("conversation_key", name=op.f("pk_stop_requests")),
    )
    op.create_index(op.f("ix_stop_requests_stopped_at"), "stop_requests", ["stopped_at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_stop_requests_stopped_at"), table_name="stop_requests")
    op.drop_table("stop_requests")
