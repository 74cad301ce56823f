"""The handoff outbox: deliver every case to every destination, once, surviving failures and restarts.

Each (case, destination) pair is a row written with the case itself. A worker claims a due row
with one conditional UPDATE (``store.cases.claim_delivery``), so when several processes run the outbox
each delivery is attempted by exactly one of them. A failed attempt goes back to ``pending`` with
an exponential backoff; after ``max_attempts`` it becomes ``failed``, which ``policypal handoffs
--failed`` lists and ``policypal handoffs --retry`` puts back.

What "once" means: a delivery is never attempted by two live workers at once and never again after
it succeeded. A worker that dies mid-delivery (after the remote side acted, before the row was
updated) leaves a claim that another worker takes over after ``stale_after_s``; that is the one case
where a destination can see a case twice, which is why each row carries a random idempotency key,
written with it and sent on every attempt (the webhook's ``Idempotency-Key``). Not the case id: that
is a per-database sequence, and a restored or second database reuses HD-1001 for another case.

A destination that posts in steps (a Teams card, then its transcript) saves its progress on the row
(``Delivery.save``, kept in ``external_ref``), so the next attempt, in any process, resumes there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, Protocol, runtime_checkable

from bot.errors import ClaimLost, RemoteError
from bot.helpdesk.case import Destination, HandoffCase, case_id_for, case_number
from bot.redaction import Redactor, bounded
from bot.store import DeliveryRecord, DeliveryState, Store, utcnow

log = logging.getLogger(__name__)

ERROR_CHARS = 1_000
Status = Literal["delivered", "retrying", "failed"]


@dataclass(frozen=True)
class OutboxPolicy:
    """How hard and how often to try; the defaults keep trying for about two hours."""

    max_attempts: int = 8
    backoff_s: float = 30.0
    max_backoff_s: float = 3600.0
    deliver_timeout_s: float = 20.0
    stale_after_s: float = 600.0  # a claim this old belongs to a worker that died
    poll_s: float = 5.0
    batch: int = 20

    def delay(self, attempt: int) -> timedelta:
        """Wait before attempt ``attempt + 1``: doubling from ``backoff_s`` up to ``max_backoff_s``."""
        return timedelta(seconds=min(self.backoff_s * 2 ** max(attempt - 1, 0), self.max_backoff_s))


@dataclass(frozen=True)
class Delivery:
    """One claimed outbox row as its destination sees it: a stable key, and what earlier attempts saved."""

    key: str  # random, stored with the row: the same on every retry, never another case's
    progress: str | None  # what an earlier attempt saved with ``save``; None on a fresh start
    save: Callable[[str], Awaitable[None]]  # stores progress before the next step; raises if the claim was lost


@runtime_checkable
class TrackedDestination(Protocol):
    """A destination that needs its outbox row; the outbox calls ``deliver_tracked`` instead of ``deliver``."""

    async def deliver_tracked(self, case: HandoffCase, delivery: Delivery) -> str | None: ...


@dataclass(frozen=True)
class DeliveryResult:
    """One attempt's outcome, for the CLI and logs."""

    case_id: str
    destination: str
    status: Status
    detail: str = ""


