"""The sweeper: at start and every few seconds, each replica picks up what dead processes left behind.

One pass:

- **heartbeat**: this process says it is alive (``workers``), so others can tell it from a dead one;
- **dead runs**: a run still marked running whose process is gone (killed, crashed, its machine lost)
  is taken over with one conditional UPDATE, so exactly one replica recovers it. That replica opens
  the helpdesk case (once per run, whoever asks), tells the user in their thread with the give-up
  reply, and finishes the run as ``cancelled``;
- **unknown actions**: confirmed writes left executing by a dead process are marked ``unknown``
  (``PolicyPal.recover``; never re-run) and their requester is told a person will check; one whose
  case failed to open is retried by a later pass, and its requester told then, once;
- **expired cards**: open actions past their expiry are expired, and their cards updated to say so;
- **housekeeping**: old event ids, rate windows and heartbeats are pruned.

When is a run's process dead? When it ran on this host and in this pid namespace and its pid is gone
(``ProcessId.provably_dead``: immediate after a restart); or its heartbeat is older than
``stale_after_s``; or, with no heartbeat at all (a terminal process), the run is older than any run
can be (the deadline plus a margin).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from bot.delivery import Notice, Notifiers
from bot.helpdesk import HandoffCase
from bot.runtime.logs import log_context
from bot.runtime.process import THIS_PROCESS, ProcessId
from bot.store import PendingRecord, RunRow, utcnow
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
    unknown_actions: list[str] = field(default_factory=list)
    expired_cards: list[str] = field(default_factory=list)


class Sweeper:
    """Runs passes until stopped; any replica may run one, the database decides who does each job."""

    def __init__(
        self,
        service: PolicyPal,
        notifiers: Notifiers,
        policy: SweepPolicy | None = None,
        *,
        me: ProcessId = THIS_PROCESS,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.service = service
        self.notifiers = notifiers
        self.policy = policy or SweepPolicy()
        self._me = me
        self._owner = str(me)
        self._clock = clock
        self._started = clock()
        self._stop = asyncio.Event()

    async def run_forever(self) -> None:
        """A pass now, then one every ``interval_s`` until ``stop``; a failed pass is logged, not fatal.

        The heartbeat has its own loop: a long pass (many dead runs to answer) must not make this
        live process look dead to the other replicas.
        """
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
        store, report = self.service.store, SweepReport()
        await store.workers.heartbeat(self._owner, self._started)
        for run in await self._dead_runs():
            if await self._recover_run(run):
                report.recovered_runs.append(run.id)
        for record, case in await self.service.recover():
            await self._tell_requester(record, case)
            report.unknown_actions.append(record.id)
        for record in await self.service.pending.expire_due():
            await self.notifiers.card_expired(record)
            report.expired_cards.append(record.id)
        await self._prune()
        self._count(report)
        return report

    async def _dead_runs(self) -> list[RunRow]:
        now, store = self._clock(), self.service.store
        beats = await store.workers.heartbeats()
        return [run for run in await store.runs.unfinished() if self._is_dead(run, beats, now)]

    def _is_dead(self, run: RunRow, beats: dict[str, datetime], now: datetime) -> bool:
        age = (now - run.started_at).total_seconds()
        if run.owner == self._owner:  # ours: dead only if no longer in flight here (a failed recovery too)
            return run.id not in self.service.inflight and (run.status == "recovering" or age > self.policy.max_run_s)
        owner = ProcessId.parse(run.owner)
        if owner is not None and owner.provably_dead(self._me):
            return True
        beat = beats.get(run.owner)
        if beat is not None:
            return (now - beat).total_seconds() > self.policy.stale_after_s
        return age > self.policy.max_run_s

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
            await self._remember(run, text)
            await self.notifiers.notify(run.conversation_key, Notice(text, run.id, case.case_id))
            await store.runs.abandon(run.id, self._owner, TerminationReason.CANCELLED.value)
        return True

    async def _remember(self, run: RunRow, reply: str) -> None:
        """The thread's history gets the question and the give-up, as if the run had ended so."""
        exchange = [{"role": "user", "content": run.question}, {"role": "assistant", "content": reply}]
        await self.service.store.threads.append_history(run.conversation_key, exchange)

    async def _tell_requester(self, record: PendingRecord, case: HandoffCase) -> None:
        notice = Notice(case.user_reply(), record.run_id, case.case_id)
        await self.notifiers.notify(record.conversation_key, notice)

    async def _prune(self) -> None:
        now, store = self._clock(), self.service.store
        await store.threads.prune_events(now - self.policy.keep_events)
        await store.workers.prune(now - self.policy.forget_workers)
        if self.service.admission is not None:
            await store.rates.prune(self.service.admission.users.oldest_window())

    def _count(self, report: SweepReport) -> None:
        recovered = self.service.metrics.recovered
        for kind, items in (
            ("run", report.recovered_runs),
            ("action", report.unknown_actions),
            ("card", report.expired_cards),
        ):
            if items:
                recovered.labels(kind=kind).inc(len(items))
