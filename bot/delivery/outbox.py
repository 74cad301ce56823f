"""The outbox: every platform write and every helpdesk delivery, sent once, surviving failures and restarts.

Each write is a row committed with the outcome it belongs to (a run's reply with the run, a case's
deliveries with the case). Rows are sent by ``Sender``s: each names the destinations it delivers to
("slack", "teams" for platform writes; "webhook", "email", a helpdesk channel for cases).

- **Now, in the process that wrote them.** A run's rows are inserted already claimed by their writer,
  which sends them at once (``send_now``): one UPDATE when each is sent.
- **Later, by whoever claims them.** A row that failed for now is due again after a backoff; any
  worker claims a due row with one conditional UPDATE, so each attempt is made by exactly one of them.
  A row claimed by a worker that went quiet (or died) is claimed again; its outcome is unknown, which
  the sender is told (``Delivery.uncertain``), so a platform that can look for its own earlier post
  (Slack's message metadata) does that before posting again.
- **For good.** After the retry window, or at once for a refusal that cannot change (a channel the bot
  is not in), a platform write is handed to ``on_undeliverable``: the service opens a helpdesk case so
  a person follows up, never silence (if that hand-over fails, the row is due again after a backoff, so
  it is tried and handed over again). A helpdesk delivery that gives up stays ``failed`` for
  ``policypal handoffs --retry``.

Rows with one ``coalesce_key`` describe one card: only the newest due one is sent, the rest are retired.
The attempt number fences every outcome: a worker presumed dead cannot record a late result over the
claim that replaced it, and one that finds its claim gone stops (``ClaimLost``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, Protocol

from bot.errors import ClaimLost, RemoteError
from bot.redaction import Redactor, bounded
from bot.runtime import THIS_PROCESS
from bot.store import DeliveryRecord, DeliveryState, Store, utcnow

log = logging.getLogger(__name__)

ERROR_CHARS = 1_000
Status = Literal["delivered", "retrying", "failed"]


@dataclass(frozen=True)
class OutboxPolicy:
    """How hard and how often to try one kind of row; the defaults (helpdesk cases) keep trying for hours."""

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


# After a pause this long between a commit and its post (a frozen process), the claim is read again
# before sending: the sweeper may have handed the row to another worker in the meantime.
PAUSE_RECHECK_S = 1.0

# Platform writes: a person is waiting, so retry fast, for a few minutes; then a human follows up.
POST_POLICY = OutboxPolicy(max_attempts=9, backoff_s=1.0, max_backoff_s=60.0, stale_after_s=60.0)


@dataclass(frozen=True)
class Delivery:
    """One claimed row as its sender sees it: stable ids, what earlier attempts saved, and whether an
    earlier attempt may have gone through without its outcome being recorded."""

    row_id: int
    key: str  # random, stored with the row: the same on every retry
    progress: str | None  # what an earlier attempt saved with ``save``; None on a fresh start
    save: Callable[[str], Awaitable[None]]  # stores progress before the next step; raises if the claim was lost
    uncertain: bool = False  # the last claim ended without an outcome (its worker died): look before posting


class Sender(Protocol):
    """Delivers the rows addressed to its destinations; returns an external reference, or raises."""

    @property
    def destinations(self) -> Sequence[str]: ...

    def label(self, row: DeliveryRecord) -> str:
        """How logs and the CLI name the row ("HD-1001", "post 42")."""
        ...

    async def send(self, row: DeliveryRecord, delivery: Delivery) -> str | None: ...


@dataclass(frozen=True)
class DeliveryResult:
    """One attempt's outcome, for the CLI and logs; ``label`` is the case id, or ``post <id>``."""

    label: str
    destination: str
    status: Status
    detail: str = ""

    @property
    def case_id(self) -> str:
        return self.label


Undeliverable = Callable[[DeliveryRecord, str], Awaitable[None]]


