"""history entries: thread history as appended rows, so concurrent replies never overwrite each other

Revision ID: 0003_history_entries
Revises: 0002_serve
Create Date: 2026-11-29 19:40:00.000000

Each conversation's stored list of messages becomes its first entry; downgrading folds the entries
of each conversation back into one list, in order.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby
from typing import Any

import sqlalchemy as sa
from alembic import op

from bot.store.columns import UtcDateTime

revision: str = "0003_history_entries"
down_revision: str | Sequence[str] | None = "0002_serve"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_conversations = sa.table(
    "conversations",
    sa.column("key", sa.String()),
    sa.column("messages", sa.JSON()),
    sa.column("updated_at", UtcDateTime()),
)
_entries = sa.table(
    "history_entries",
    sa.column("id", sa.Integer()),
    sa.column("conversation_key", sa.String()),
    sa.column("messages", sa.JSON()),
    sa.column("created_at", UtcDateTime()),
)


def upgrade() -> None:
    op.create_table(
        "history_entries",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("conversation_key", sa.String(length=512), nullable=False),
        sa.Column("messages", sa.JSON(), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_history_entries")),
    )
    op.create_index(
        op.f("ix_history_entries_conversation_key_id"), "history_entries", ["conversation_key", "id"], unique=False
    )
    copy = sa.select(_conversations.c.key, _conversations.c.messages, _conversations.c.updated_at)
    op.execute(_entries.insert().from_select(["conversation_key", "messages", "created_at"], copy))
    op.drop_table("conversations")


def downgrade() -> None:
    op.create_table(
        "conversations",
        sa.Column("key", sa.String(length=512), nullable=False),
        sa.Column("messages", sa.JSON(), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_conversations")),
    )
    rows = op.get_bind().execute(sa.select(_entries).order_by(_entries.c.conversation_key, _entries.c.id)).all()
    folded = [_fold(key, list(entries)) for key, entries in groupby(rows, key=lambda row: row.conversation_key)]
    if folded:
        op.bulk_insert(_conversations, folded)
    op.drop_index(op.f("ix_history_entries_conversation_key_id"), table_name="history_entries")
    op.drop_table("history_entries")


def _fold(key: str, entries: list[Any]) -> dict[str, Any]:
    messages = [message for entry in entries for message in entry.messages]
    return {"key": key, "messages": messages, "updated_at": entries[-1].created_at}
