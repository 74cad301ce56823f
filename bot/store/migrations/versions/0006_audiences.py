"""audiences: the readers each stored answer was built for

Revision ID: 0006_audiences
Revises: 0005_inbox_outbox
Create Date: 2026-12-03 09:00:00.000000

A thread's history goes back to the model on every follow-up. An answer built from a document only
HR may read, posted privately, must not come back in a run answering someone else in that thread:
each run's exchange and each history entry records the groups it was built for. Rows from before
have none (NULL); they are read in private places only.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_audiences"
down_revision: str | Sequence[str] | None = "0005_inbox_outbox"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("audience", sa.JSON(none_as_null=True), nullable=True))
    op.add_column("history_entries", sa.Column("audience", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("history_entries") as batch:
        batch.drop_column("audience")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("audience")