class Outbox:
    """Sends rows: ``send_now`` for a run's own rows, ``run_forever`` in the server, ``run_once`` from the CLI."""

    def __init__(
        self,
        store: Store,
        senders: Sequence[Sender] = (),
        policy: OutboxPolicy | None = None,
        *,
        post_policy: OutboxPolicy = POST_POLICY,
        owner: str | None = None,
        redactor: Redactor | None = None,
        clock: Callable[[], datetime] = utcnow,
        on_result: Callable[[DeliveryResult], None] | None = None,
    ) -> None:
        self._store = store
        self._senders: dict[str, Sender] = {}
        self.policy = policy or OutboxPolicy()
        self.post_policy = post_policy
        self.owner = owner or str(THIS_PROCESS)
        self._redactor = redactor or Redactor()
        self._clock = clock
        self._wake = asyncio.Event()
        self._stopping = False
        self._on_result = on_result  # metrics: every attempt's outcome
        self.on_undeliverable: Undeliverable | None = None  # the service: a case, so a person follows up
        self._sending: set[asyncio.Task[None]] = set()
        self._behind: dict[str, set[int]] = {}  # conversation -> its messages this process failed to send
        for sender in senders:
            self.register(sender)

    def register(self, sender: Sender) -> None:
        """Deliver the rows of ``sender``'s destinations (a platform registers when it starts)."""
        for name in sender.destinations:
            self._senders[name] = sender

    @property
    def names(self) -> list[str]:
        return list(self._senders)

    def delivers(self, destination: str) -> bool:
        return destination in self._senders

    def wake(self, _reason: object = None) -> None:
        """Deliver now rather than at the next poll (a case or a row was just written)."""
        self._wake.set()

    def _wake_in(self, delay_s: float) -> None:
        """Wake the delivery loop when a retry falls due, not at the next poll (a person is waiting)."""
        with contextlib.suppress(RuntimeError):  # no running loop: the next pass finds the row anyway
            asyncio.get_running_loop().call_later(delay_s, self._wake.set)

    def send_now(self, rows: Sequence[DeliveryRecord]) -> None:
        """Send rows this process inserted claimed (attempt 1), in order, in the background; ``drain`` waits.

        A row inserted unclaimed (it waits for an earlier message of its conversation) is the delivery loop's.
        """
        if any(row.claimed_by != self.owner for row in rows):
            self._wake.set()
        rows = [row for row in rows if row.claimed_by == self.owner and row.state == "sending"]
        if not rows:
            return
        task = asyncio.get_running_loop().create_task(self._send_in_order(list(rows)), name="outbox-send-now")
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def drain(self, timeout_s: float) -> None:
        """Wait for rows being sent now (shutdown, the terminal); what is left is sent by a later pass."""
        if self._sending:
            await asyncio.wait(set(self._sending), timeout=timeout_s)

    async def run_once(
        self, case_number: int | None = None, *, timeout_s: float | None = None
    ) -> list[DeliveryResult]:
        """Attempt every row due now (one case's, if given), a batch at a time; each attempt bounded by the timeout."""
        results: list[DeliveryResult] = []
        while True:
            batch, full = await self._one_batch(case_number, timeout_s)
            results += batch
            if not full:
                return results

    async def _one_batch(
        self, case_number: int | None, timeout_s: float | None
    ) -> tuple[list[DeliveryResult], bool]:
        """One batch of due rows; True when it was full (a backlog: the caller goes on at once)."""
        if not self._senders:
            return [], False
        now = self._clock()
        stale_before = now - timedelta(seconds=min(self.policy.stale_after_s, self.post_policy.stale_after_s))
        due = await self._store.outbox.due(
            self.names, now, stale_before, case_number=case_number, limit=self.policy.batch
        )
        full = len(due) >= self.policy.batch
        due = await self._newest_cards(due)
        results = self._report(list(await asyncio.gather(*(self._claim_and_send(r, now, timeout_s) for r in due))))
        # Go on at once after a full batch (a backlog), or after a message was sent (the next message
        # of its conversation waited for it); not when nothing was taken (others hold them).
        delivered = any(r.status == "delivered" for r in results)
        return results, bool(results) and (full or delivered)

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
                log.exception("outbox pass failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), min(self.policy.poll_s, self.post_policy.poll_s))

    async def retry_failed(self, case_number: int | None = None) -> int:
        """Put helpdesk deliveries that gave up back in the outbox (all, or one case's); returns how many."""
        return await self._store.outbox.retry_failed(self._clock(), case_number)

    # -- one row ----------------------------------------------------------------------------------

    async def _send_in_order(self, rows: list[DeliveryRecord]) -> None:
        committed = time.monotonic()
        results = []
        for row in rows:
            try:
                if await self._taken_while_paused(row, committed) or await self._waits_its_turn(row):
                    continue
                results.append(await self._send(row, attempt=1, timeout_s=None, uncertain=False))
            except Exception:  # a database error recording the outcome: the row is retried when its claim ages
                log.exception("outbox row %s: recording its outcome failed", row.id)
        self._report(results)

    async def _waits_its_turn(self, row: DeliveryRecord) -> bool:
        """A message whose conversation has an earlier message this process failed to send waits for it.

        It is handed to the delivery loop (pending, due now), which sends a conversation's messages in
        order; so after an outage an answer never lands above the one asked before it. Only rows this
        process saw fail are checked (no extra query on the usual path); ``due`` orders the rest.
        """
        failed = self._behind.get(row.conversation_key or "", set()) if _ordered(row) else set()
        for earlier in sorted(i for i in failed if i < row.id):
            if not await self._store.outbox.unsent(earlier):
                failed.discard(earlier)  # sent since, here or by another worker
                continue
            await self._store.outbox.settle(row.id, self.owner, 1, "pending", attempts=0, next_attempt_at=self._clock())
            log.info("%s waits for post %d of its conversation, still unsent", self._label(row), earlier)
            self._wake.set()
            return True
        return False

    async def _taken_while_paused(self, row: DeliveryRecord, committed: float) -> bool:
        """After a long pause since the commit (the process was frozen), is the row still ours to send?

        Another worker reclaims rows of a process that went quiet; one that wakes must not send them too.
        """
        if time.monotonic() - committed < PAUSE_RECHECK_S:
            return False
        current = await self._store.outbox.get(row.id)
        ours = current is not None and current.state == "sending" and current.claimed_by == self.owner
        if not ours or (current is not None and current.attempts != 1):
            log.warning("%s: taken over by another worker while this process was paused; not sent here",
                        self._label(row))
            return True
        return False

    async def _claim_and_send(
        self, row: DeliveryRecord, now: datetime, timeout_s: float | None
    ) -> DeliveryResult | None:
        stale_before = now - timedelta(seconds=self._policy(row).stale_after_s)
        if row.state == "sending" and row.claimed_at is not None and row.claimed_at >= stale_before:
            return None  # a post claim, young for a post but old for a case (or the other way): not ours yet
        attempt = await self._store.outbox.claim(row.id, self.owner, now, stale_before)
        if attempt is None:
            return None  # another worker has it
        uncertain = row.state == "sending" or (row.last_error or "").startswith("interrupted")
        claimed = await self._store.outbox.get(row.id) or row  # progress as of our claim, not as of the due list
        return await self._send(claimed, attempt=attempt, timeout_s=timeout_s, uncertain=uncertain)

    async def _send(
        self, row: DeliveryRecord, *, attempt: int, timeout_s: float | None, uncertain: bool
    ) -> DeliveryResult | None:
        sender = self._senders.get(row.destination)
        if sender is None:
            return await self._failed(row, attempt, f"no sender for {row.destination!r} here", final=False)
        delivery = Delivery(row.id, row.idempotency_key, row.external_ref, self._saver(row, attempt), uncertain)
        started = time.monotonic()
        try:
            async with asyncio.timeout(timeout_s or self._policy(row).deliver_timeout_s):
                ref = await sender.send(row, delivery)
        except asyncio.CancelledError:
            await asyncio.shield(self._failed(row, attempt, "interrupted by shutdown", final=False))
            raise
        except ClaimLost:  # we were presumed dead and another worker carries on: nothing of ours to record
            log.warning("%s to %s: taken over by another worker mid-delivery", self._label(row), row.destination)
            return None
        except Exception as exc:
            final = attempt >= self._policy(row).max_attempts or _cannot_change(exc)
            asked = exc.retry_after if isinstance(exc, RemoteError) else None  # a 429's Retry-After
            return await self._failed(row, attempt, _describe(exc), final=final, retry_after_s=asked)
        settled = await self._store.outbox.settle(
            row.id, self.owner, attempt, "delivered", external_ref=ref, delivered_at=self._clock(), last_error=None
        )
        if not settled:
            log.warning("%s to %s delivered after its claim was taken over", self._label(row), row.destination)
        took = time.monotonic() - started
        return DeliveryResult(self._label(row), row.destination, "delivered", ref or f"{took:.2f} s")

    def _saver(self, row: DeliveryRecord, attempt: int) -> Callable[[str], Awaitable[None]]:
        async def save(progress: str) -> None:
            outbox = self._store.outbox
            if not await outbox.settle(row.id, self.owner, attempt, "sending", external_ref=progress):
                raise ClaimLost(f"outbox row {row.id} was taken over by another worker")

        return save

    async def _failed(
        self, row: DeliveryRecord, attempt: int, error: str, *, final: bool, retry_after_s: float | None = None
    ) -> DeliveryResult | None:
        """Record a failed attempt; None when the claim was taken over meanwhile (the new holder decides)."""
        error = bounded(self._redactor.text(error), ERROR_CHARS)
        fields: dict[str, object] = {"last_error": error}
        delay = timedelta(0)
        if not final:
            policy = self._policy(row)
            delay = max(policy.delay(attempt), timedelta(seconds=min(retry_after_s or 0.0, policy.max_backoff_s)))
            fields["next_attempt_at"] = self._clock() + delay
        state: DeliveryState = "failed" if final else "pending"
        label, where = self._label(row), row.destination
        if not await self._store.outbox.settle(row.id, self.owner, attempt, state, **fields):
            # Presumed dead, we lost the row to another worker, which may well have delivered it: a
            # late failure of ours must neither hand it to a person nor hold its conversation back.
            log.warning("%s to %s failed after its claim was taken over; not ours to record: %s", label, where, error)
            return None
        if not final:
            self._wake_in(delay.total_seconds())
            if _ordered(row) and row.conversation_key:
                self._behind.setdefault(row.conversation_key, set()).add(row.id)
        if not final:
            log.warning("%s to %s failed (attempt %d), will retry: %s", label, where, attempt, error)
            return DeliveryResult(label, where, "retrying", error)
        log.error("%s to %s failed for good after %d attempts: %s", label, where, attempt, error)
        if row.kind == "post" and self.on_undeliverable is not None:
            try:
                await self.on_undeliverable(row, error)
            except Exception:  # nobody has it yet: due again after a backoff, so a person gets it, never silence
                log.exception("%s: handing the undelivered write to the helpdesk failed; it will be tried again", label)
                delay = self._policy(row).delay(attempt)
                if await self._store.outbox.reopen(row.id, self.owner, attempt, self._clock() + delay):
                    self._wake_in(delay.total_seconds())
        return DeliveryResult(label, where, "failed", error)

    async def _newest_cards(self, due: list[DeliveryRecord]) -> list[DeliveryRecord]:
        """Of the rows describing one card, only the newest is sent; older due ones are claimed and retired.

        "Newest" is over the whole table, not this pass: a retry of an older state must not land after a
        newer state another worker already showed.
        """
        keys = sorted({row.coalesce_key for row in due if row.coalesce_key})
        if not keys:
            return due
        newest = await self._store.outbox.newest_cards(keys)
        stale = [r for r in due if r.coalesce_key and newest.get(r.coalesce_key, r.id) > r.id]
        if stale:
            now = self._clock()
            claimed = []
            for row in stale:
                before = now - timedelta(seconds=self._policy(row).stale_after_s)
                if await self._store.outbox.claim(row.id, self.owner, now, before) is not None:
                    claimed.append(row.id)
            await self._store.outbox.supersede(claimed, self.owner)
        return [r for r in due if r not in stale]

    def _label(self, row: DeliveryRecord) -> str:
        sender = self._senders.get(row.destination)
        return sender.label(row) if sender is not None else f"{row.kind} {row.id}"

    def _policy(self, row: DeliveryRecord) -> OutboxPolicy:
        return self.post_policy if row.kind == "post" else self.policy

    def _report(self, results: list[DeliveryResult | None]) -> list[DeliveryResult]:
        done = [r for r in results if r is not None]
        if self._on_result is not None:
            for result in done:
                self._on_result(result)
        return done


def _ordered(row: DeliveryRecord) -> bool:
    """A message keeps its place in its conversation; a card update does not need to (newest wins)."""
    return row.kind == "post" and row.coalesce_key is None


def _cannot_change(exc: Exception) -> bool:
    """A refusal that no retry will change (not in the channel, a message the platform will never take)."""
    return isinstance(exc, RemoteError) and not exc.retryable


def _describe(exc: Exception) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, RemoteError):  # already says which service and what it answered
        return str(exc)
    return f"{type(exc).__name__}: {exc}"
