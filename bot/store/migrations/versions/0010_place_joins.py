"""place_joins: joins every replica sees, so none answers from a member list read before someone joined

Revision ID: 0010_place_joins
Revises: 0009_run_feedback
Create Date: 2026-12-08 09:00:00.000000

With ``POLICYPAL_SHARED_AUDIENCE=members`` each replica caches a place's member list for minutes and
dropped it when someone joined, but only the replica that got the join event did; the others went on
answering the newcomer's channel from the older list. A join is now one upsert here (a count per
place, and the database's time of the last one), read by every replica before it uses a cached list.
Down again, joins are only in the memory of the replica that got them, as before.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from bot.store.columns import UtcDateTime

revision: str = "0010_place_joins"
down_revision: str | Sequence[str] | None = "0009_run_feedback"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "place_joins",
        sa.Column("place", sa.String(length=512), nullable=False),
        sa.Column("joins", sa.BigInteger(), nullable=False),
        sa.Column("joined_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("place", name=op.f("pk_place_joins")),
    )
    op.create_index(op.f("ix_place_joins_joined_at"), "place_joins", ["joined_at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_place_joins_joined_at"), table_name="place_joins")
    op.drop_table("place_joins")
