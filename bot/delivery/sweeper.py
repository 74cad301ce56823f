"""The sweeper: at start and every few seconds, each replica picks up what dead processes left behind.

One pass:

- **heartbeat**: this process says it is alive (``workers``), so others can tell it from a dead one
  (in its own loop, so a long pass never makes a live process look dead);
- **inbox**: events a dead process acknowledged but never answered (and this process's own whose
  work failed) are taken over with the next epoch and worked on here: the person gets the answer,
  once, however the process died;
- **outbox**: rows a dead process was sending are due again at once (their outcome is unknown, so the
  sender looks for its earlier post first);
- **unknown actions**: confirmed writes left executing by a dead process are marked ``unknown`` at
  once (never re-run): a helpdesk case, the card says so, the requester is told;
- **expired cards**: open actions past their expiry are expired, and their cards say so;
- **earlier releases**: a run one of them recorded as running, whose process died, gets the give-up
  reply with a case;
- **housekeeping**: old inbox items, rate windows, heartbeats, joins and stop requests are pruned.

When is a process dead? When it ran on this host and in this pid namespace and its pid is gone
(``ProcessId.provably_dead``: immediate after a restart); or its heartbeat is older than
``stale_after_s`` (a process frozen that long is treated as dead: whatever it concludes when it
wakes is fenced off); or, with no heartbeat at all, its work is older than any run can be.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from bot.identity import EVERYONE
from bot.runtime import THIS_PROCESS, ProcessId, log_context
from bot.store import RunRow, utcnow
from bot.types import TerminationReason, UserRef

if TYPE_CHECKING:  # the sweeper works on the service it is given; the service never needs the sweeper
    from bot.service import PolicyPal

log = logging.getLogger(__name__)

PROCESS_DIED = "the process running it stopped (crash, kill or lost machine) before it finished"


@dataclass(frozen=True)
class SweepPolicy:
    """How often to sweep and when silence means death."""

    interval_s: float = 10.0
    stale_after_s: float = 30.0  # three missed heartbeats
    max_run_s: float = 80.0  # the run deadline plus a margin: no live run is older
    keep_events: timedelta = timedelta(days=1)  # platforms stop retrying within minutes
    forget_workers: timedelta = timedelta(days=1)


@dataclass
class SweepReport:
    """What one pass did, for logs and tests."""

    recovered_runs: list[str] = field(default_factory=list)
    taken_over: list[str] = field(default_factory=list)  # inbox items worked on again here
    resent: int = 0  # outbox rows of dead processes, due again
    unknown_actions: list[str] = field(default_factory=list)
    expired_cards: list[str] = field(default_factory=list)


class Sweeper:
    """Runs passes until stopped; any replica may run one, the database decides who does each job."""

    def __init__(
        self,
        service: PolicyPal,
        policy: SweepPolicy | None = None,
        *,
        me: ProcessId = THIS_PROCESS,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.service = service
        self.policy = policy or SweepPolicy()
        self._me = me
        self._owner = str(me)
        self._clock = clock
        self._started = clock()
        self._stop = asyncio.Event()

    async def run_forever(self) -> None:
        """A pass now, then one every ``interval_s`` until ``stop``; a failed pass is logged, not fatal."""
        beating = asyncio.create_task(self._beat_forever(), name="heartbeat")
        try:
            while not self._stop.is_set():
                try:
                    await self.sweep_once()
                except Exception:
                    log.exception("sweep failed")
                await self._pause()
        finally:
            beating.cancel()
            await asyncio.gather(beating, return_exceptions=True)

    async def _beat_forever(self) -> None:
        while not self._stop.is_set():
            try:
                await self.service.store.workers.heartbeat(self._owner, self._started)
            except Exception:
                log.exception("heartbeat failed")
            await self._pause()

    async def _pause(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), self.policy.interval_s)

    def stop(self) -> None:
        self._stop.set()

    async def forget_me(self) -> None:
        """At a clean shutdown, after the runs are done: others need not wait for our heartbeat to age."""
        await self.service.store.workers.forget(self._owner)

    async def sweep_once(self) -> SweepReport:
        service, report = self.service, SweepReport()
        await service.store.workers.heartbeat(self._owner, self._started)
        dead = await self.dead_owners()
        report.taken_over = await service.inbox.recover(dead, self._clock())
        report.resent = await service.store.outbox.reclaim(sorted(dead), self._clock())
        if report.resent:
            service.outbox.wake()
        for run in await self._dead_runs(dead):
            if await self._recover_run(run):
                report.recovered_runs.append(run.id)
        for record, _case in await service.recover(sorted(dead)):
            report.unknown_actions.append(record.id)
        for record in await service.pending.expire_due():
            await service.card_expired(record)
            report.expired_cards.append(record.id)
        await self._prune()
        self._count(report)
        return report

    async def dead_owners(self) -> set[str]:
        """Processes known gone: their pid is gone (this host), or their heartbeat went quiet.

        Candidates are every process holding something: an inbox item, a heartbeat, a call executing
        (a terminal's ``decide`` has no heartbeat), a run an earlier release left running, an outbox row.
        """
        now = self._clock()
        store = self.service.store
        owners = {item.owner for item in await store.inbox.unanswered(now - self.policy.keep_events)}
        owners |= set(beats := await store.workers.heartbeats())
        owners |= {action.executor for action in await store.pending.find("executing") if action.executor}
        owners |= {run.owner for run in await store.runs.unfinished() if run.owner}
        owners |= await store.outbox.claimants()
        dead = set()
        for owner in owners - {self._owner, ""}:
            process = ProcessId.parse(owner)
            beat = beats.get(owner)
            if (process is not None and process.provably_dead(self._me)) or (
                beat is not None and (now - beat).total_seconds() > self.policy.stale_after_s
            ):
                dead.add(owner)
        return dead

    async def _dead_runs(self, dead: set[str]) -> list[RunRow]:
        """Runs an earlier release recorded as running, whose process is gone (or never heartbeat)."""
        now = self._clock()
        beats = await self.service.store.workers.heartbeats()
        live = {o for o, beat in beats.items() if (now - beat).total_seconds() <= self.policy.stale_after_s}

        def gone(run: RunRow) -> bool:
            old = (now - run.started_at).total_seconds() > self.policy.max_run_s
            return run.owner in dead or (run.owner not in live and run.owner != self._owner and old)

        return [run for run in await self.service.store.runs.unfinished() if gone(run)]

    async def _recover_run(self, run: RunRow) -> bool:
        """Take the run over (exactly one replica wins), hand it to the helpdesk, tell the user, finish it."""
        store = self.service.store
        if not await store.runs.take_over(run.id, run.owner, self._owner):
            return False
        with log_context(run_id=run.id, conversation=run.conversation_key, platform=run.platform):
            log.warning("run %s died with its process (%s); handing it to the helpdesk", run.id, run.owner)
            case = await self.service.helpdesk.open_case(
                origin=f"run:{run.id}",
                reason=TerminationReason.CANCELLED.value,
                user=UserRef(run.user_id),
                conversation_key=run.conversation_key,
                question=run.question,
                run_id=run.id,
                detail=PROCESS_DIED,
            )
            text = case.user_reply()
            exchange = [{"role": "user", "content": run.question}, {"role": "assistant", "content": text}]
            await store.threads.append_history(run.conversation_key, exchange, audience=[EVERYONE])  # public text
            await self.service.tell(run.conversation_key, text, run_id=run.id, case_id=case.case_id)
            await store.runs.abandon(run.id, self._owner, TerminationReason.CANCELLED.value)
        return True

    async def _prune(self) -> None:
        now, service = self._clock(), self.service
        await service.inbox.prune(now)
        await service.store.workers.prune(now - self.policy.forget_workers)
        await service.store.joins.prune()  # by the database's clock, as the joins were recorded
        await service.store.stops.prune()  # stop requests older than any run they could concern
        if service.admission is not None:
            await service.store.rates.prune(service.admission.users.oldest_window())

    def _count(self, report: SweepReport) -> None:
        recovered = self.service.metrics.recovered
        for kind, count in (
            ("run", len(report.recovered_runs)),
            ("event", len(report.taken_over)),
            ("post", report.resent),
            ("action", len(report.unknown_actions)),
            ("card", len(report.expired_cards)),
        ):
            if count:
                recovered.labels(kind=kind).inc(count)
