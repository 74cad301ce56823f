"""The join log: who joined which place, shared by every replica so none answers from a member list
read before someone joined (``bot.audience.MemberLists`` reads it).

One row per place, not per event: a join is one upsert that counts the place's joins up. A replica
compares the count it read before loading a member list with the count now; a count is the
database's own, so no replica's clock takes part and a skewed one cannot hide a join. The time of
the last join is the database's too, used only to prune places nobody has joined for a long while.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from datetime import timedelta

from sqlalchemy import delete, func, select, type_coerce

from bot.store.columns import UtcDateTime
from bot.store.engine import Repository
from bot.store.tables import PlaceJoin

log = logging.getLogger(__name__)

KEEP_JOINS = timedelta(days=1)  # far longer than any member list is cached
LONGEST = 512  # the place column's length; a longer name is stored as its digest


class PlaceJoins(Repository):
    """How many joins each place has had: written on a join event, read before a cached member list is used."""

    async def record(self, place: str) -> None:
        """Someone joined ``place``: its count goes up by one (one upsert, whichever replica got the event)."""
        now = func.now()  # the database's clock: replicas' clocks never meet here
        stmt = self._insert(PlaceJoin).values(place=_stored(place), joins=1, joined_at=now)
        stmt = stmt.on_conflict_do_update(
            index_elements=["place"], set_={"joins": PlaceJoin.joins + 1, "joined_at": now}
        )
        async with self._engine.begin() as conn:
            await conn.execute(stmt)

    async def counts(self, places: Sequence[str]) -> dict[str, int]:
        """How many joins each of ``places`` has had (a place nobody joined is absent): one indexed SELECT."""
        names = {_stored(place): place for place in places}
        stmt = select(PlaceJoin.place, PlaceJoin.joins).where(PlaceJoin.place.in_(list(names)))
        async with self._engine.connect() as conn:
            return {names[row.place]: int(row.joins) for row in await conn.execute(stmt)}

    async def prune(self, keep: timedelta = KEEP_JOINS) -> int:
        """Forget places nobody joined for ``keep`` (by the database's clock).

        A place forgotten counts from nothing again; a list read while it had a count differs from
        that, so it is read again, never trusted.
        """
        async with self._engine.begin() as conn:
            now = (await conn.execute(select(type_coerce(func.now(), UtcDateTime)))).scalar_one()
            return (await conn.execute(delete(PlaceJoin).where(PlaceJoin.joined_at < now - keep))).rowcount


def _stored(place: str) -> str:
    """The place's name as its row holds it: itself, or its digest when longer than the column."""
    if len(place) <= LONGEST:
        return place
    return "sha256:" + hashlib.sha256(place.encode()).hexdigest()