class Outbox:
    """Runs deliveries due now; ``run_forever`` in the server, ``run_once`` from the CLI and console."""

    def __init__(
        self,
        store: Store,
        destinations: Sequence[Destination],
        policy: OutboxPolicy | None = None,
        *,
        owner: str | None = None,
        redactor: Redactor | None = None,
        clock: Callable[[], datetime] = utcnow,
        on_result: Callable[[DeliveryResult], None] | None = None,
    ) -> None:
        self._store = store
        self._destinations = {d.name: d for d in destinations}
        self.policy = policy or OutboxPolicy()
        self._owner = owner or f"{os.uname().nodename}:{os.getpid()}:{id(self):x}"
        self._redactor = redactor or Redactor()
        self._clock = clock
        self._wake = asyncio.Event()
        self._stopping = False
        self._on_result = on_result  # metrics: every attempt's outcome

    @property
    def names(self) -> list[str]:
        return list(self._destinations)

    def wake(self, _case: HandoffCase | None = None) -> None:
        """Deliver now rather than at the next poll (called when this process opens a case)."""
        self._wake.set()

    async def run_once(self, case_id: str | None = None, *, timeout_s: float | None = None) -> list[DeliveryResult]:
        """Attempt every delivery due now (of one case, if given); each attempt bounded by the timeout."""
        if not self._destinations:
            return []
        now = self._clock()
        stale_before = now - timedelta(seconds=self.policy.stale_after_s)
        number = case_number(case_id) if case_id else None
        due = await self._store.cases.due_deliveries(
            self.names, now, stale_before, case_number=number, limit=self.policy.batch
        )
        timeout = timeout_s if timeout_s is not None else self.policy.deliver_timeout_s
        results = await asyncio.gather(*(self._attempt(row, now, stale_before, timeout) for row in due))
        done = [r for r in results if r is not None]
        if self._on_result is not None:
            for result in done:
                self._on_result(result)
        return done

    def stop(self) -> None:
        """Let ``run_forever`` finish the deliveries in flight and return (a graceful shutdown)."""
        self._stopping = True
        self._wake.set()

    async def run_forever(self) -> None:
        """Deliver until stopped or cancelled: at once when woken, else every ``poll_s``."""
        self._stopping = False
        while not self._stopping:
            self._wake.clear()
            try:
                await self.run_once()
            except Exception:  # a database blip must not stop deliveries for good
                log.exception("handoff outbox pass failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.policy.poll_s)

    async def retry_failed(self, case_id: str | None = None) -> int:
        """Put deliveries that gave up back in the outbox (all, or one case's); returns how many."""
        number = case_number(case_id) if case_id else None
        if case_id and number is None:
            return 0
        return await self._store.cases.retry_failed(self._clock(), number)

    async def _attempt(
        self, row: DeliveryRecord, now: datetime, stale_before: datetime, timeout: float
    ) -> DeliveryResult | None:
        attempt = await self._store.cases.claim_delivery(row.id, self._owner, now, stale_before)
        if attempt is None:
            return None  # another worker has it
        record = await self._store.cases.get(row.case_number)
        if record is None:
            return await self._failed(row, attempt, "case not found", final=True)
        case = HandoffCase.from_record(record)
        try:
            async with asyncio.timeout(timeout):
                ref = await self._deliver(row, attempt, case)
        except asyncio.CancelledError:
            await asyncio.shield(self._failed(row, attempt, "interrupted by shutdown", final=False))
            raise
        except ClaimLost:  # we were presumed dead and another worker carries on: nothing of ours to record
            log.warning("handoff %s to %s: taken over by another worker mid-delivery", case.case_id, row.destination)
            return None
        except Exception as exc:
            return await self._failed(row, attempt, _describe(exc), final=attempt >= self.policy.max_attempts)
        settled = await self._store.cases.settle_delivery(
            row.id, self._owner, attempt, "delivered", external_ref=ref, delivered_at=self._clock(), last_error=None
        )
        if not settled:
            log.warning("handoff %s to %s delivered after its claim was taken over", case.case_id, row.destination)
        return DeliveryResult(case.case_id, row.destination, "delivered", ref or "")

    async def _deliver(self, row: DeliveryRecord, attempt: int, case: HandoffCase) -> str | None:
        destination = self._destinations[row.destination]
        if not isinstance(destination, TrackedDestination):
            return await destination.deliver(case)
        claimed = await self._claimed(row)  # progress as of our claim, not as of the due-list read

        async def save(progress: str) -> None:
            cases = self._store.cases
            if not await cases.settle_delivery(row.id, self._owner, attempt, "sending", external_ref=progress):
                raise ClaimLost(f"delivery {row.id} was taken over by another worker")

        return await destination.deliver_tracked(case, Delivery(claimed.idempotency_key, claimed.external_ref, save))

    async def _claimed(self, row: DeliveryRecord) -> DeliveryRecord:
        rows = await self._store.cases.deliveries([row.case_number])
        return next((r for r in rows if r.id == row.id), row)

    async def _failed(self, row: DeliveryRecord, attempt: int, error: str, *, final: bool) -> DeliveryResult:
        error = bounded(self._redactor.text(error), ERROR_CHARS)
        fields: dict[str, object] = {"last_error": error}
        if not final:
            fields["next_attempt_at"] = self._clock() + self.policy.delay(attempt)
        state: DeliveryState = "failed" if final else "pending"
        await self._store.cases.settle_delivery(row.id, self._owner, attempt, state, **fields)
        case_id, where = case_id_for(row.case_number), row.destination
        if final:
            log.error("handoff %s to %s failed for good after %d attempts: %s", case_id, where, attempt, error)
            return DeliveryResult(case_id, where, "failed", error)
        log.warning("handoff %s to %s failed (attempt %d), will retry: %s", case_id, where, attempt, error)
        return DeliveryResult(case_id, where, "retrying", error)


def _describe(exc: Exception) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, RemoteError):  # already says which service and what it answered
        return str(exc)
    return f"{type(exc).__name__}: {exc}"
