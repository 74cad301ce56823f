"""delivery keys: a random idempotency key per outbox row, instead of the case id

Revision ID: 0004_delivery_keys
Revises: 0003_history_entries
Create Date: 2026-12-02 10:15:00.000000

Case ids (HD-1001, ...) are a per-database sequence: after a restore, with staging and prod sharing
one receiver, or after a move from SQLite to PostgreSQL, a new case reuses an old id, and a receiver
deduping on it drops the new case. Each existing row gets its own random key here. A row still
pending was perhaps sent before under its case id; a new key means such a receiver may see it twice,
which is better than never.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_delivery_keys"
down_revision: str | Sequence[str] | None = "0003_history_entries"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_deliveries = sa.table(
    "handoff_deliveries",
    sa.column("id", sa.Integer()),
    sa.column("idempotency_key", sa.String()),
)


def upgrade() -> None:
    op.add_column("handoff_deliveries", sa.Column("idempotency_key", sa.String(length=64), nullable=True))
    bind = op.get_bind()
    ids = bind.execute(sa.select(_deliveries.c.id)).scalars().all()
    for delivery_id in ids:  # one key each, made here: SQLite and PostgreSQL share no uuid function
        keyed = _deliveries.update().where(_deliveries.c.id == delivery_id)
        bind.execute(keyed.values(idempotency_key=str(uuid.uuid4())))
    with op.batch_alter_table("handoff_deliveries") as batch_op:  # SQLite cannot add NOT NULL in place
        batch_op.alter_column("idempotency_key", existing_type=sa.String(length=64), nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("handoff_deliveries") as batch_op:  # SQLite cannot drop a column in place
        batch_op.drop_column("idempotency_key")
