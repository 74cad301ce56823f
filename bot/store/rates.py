"""Per-user rate windows, shared by every replica through the database."""

from __future__ import annotations

import logging

from sqlalchemy import case, delete

from bot.store.engine import Repository
from bot.store.tables import (
    RateWindow,
)

log = logging.getLogger(__name__)


class RateWindows(Repository):
    """Per-user rate counters shared by every replica (one upsert a hit)."""

    async def count_hit(self, key: str, window_index: int) -> tuple[int, int, int]:
        """Count one hit for ``key`` in one statement; returns (this window's count, the previous one's, window).

        An upsert whose SET reads the old row: same window, add one; the next window, the old count
        becomes ``previous``; later, both start over. A replica whose clock runs behind counts into the
        newer window instead of resetting it.
        """
        table = RateWindow
        stmt = self._insert(table).values(key=key, window_index=window_index, count=1, previous=0)
        new = stmt.excluded.window_index
        stmt = stmt.on_conflict_do_update(
            index_elements=["key"],
            set_={
                "count": case((table.window_index >= new, table.count + 1), else_=1),
                "previous": case(
                    (table.window_index >= new, table.previous), (table.window_index == new - 1, table.count), else_=0
                ),
                "window_index": case((table.window_index > new, table.window_index), else_=new),
            },
        ).returning(table.count, table.previous, table.window_index)
        async with self._engine.begin() as conn:
            count, previous, window = (await conn.execute(stmt)).one()
        return int(count), int(previous), int(window)

    async def prune(self, before_index: int) -> int:
        """Drop counters whose windows no longer count."""
        stmt = delete(RateWindow).where(RateWindow.window_index < before_index)
        async with self._engine.begin() as conn:
            return (await conn.execute(stmt)).rowcount
