"""The inbox: every platform event is written down before it is acknowledged, then worked on under a lease.

``accept`` is the one write before an ack (one INSERT keyed by the platform's event id). When it
fails the adapter does not acknowledge (HTTP 503, no Socket Mode ack), so the platform delivers the
event again; when it finds the event already written, the delivery is a retry and nothing runs.

The writer holds the item's lease (owner, epoch 1) and works on it at once, in the background. What
the work concludes with (a run, its reply, a card) commits only while the item's epoch is still the
one it started with (``Lease``, read by the service from ``current_lease()``): so a process that
stalled while another took its item over writes nothing when it wakes, and says so.

If the process dies, or the work fails (the database went away mid-run), the item stays unanswered;
so does one whose work never began because the process is stopping (``LeftForLater``: a message
still queued for a slot when the shutdown grace period ran out), without counting as an attempt.
The sweeper hands it (``recover``) to a live process with the next epoch, which does the work again;
after ``max_attempts`` the item fails and its handler tells the person (``on_failure``). That holds for
attempts that never ended too (work that kills its process each time): an item taken over with its
attempts used up is failed and told without being run again, so it cannot crash-loop every replica. A failure
that is the platform's for now (a retryable ``RemoteError``: users.info answering internal_error
during a Slack incident) does not count: it is retried at every sweep for ``retry_window`` after the
item arrived, so an outage of minutes delays answers instead of turning them into apologies.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Coroutine
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from bot.errors import LeftForLater, RemoteError
from bot.runtime import THIS_PROCESS, BackgroundTasks
from bot.store import InboxRecord, NewItem, Store, utcnow

log = logging.getLogger(__name__)

Handler = Callable[[InboxRecord], Awaitable[None]]
OnFailure = Callable[[InboxRecord, str], Awaitable[None]]
Admit = Callable[[Coroutine[Any, Any, Any]], Coroutine[Any, Any, Any]]
MAX_ATTEMPTS = 3
RECENT_IDS = 10_000  # ids written here, remembered so their redeliveries are answered without a query
KEEP = timedelta(days=1)  # platforms stop redelivering within minutes; a day covers a long outage
RETRY_WINDOW = timedelta(minutes=15)  # a platform refusing for now: retried this long, then the person is told
WAITING = "waiting for the platform: "  # the note an attempt that ended on a platform's refusal leaves


@dataclass
class Lease:
    """The inbox item the current work is for, and the epoch it holds; ``answered`` once its outcome committed."""

    item_id: str
    epoch: int
    attempt: int = 1
    answered: bool = False

    @property
    def fence(self) -> tuple[str, int]:
        return self.item_id, self.epoch


_CURRENT: contextvars.ContextVar[Lease | None] = contextvars.ContextVar("policypal_inbox_lease", default=None)


def current_lease() -> Lease | None:
    """The lease of the inbox item being worked on in this task; None outside one (the terminal)."""
    return _CURRENT.get()


@dataclass
class _Kind:
    handler: Handler
    on_failure: OnFailure | None = None
    admit: Admit | None = None


@dataclass
class Inbox:
    """Accepts events before their ack and runs their handlers under a lease; one per process."""

    store: Store
    owner: str = str(THIS_PROCESS)
    max_attempts: int = MAX_ATTEMPTS
    keep: timedelta = KEEP
    retry_window: timedelta = RETRY_WINDOW
    _kinds: dict[str, _Kind] = field(default_factory=dict)
    _working: set[str] = field(default_factory=set)
    _waiting: list[tuple[NewItem, asyncio.Future[bool]]] = field(default_factory=list)
    _writers: set[asyncio.Task[None]] = field(default_factory=set)
    _recent: OrderedDict[str, None] = field(default_factory=OrderedDict)  # ids this process wrote, newest last
    _tasks: BackgroundTasks = field(default_factory=lambda: BackgroundTasks("inbox"))

    def register(
        self, kind: str, handler: Handler, *, on_failure: OnFailure | None = None, admit: Admit | None = None
    ) -> None:
        """Handle items of ``kind`` here (a platform registers its kinds when it starts)."""
        self._kinds[kind] = _Kind(handler, on_failure, admit)

    @property
    def kinds(self) -> list[str]:
        return list(self._kinds)

    def working_on(self, item_id: str) -> bool:
        return item_id in self._working

    async def accept(self, item_id: str, platform: str, kind: str, payload: dict[str, Any]) -> bool:
        """Write the event before its ack and start its work; False for a redelivery (already written).

        Raises when the database cannot take it: the caller must then not acknowledge. Events that
        arrive together are written together (one INSERT for a burst), and each one's work starts
        once it is written, even if the request that brought it has gone meanwhile.
        """
        if item_id in self._recent:  # written here already: a redelivery, known without asking the database
            log.info("inbox: %s was delivered before; nothing to do", item_id)
            return False
        loop = asyncio.get_running_loop()
        written: asyncio.Future[bool] = loop.create_future()
        self._waiting.append((NewItem(item_id, platform, kind, payload), written))
        if len(self._writers) < self.store.ack_writers:  # else a writer busy now takes it with the next batch
            writer = loop.create_task(self._write_waiting(), name="inbox-accept")
            self._writers.add(writer)
            writer.add_done_callback(self._writers.discard)
        accepted = await asyncio.shield(written)
        if not accepted:
            log.info("inbox: %s was delivered before; nothing to do", item_id)
        return accepted

    async def _write_waiting(self) -> None:
        while self._waiting:
            await asyncio.sleep(0)  # the rest of this burst joins the batch
            batch, self._waiting = self._waiting, []
            if not batch:  # another writer took them
                break
            try:
                written = await self.store.inbox.accept_many([item for item, _ in batch], self.owner)
            except Exception as exc:
                for _, waiting in batch:
                    waiting.set_exception(exc)
                continue
            for item, waiting in batch:
                first = item.id in written
                written.discard(item.id)  # the same event twice in one batch: the second is a redelivery
                waiting.set_result(first)
                if first:
                    self._remember_written(item.id)
                    self.start(InboxRecord(item.id, item.platform, item.kind, item.payload, utcnow(), "leased",
                                           self.owner, 1, 1, None, None))

    def _remember_written(self, item_id: str) -> None:
        self._recent[item_id] = None
        while len(self._recent) > RECENT_IDS:
            self._recent.popitem(last=False)

    async def seen_before(self, item_id: str) -> bool:
        """Record an event id an earlier release may have handled; True when it had been seen."""
        return not await self.store.inbox.remember(item_id)

    def start(self, record: InboxRecord) -> asyncio.Task[Any]:
        """Work on an item this process holds, in the background (held until done; ``drain`` waits)."""
        kind = self._kinds.get(record.kind)
        self._working.add(record.id)  # from now, even while it waits its turn: never handed out twice here
        work = self.process(record)
        if kind is not None and kind.admit is not None:
            work = kind.admit(work)
        task = self._tasks.spawn(work, name=f"inbox-{record.kind}")
        task.add_done_callback(lambda _: self._working.discard(record.id))  # also when cancelled before it ran
        return task

    async def process(self, record: InboxRecord) -> None:
        """Run the item's handler under its lease; an item the handler answered nothing for is marked done."""
        kind = self._kinds.get(record.kind)
        if kind is None:
            log.error("inbox: no handler for %s items here; %s waits for a process with one", record.kind, record.id)
            return
        lease = Lease(record.id, record.epoch, record.attempts)
        token = _CURRENT.set(lease)
        try:
            await kind.handler(record)
            if not lease.answered:
                await self.store.inbox.finish(record.id, record.epoch)
        except asyncio.CancelledError:
            raise
        except LeftForLater as exc:  # never begun: not an attempt, and not this process's to answer now
            log.info("inbox: %s is left for the next process: %s", record.id, exc)
            await self.store.inbox.give_back(record.id, record.epoch)
        except Exception as exc:  # left unanswered: the sweeper hands it out again, up to max_attempts
            waiting = self._platform_refusing(exc, record)
            if waiting:
                log.warning("inbox: %s (attempt %d) waits for the platform (%s); retried at the next sweep",
                            record.id, record.attempts, exc)
                await self._note_waiting(record, exc)
            else:
                log.exception("inbox: %s (attempt %d) failed; it will be retried", record.id, record.attempts)
            if record.attempts >= self.max_attempts and not waiting:
                await self._give_up(record, kind, f"{type(exc).__name__}: {exc}", lease)
        finally:
            _CURRENT.reset(token)

    async def _note_waiting(self, record: InboxRecord, exc: Exception) -> None:
        """Mark the attempt as one that ended (not one that died): it does not use up the item's attempts."""
        try:
            await self.store.inbox.note(record.id, record.epoch, f"{WAITING}{exc}"[:1000])
        except Exception:
            log.exception("inbox: could not note that %s waits for the platform", record.id)

    def _exhausted(self, item: InboxRecord) -> bool:
        """Its attempts are used up and the last did not end waiting for the platform: its process died."""
        return item.attempts >= self.max_attempts and not (item.last_error or "").startswith(WAITING)

    def _platform_refusing(self, exc: Exception, record: InboxRecord) -> bool:
        """A failure the platform will stop causing (rate limit, 5xx, unreachable), within the retry window."""
        return isinstance(exc, RemoteError) and exc.retryable and utcnow() - record.received_at < self.retry_window

    async def recover(self, dead: Collection[str], now: datetime | None = None) -> list[str]:
        """Take over unanswered items of dead processes (and our own that failed), and work on them.

        ``dead``: owners known to be gone. Returns the ids started here.
        """
        since = (now or utcnow()) - self.keep
        started = []
        for item in await self.store.inbox.unanswered(since):
            mine = item.owner == self.owner
            if item.kind not in self._kinds or (mine and item.id in self._working) or not (mine or item.owner in dead):
                continue
            epoch = await self.store.inbox.relet(item.id, item.epoch, self.owner)
            if epoch is None:
                continue  # another process took it first
            log.warning("inbox: %s was left unanswered by %s; taking it over (epoch %d)", item.id, item.owner, epoch)
            taken = InboxRecord(
                item.id, item.platform, item.kind, item.payload, item.received_at, "leased", self.owner, epoch,
                item.attempts + 1, None, None,
            )
            if self._exhausted(item):
                self._retire(taken, f"gave up after {item.attempts} attempts: each ended without an outcome "
                                    "(the process working on it stopped)")
            else:
                self.start(taken)
            started.append(item.id)
        return started

    def _retire(self, record: InboxRecord, error: str) -> None:
        """Fail an item taken over with its attempts used up, and tell the person, without running it again."""
        kind = self._kinds[record.kind]

        async def retire() -> None:
            lease = Lease(record.id, record.epoch, record.attempts)
            token = _CURRENT.set(lease)
            try:
                await self._give_up(record, kind, error, lease)
            finally:
                _CURRENT.reset(token)

        self._working.add(record.id)
        task = self._tasks.spawn(retire(), name=f"inbox-retire-{record.kind}")
        task.add_done_callback(lambda _: self._working.discard(record.id))

    async def prune(self, now: datetime | None = None) -> int:
        return await self.store.inbox.prune((now or utcnow()) - self.keep)

    def __len__(self) -> int:
        return len(self._tasks)

    async def drain(self, timeout_s: float) -> None:
        """Let items being worked on finish (shutdown); what is cut short is retried by whoever is left."""
        await self._tasks.drain(timeout_s)

    async def _give_up(self, record: InboxRecord, kind: _Kind, error: str, lease: Lease) -> None:
        log.error("inbox: %s failed %d times; giving up: %s", record.id, record.attempts, error)
        try:
            lease.answered = await self.store.inbox.finish(record.id, record.epoch, error=error[:1000])
        except Exception:
            log.exception("inbox: could not mark %s failed", record.id)
        if not lease.answered:
            return  # another process holds it now (or the store is down): the telling is theirs
        if kind.on_failure is not None:
            try:
                await kind.on_failure(record, error)
            except Exception:
                log.exception("inbox: telling the person about %s failed", record.id)
