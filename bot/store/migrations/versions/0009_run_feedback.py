"""run_feedback: one rating per person and answer

Revision ID: 0009_run_feedback
Revises: 0008_console
Create Date: 2026-12-05 09:00:00.000000

In a shared place anyone who sees an answer may rate it, and each click replaced the run's one rating:
a bystander's thumbs-down overwrote the asker's thumbs-up and counted as the answer's rating. Ratings
now live one per person in ``run_feedback`` (a person's click replaces only their own), and the run's
own ``feedback`` columns keep the asker's rating alone, for what shows one rating per run. Each run's
rating moves to ``run_feedback`` as its rater's (when it was given is not known: the run's end stands
for it), and a rating the asker did not give leaves the run's columns. Nothing reads the runs'
(feedback, started_at) index any more. Down again, a run without the asker's rating takes its
latest rater's, as before.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from bot.store.columns import UtcDateTime

revision: str = "0009_run_feedback"
down_revision: str | Sequence[str] | None = "0008_console"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The latest rating of the run in the outer UPDATE, one column of it: what a run showed before.
LATEST = "(SELECT {column} FROM run_feedback f WHERE f.run_id = runs.id ORDER BY f.rated_at DESC, f.user_id LIMIT 1)"


def upgrade() -> None:
    op.create_table(
        "run_feedback",
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=255), nullable=False),
        sa.Column("rating", sa.String(length=32), nullable=False),
        sa.Column("comment", sa.Text(), nullable=True),
        sa.Column("rated_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "user_id", name=op.f("pk_run_feedback")),
    )
    op.create_index(op.f("ix_run_feedback_rating_rated_at_run_id"), "run_feedback", ["rating", "rated_at", "run_id"])
    op.execute(
        "INSERT INTO run_feedback (run_id, user_id, rating, comment, rated_at) "
        "SELECT id, COALESCE(feedback_by, ''), feedback, feedback_comment, COALESCE(finished_at, started_at) "
        "FROM runs WHERE feedback IS NOT NULL"
    )
    op.execute(
        "UPDATE runs SET feedback = NULL, feedback_by = NULL, feedback_comment = NULL "
        "WHERE feedback IS NOT NULL AND (feedback_by IS NULL OR feedback_by <> user_id)"
    )
    op.drop_index(op.f("ix_runs_feedback_started_at"), table_name="runs")


def downgrade() -> None:
    op.create_index(op.f("ix_runs_feedback_started_at"), "runs", ["feedback", "started_at"])
    columns = {"feedback": "rating", "feedback_by": "user_id", "feedback_comment": "comment"}
    latest = ", ".join(f"{name} = {LATEST.format(column=column)}" for name, column in columns.items())
    op.execute(
        f"UPDATE runs SET {latest} "
        "WHERE feedback IS NULL AND EXISTS (SELECT 1 FROM run_feedback f WHERE f.run_id = runs.id)"
    )
    op.drop_index(op.f("ix_run_feedback_rating_rated_at_run_id"), table_name="run_feedback")
    op.drop_table("run_feedback")
