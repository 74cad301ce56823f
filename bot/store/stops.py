"""Stop requests: a Stop pressed in a conversation, shared by every replica so that the run it means
stops wherever it runs (``bot.service.PolicyPal.stop``), not only in the process that got the event.

One row per conversation, not per press: a press is one upsert that counts the conversation's stops up
and sets the database's time of the last one. A run reads the row's mark (count and time) when it
starts and once a turn, one primary-key SELECT each; a row that is there and differs from the one the
run started with is a stop pressed since. Both values are the database's, so no replica's clock takes
part. ``prune`` forgets conversations nobody stopped for a day: a run that then reads no row was not
stopped, and a row made again after a prune has a later time than any mark a run began with.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import delete, func, select, type_coerce

from bot.store.columns import UtcDateTime
from bot.store.engine import Repository
from bot.store.tables import StopRequest

KEEP_STOPS = timedelta(days=1)  # far longer than any run lasts

StopMark = tuple[int, datetime]  # (stops so far, the last one's time): what a run compares


class StopRequests(Repository):
    """Stops pressed per conversation: written on a platform's stop event, read by the runs there."""

    async def request(self, conversation_key: str) -> None:
        """Stop was pressed in the conversation: its row counts up (one upsert, whichever replica got it)."""
        now = func.now()  # the database's clock: replicas' clocks never meet here
        stmt = self._insert(StopRequest).values(conversation_key=conversation_key, stops=1, stopped_at=now)
        stmt = stmt.on_conflict_do_update(
            index_elements=["conversation_key"], set_={"stops": StopRequest.stops + 1, "stopped_at": now}
        )
        async with self._engine.begin() as conn:
            await conn.execute(stmt)

    async def mark(self, conversation_key: str) -> StopMark | None:
        """The conversation's stops now (None: nobody stopped it lately): one primary-key SELECT."""
        stmt = select(StopRequest.stops, StopRequest.stopped_at).where(StopRequest.conversation_key == conversation_key)
        async with self._engine.connect() as conn:
            row = (await conn.execute(stmt)).first()
        return None if row is None else (int(row.stops), row.stopped_at)

    async def prune(self, keep: timedelta = KEEP_STOPS) -> int:
        """Forget conversations nobody stopped for ``keep`` (by the database's clock); how many."""
        async with self._engine.begin() as conn:
            now = (await conn.execute(select(type_coerce(func.now(), UtcDateTime)))).scalar_one()
            return (await conn.execute(delete(StopRequest).where(StopRequest.stopped_at < now - keep))).rowcount
