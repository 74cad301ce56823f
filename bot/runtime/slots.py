"""The per-process cap on runs at once, with a queue: a burst beyond the cap waits its turn, first come first served.

The cap protects this process's memory and CPU, so it is per process. A message beyond it waits for up
to ``wait_s`` (``POLICYPAL_QUEUE_WAIT_S``), and only then hears that the bot is busy, and how long it
waited. The order is kept explicitly: a freed slot passes straight to the oldest waiter, so a newcomer
never takes it between the release and that waiter's wake-up, and a waiter can be told its place.

Waiting here holds nothing but the inbox item's lease, which this process keeps while it lives: no
other replica takes a queued message for abandoned, and after a crash the restart answers it once. The
run's deadline starts with its run (``bot.agent.Budget``), after the wait.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

BUSY_TEXT = (
    "I'm answering a lot of questions right now: yours waited {waited} for its turn and I couldn't get to it. "
    "Please ask again in a few minutes."
)
QUEUED_TEXT = "Queued: {ahead} ahead of you…"
NEXT_TEXT = "Queued: you're next…"

OnQueued = Callable[[int], Awaitable[None]]  # told how many wait ahead, once, when a message joins the queue


@dataclass(frozen=True)
class SlotTurn:
    """What came of asking for a slot: ``admitted`` holding one, or refused after ``waited_s``."""

    admitted: bool
    waited_s: float = 0.0
    queued: bool = False  # it waited in line (its status line said so)
    ahead: int = 0  # waiting before it when it joined the line


class RunSlots:
    """At most ``size`` runs at once in this process; the rest wait in arrival order, each up to ``wait_s``."""

    def __init__(self, size: int, wait_s: float = 120.0) -> None:
        self.size = size
        self.wait_s = wait_s
        self.busy = 0  # slots in use now
        self._line: deque[asyncio.Future[None]] = deque()  # waiters, oldest first

    @property
    def queued(self) -> int:
        """Messages waiting for a slot now."""
        return len(self._line)

    @asynccontextmanager
    async def slot(self, on_queued: OnQueued | None = None) -> AsyncIterator[SlotTurn]:
        """Yields an admitted SlotTurn holding a slot, or a refused one once ``wait_s`` passed (say ``busy_text``)."""
        turn = await self._acquire(on_queued)
        if not turn.admitted:
            yield turn
            return
        try:
            yield turn
        finally:
            self._release()

    async def _acquire(self, on_queued: OnQueued | None) -> SlotTurn:
        if self.busy < self.size and not self._line:
            self.busy += 1  # a free slot: no timer, so wait_s=0 still admits
            return SlotTurn(True)
        if self.wait_s <= 0:
            return SlotTurn(False)
        loop = asyncio.get_running_loop()
        joined, ahead = loop.time(), len(self._line)
        mine: asyncio.Future[None] = loop.create_future()
        self._line.append(mine)
        try:
            if on_queued is not None:
                await on_queued(ahead)  # its place is kept meanwhile; the time counts towards the wait
            await asyncio.wait((mine,), timeout=max(0.0, joined + self.wait_s - loop.time()))
        except BaseException:  # cancelled (shutdown) while waiting: out of the line, its slot passed on
            self._leave(mine)
            raise
        waited = loop.time() - joined
        if mine.done():  # the slot was passed on to this one (a hand-over at the last moment counts)
            return SlotTurn(True, waited, queued=True, ahead=ahead)
        self._leave(mine)
        return SlotTurn(False, waited, queued=True, ahead=ahead)

    def _leave(self, mine: asyncio.Future[None]) -> None:
        """Out of the line without a run; a slot already handed to it goes to the next in line."""
        if mine.done():
            self._release()
            return
        mine.cancel()
        self._line.remove(mine)

    def _release(self) -> None:
        """The slot passes to the oldest waiter (``busy`` unchanged), or becomes free."""
        if self._line:
            self._line.popleft().set_result(None)
            return
        self.busy -= 1


def busy_text(waited_s: float) -> str:
    """The refusal after the wait, saying how long the message waited."""
    return BUSY_TEXT.format(waited=_duration(waited_s))


def queued_text(ahead: int) -> str:
    """The status line of a message waiting its turn."""
    return QUEUED_TEXT.format(ahead=ahead) if ahead else NEXT_TEXT


def _duration(seconds: float) -> str:
    if seconds < 1:
        return "less than a second"
    if seconds < 90:
        whole = round(seconds)
        return f"{whole} second{'s' if whole != 1 else ''}"
    return f"{round(seconds / 60)} minutes"
