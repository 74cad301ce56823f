"""console: where a run was asked, what its answer cited, which guards fired, an index for reports

Revision ID: 0008_console
Revises: 0007_feedback_comment
Create Date: 2026-12-02 02:00:00.000000

The operators' console (adapters/web) filters runs by place (a private chat or a shared thread)
and counts the documents cited by answers people rated "not helpful" and the guards that fired;
none could be read back from a run before without opening every trace. Reports by termination
reason over a date range (the overview, the knowledge gaps) read the (reason, started_at) index
instead of every run; the runs list filtered by user or platform, and the answers rated not helpful,
read their own indexes; the overview reads one covering index (``ix_runs_report_window``), not the
rows with their traces. Rows from before have none of the three columns.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_console"
down_revision: str | Sequence[str] | None = "0007_feedback_comment"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# What the overview reads of a run, so its scans never touch the rows (which hold the traces).
REPORT_WINDOW = ["status", "started_at", "reason", "feedback", "guards", "steps", "input_tokens", "output_tokens",
                 "cost_usd"]  # fmt: skip


def upgrade() -> None:
    op.add_column("runs", sa.Column("place", sa.String(length=16), nullable=True))
    op.add_column("runs", sa.Column("citations", sa.JSON(none_as_null=True), nullable=True))
    op.add_column("runs", sa.Column("guards", sa.String(length=255), nullable=True))
    op.create_index(op.f("ix_runs_reason_started_at"), "runs", ["reason", "started_at"])
    op.create_index(op.f("ix_runs_user_id_started_at"), "runs", ["user_id", "started_at"])
    op.create_index(op.f("ix_runs_platform_started_at"), "runs", ["platform", "started_at"])
    op.create_index(op.f("ix_runs_feedback_started_at"), "runs", ["feedback", "started_at"])
    op.create_index("ix_runs_report_window", "runs", REPORT_WINDOW)


def downgrade() -> None:
    op.drop_index("ix_runs_report_window", table_name="runs")
    op.drop_index(op.f("ix_runs_feedback_started_at"), table_name="runs")
    op.drop_index(op.f("ix_runs_platform_started_at"), table_name="runs")
    op.drop_index(op.f("ix_runs_user_id_started_at"), table_name="runs")
    op.drop_index(op.f("ix_runs_reason_started_at"), table_name="runs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("guards")
        batch.drop_column("citations")
        batch.drop_column("place")
