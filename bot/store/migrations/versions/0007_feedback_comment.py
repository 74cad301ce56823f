"""feedback_comment: the words that come with a thumbs-down

Revision ID: 0007_feedback_comment
Revises: 0006_audiences
Create Date: 2026-12-04 09:00:00.000000

Teams' feedback loop asks the person why, beside the thumbs; the comment tells a policy owner what
was wrong with an answer, which a bare "not helpful" cannot. Stored redacted and bounded, with the
rating; rows from before have none.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_feedback_comment"
down_revision: str | Sequence[str] | None = "0006_audiences"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("feedback_comment", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("feedback_comment")
