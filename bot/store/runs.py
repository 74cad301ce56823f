"""Runs and the processes that run them.

A run is stored once it ends (``record``), fenced by the inbox item it answers: one item, one run.
``start``/``take_over``/``abandon`` serve runs recorded as running by earlier releases, which the
sweeper still answers if their process died.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from sqlalchemy import delete, distinct, exists, func, insert, literal, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.redaction import bounded_trace
from bot.store.columns import utcnow
from bot.store.engine import Repository
from bot.store.records import (
    KnowledgeGap,
    Rating,
    RunRow,
    to_run_row,
)
from bot.store.tables import (
    InboxItem,
    Run,
    RunFeedback,
    Worker,
)
from bot.types import TerminationReason

log = logging.getLogger(__name__)


class Runs(Repository):
    """Runs: recorded as running before they start, finished with their totals and trace."""

    async def start(
        self,
        run_id: str,
        conversation_key: str,
        platform: str,
        user_id: str,
        question: str,
        model: str,
        owner: str,
    ) -> None:
        """Record a run as running, so a crash leaves a trace a sweeper can find."""
        row = {
            "id": run_id,
            "conversation_key": conversation_key,
            "platform": platform,
            "user_id": user_id,
            "question": question,
            "status": "running",
            "started_at": utcnow(),
            "model": model,
            "trace": [],
            "owner": owner,
        }
        async with self._engine.begin() as conn:
            await conn.execute(insert(Run).values(row))

    async def record(
        self, row: dict[str, Any], *, fence: tuple[str, int] | None = None, conn: AsyncConnection | None = None
    ) -> bool:
        """Store a finished run in one INSERT; with ``fence`` (inbox item, epoch) only if that epoch still
        holds the item and no run answers it yet. False: another process took the item over, or answered it.

        The trace arrives redacted (``bot.service``) and is bounded here, after redaction, for every writer.
        """
        values = {"status": "finished", "finished_at": utcnow(), "owner": "", **row}
        if values.get("trace"):
            values["trace"] = bounded_trace(values["trace"])
        if fence is None:
            async with self._begin(conn) as tx:
                await tx.execute(insert(Run).values(values))
            return True
        item_id, epoch = fence
        values["inbox_id"] = item_id
        columns = list(values)
        held = exists().where(InboxItem.id == item_id, InboxItem.epoch == epoch, InboxItem.state == "leased")
        source = select(*[literal(values[name], type_=Run.__table__.c[name].type) for name in columns]).where(held)
        stmt = self._insert(Run).from_select(columns, source).on_conflict_do_nothing(index_elements=["inbox_id"])
        async with self._begin(conn) as tx:
            return (await tx.execute(stmt)).rowcount == 1

    async def discard(self, run_id: str) -> None:
        """Forget a run recorded as running that never started (refused while it waited for a slot)."""
        async with self._engine.begin() as conn:
            await conn.execute(delete(Run).where(Run.id == run_id, Run.status == "running"))

    async def finish(
        self,
        run_id: str,
        *,
        reason: str,
        steps: int,
        input_tokens: int,
        output_tokens: int,
        cost_usd: float,
        latency_ms: float,
        trace: list[dict[str, Any]],
    ) -> None:
        """Store a run's totals and trace in one UPDATE (it sits on every reply's path)."""
        stmt = (
            update(Run)
            .where(Run.id == run_id)
            .values(
                status="finished",
                reason=str(reason),
                finished_at=utcnow(),
                steps=steps,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                cost_usd=cost_usd,
                latency_ms=latency_ms,
                trace=bounded_trace(trace),
            )
        )
        async with self._engine.begin() as conn:
            if (await conn.execute(stmt)).rowcount != 1:
                log.warning("finish_run: no run %s to finish", run_id)

    async def get(self, run_id: str) -> RunRow | None:
        """One run with its trace, for the CLI and feedback."""
        async with self._engine.connect() as conn:
            row = (await conn.execute(select(Run.__table__).where(Run.id == run_id))).first()
        return to_run_row(row) if row else None

    async def recent(self, limit: int = 20) -> list[RunRow]:
        """The most recent runs, newest first."""
        stmt = select(Run.__table__).order_by(Run.started_at.desc(), Run.id.desc()).limit(limit)
        async with self._engine.connect() as conn:
            return [to_run_row(row) for row in await conn.execute(stmt)]

    async def knowledge_gaps(self, limit: int = 20) -> list[KnowledgeGap]:
        """Questions whose runs ended ``not_covered``, one row per identical text, most recently asked first.

        Policy owners read these as what the documents are missing: grouped, never a case each.
        """
        last = func.max(Run.started_at)
        stmt = (
            select(Run.question, func.count(), func.count(distinct(Run.user_id)), func.min(Run.started_at), last)
            .where(Run.reason == TerminationReason.NOT_COVERED.value)
            .group_by(Run.question)
            .order_by(last.desc(), Run.question)
            .limit(limit)
        )
        async with self._engine.connect() as conn:
            return [KnowledgeGap(*row) for row in await conn.execute(stmt)]

    async def set_feedback(self, run_id: str, value: str, user_id: str, comment: str | None = None) -> bool:
        """Store one person's thumbs-up/down on a run (and what they wrote with it); False when the run does
        not exist. A person's new rating replaces their own last one, its comment too, and no one else's;
        the asker's is also the run's own (``runs.feedback``)."""
        now = utcnow()
        rating = {"run_id": run_id, "user_id": user_id, "rating": value, "comment": comment, "rated_at": now}
        table = RunFeedback.__table__
        found = select(*[literal(v, type_=table.c[k].type) for k, v in rating.items()]).where(
            exists().where(Run.id == run_id)
        )
        upsert = self._insert(RunFeedback).from_select(list(rating), found)
        upsert = upsert.on_conflict_do_update(
            index_elements=["run_id", "user_id"], set_={"rating": value, "comment": comment, "rated_at": now}
        )
        asker = update(Run).where(Run.id == run_id, Run.user_id == user_id)
        async with self._engine.begin() as conn:
            if (await conn.execute(upsert)).rowcount != 1:
                return False
            await conn.execute(asker.values(feedback=value, feedback_by=user_id, feedback_comment=comment))
            return True

    async def ratings(self, run_id: str) -> list[Rating]:
        """Everyone's ratings of a run, the earliest first."""
        stmt = select(RunFeedback.__table__).where(RunFeedback.run_id == run_id)
        async with self._engine.connect() as conn:
            rows = await conn.execute(stmt.order_by(RunFeedback.rated_at, RunFeedback.user_id))
            return [Rating(**row._mapping) for row in rows]

    async def unfinished(self, owner: str | None = None) -> list[RunRow]:
        """Runs never finished (running, or taken over for recovery), optionally of one owner process."""
        unfinished = Run.status.in_(("running", "recovering"))  # IN, not !=: the (status, owner) index serves it
        stmt = select(Run.__table__).where(unfinished).order_by(Run.started_at)
        if owner is not None:
            stmt = stmt.where(Run.owner == owner)
        async with self._engine.connect() as conn:
            return [to_run_row(row) for row in await conn.execute(stmt)]

    async def take_over(self, run_id: str, from_owner: str, to_owner: str) -> bool:
        """Claim a dead process's unfinished run for recovery in one conditional UPDATE; True for the winner."""
        stmt = (
            update(Run)
            .where(Run.id == run_id, Run.owner == from_owner, Run.status.in_(("running", "recovering")))
            .values(status="recovering", owner=to_owner)
        )
        async with self._engine.begin() as conn:
            return (await conn.execute(stmt)).rowcount == 1

    async def abandon(self, run_id: str, owner: str, reason: str) -> bool:
        """Finish a run taken over for recovery with ``reason``; only its new owner may."""
        stmt = (
            update(Run)
            .where(Run.id == run_id, Run.owner == owner, Run.status == "recovering")
            .values(status="finished", reason=reason, finished_at=utcnow())
        )
        async with self._engine.begin() as conn:
            return (await conn.execute(stmt)).rowcount == 1

    async def of_conversation(self, key: str, limit: int = 50) -> list[RunRow]:
        """A conversation's runs, oldest first (the last ``limit``)."""
        stmt = select(Run.__table__).where(Run.conversation_key == key)
        stmt = stmt.order_by(Run.started_at.desc(), Run.id.desc()).limit(limit)
        async with self._engine.connect() as conn:
            rows = [to_run_row(row) for row in await conn.execute(stmt)]
        return rows[::-1]


