"""serve: worker heartbeats, shared rate windows, thread addresses

Revision ID: 0002_serve
Revises: 0001_baseline
Create Date: 2026-11-29 14:51:22.003981
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from bot.store.columns import UtcDateTime

revision: str = "0002_serve"
down_revision: str | Sequence[str] | None = "0001_baseline"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "rate_windows",
        sa.Column("key", sa.String(length=512), nullable=False),
        sa.Column("window_index", sa.BigInteger(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("previous", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_rate_windows")),
    )
    op.create_index(op.f("ix_rate_windows_window_index"), "rate_windows", ["window_index"], unique=False)
    op.create_table(
        "workers",
        sa.Column("owner", sa.String(length=255), nullable=False),
        sa.Column("started_at", UtcDateTime(), nullable=False),
        sa.Column("heartbeat_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("owner", name=op.f("pk_workers")),
    )
    op.add_column("thread_places", sa.Column("address", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("thread_places") as batch_op:  # SQLite cannot drop a column in place
        batch_op.drop_column("address")
    op.drop_table("workers")
    op.drop_index(op.f("ix_rate_windows_window_index"), table_name="rate_windows")
    op.drop_table("rate_windows")
