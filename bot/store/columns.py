"""UTC timestamps: the column type shared by the models in ``bot.store.tables`` and the Alembic migrations in
``bot.migrations``, and ``utcnow()``, the only kind of time the store accepts.

They live apart from the models so a migration can import them without importing the models as they
are today: a migration must keep meaning what it meant when it was written.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time

from sqlalchemy import DateTime, Dialect, TypeDecorator


class UtcDateTime(TypeDecorator[datetime]):
    """A timestamp that is always aware UTC, whatever the database hands back."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store; pass a timezone-aware time")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def utcnow() -> datetime:
    """The current time, timezone-aware UTC: the only kind of time the store accepts."""
    return datetime.now(UTC)


def utc_midnight(day: date) -> datetime:
    """The start of ``day`` in UTC: where reports by day begin and end."""
    return datetime.combine(day, time.min, tzinfo=UTC)