class Workers(Repository):
    """Processes' heartbeats: how the sweeper tells a dead replica from a slow one."""

    async def heartbeat(self, owner: str, started_at: datetime) -> None:
        """Say this process is alive (one upsert): the sweeper tells dead runs from slow ones by it."""
        now = utcnow()
        stmt = self._insert(Worker).values(owner=owner, started_at=started_at, heartbeat_at=now)
        stmt = stmt.on_conflict_do_update(index_elements=["owner"], set_={"heartbeat_at": now})
        async with self._engine.begin() as conn:
            await conn.execute(stmt)

    async def forget(self, owner: str) -> None:
        """A process that stopped cleanly removes its heartbeat."""
        async with self._engine.begin() as conn:
            await conn.execute(delete(Worker).where(Worker.owner == owner))

    async def heartbeats(self) -> dict[str, datetime]:
        """Every known process and its last heartbeat."""
        async with self._engine.connect() as conn:
            rows = await conn.execute(select(Worker.owner, Worker.heartbeat_at))
            return {row.owner: row.heartbeat_at for row in rows}

    async def prune(self, before: datetime) -> int:
        """Forget processes silent since ``before`` (their runs are recovered by then)."""
        async with self._engine.begin() as conn:
            return (await conn.execute(delete(Worker).where(Worker.heartbeat_at < before))).rowcount
