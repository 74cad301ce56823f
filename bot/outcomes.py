"""Storing what a run or a click concluded, and sending it: one transaction, fenced by the inbox lease.

The run's record, its thread history, its proposed action and its outbox rows commit together, and
only while the inbox item it answers is still this process's at the epoch it started with
(``runs.record`` with the fence; ``inbox.finish`` for work without a run). A process that stalled
while another took its item over finds the fence closed: it rolls back, writes nothing, and logs
that it was superseded. So an item has one outcome and one reply, whichever process ends it.

After the commit, the rows (inserted claimed by this process) are sent at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from bot.delivery import Lease, Outbox, current_lease
from bot.store import NewPost, RunRow, Store, utcnow
from bot.types import Message

log = logging.getLogger(__name__)


class Superseded(Exception):
    """The inbox item was taken over by another process: this one's work is dropped."""


@dataclass(frozen=True)
class RunRecord:
    """A finished run as stored (the ``runs`` row)."""

    id: str
    conversation_key: str
    platform: str
    user_id: str
    question: str
    reason: str
    started_at: datetime
    steps: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    latency_ms: float
    model: str
    trace: list[dict[str, Any]]
    owner: str
    exchange: list[Message] | None = None  # what the thread's history keeps of this run
    audience: list[str] | None = None  # the groups its answer was built for: who may read the exchange later
    place: str | None = None  # "private" (the asker alone reads the reply) or "shared"
    citations: list[dict[str, str]] | None = None  # what the answer cited (title, heading, source)
    guards: str | None = None  # the guards that refused a call ("repeat,search_cap"), for reports

    def row(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    def as_row(self) -> RunRow:
        """As the store will hand it out once stored (for a transcript written before the commit)."""
        return RunRow(**self.row(), status="finished", finished_at=utcnow(), feedback=None, feedback_by=None)


Extra = Callable[[AsyncConnection], Any]


class Outcomes:
    """Commits conclusions and sends their rows; the service's one way to write an outcome."""

    def __init__(self, store: Store, outbox: Outbox) -> None:
        self._store = store
        self._outbox = outbox

    async def commit(
        self,
        *,
        run: RunRecord | None = None,
        history: tuple[str, Sequence[Message], Sequence[str]] | None = None,
        also_runs: Sequence[RunRecord] = (),
        posts: Callable[[], Sequence[NewPost]] | Sequence[NewPost] = (),
        before_posts: Extra | None = None,
    ) -> bool:
        """Store ``run`` (fenced), ``history`` (thread key, messages, audience), ``also_runs``, whatever
        ``before_posts`` writes, then the posts; send them.

        False when superseded (nothing was written). ``also_runs`` answer the same item (the private
        part of a reply in a shared place): the fence of ``run`` holds them all. ``posts`` may be a
        function, called after ``before_posts`` (a proposed action's id is in its card).
        """
        lease = current_lease()
        try:
            async with self._store.transaction() as tx:
                await self._fence(tx, lease, run)
                for extra in also_runs:
                    await self._store.runs.record(extra.row(), conn=tx)
                if before_posts is not None:
                    await before_posts(tx)
                if history is not None:
                    key, messages, audience = history
                    await self._store.threads.append_history(key, messages, audience=audience, conn=tx)
                rows = posts() if callable(posts) else posts
                sent = await self._store.outbox.add_posts(
                    [p for p in rows if self._outbox.delivers(p.destination)], claimed_by=self._outbox.owner, conn=tx
                )
        except Superseded:
            log.warning("inbox item %s was taken over by another process: this one's outcome is dropped",
                        lease.item_id if lease else "?")
            return False
        if lease is not None:
            lease.answered = True
        self._outbox.send_now(sent)
        return True

    async def still_held(self) -> bool:
        """Whether this task's inbox item is still ours (before opening a case the reply will name)."""
        lease = current_lease()
        return lease is None or await self._store.inbox.holds(lease.item_id, lease.epoch)

    async def _fence(self, tx: AsyncConnection, lease: Lease | None, run: RunRecord | None) -> None:
        if run is not None:
            held = await self._store.runs.record(run.row(), fence=lease.fence if lease else None, conn=tx)
        elif lease is not None and not lease.answered:  # (a second write for an item answered needs no fence)
            held = await self._store.inbox.finish(lease.item_id, lease.epoch, conn=tx)
        else:
            held = True
        if not held:
            raise Superseded
