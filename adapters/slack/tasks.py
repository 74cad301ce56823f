"""Slack's work after the ack, held by ``bot.runtime.BackgroundTasks`` and admitted by ``AckFirst``.

``AckFirst`` holds each task back while requests are being acknowledged, so a burst's later acks
never queue behind the earlier events' runs (measured with benchmarks/slack_ack.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Coroutine, Iterator
from typing import Any

log = logging.getLogger(__name__)


class AckFirst:
    """Acknowledgements before background work, in a burst of requests.

    asyncio runs ready callbacks first come, first served, so in a burst of events the runs started
    by the first acks (model calls, SQL, Web API calls: milliseconds of CPU each) would compete with
    the later acks. Here a task starts once no request has been acknowledged for ``settle_s`` (a
    burst is over), one task per pass of the event loop so requests arriving meanwhile go first; a
    task that has waited ``patience_s`` starts anyway, so sustained traffic delays work by at most
    about that.
    """

    def __init__(self, settle_s: float = 0.02, patience_s: float = 0.25) -> None:
        self.settle_s = settle_s
        self.patience_s = patience_s
        self._acking = 0
        self._last_ack = float("-inf")
        self._queue: deque[tuple[float, asyncio.Future[None]]] = deque()
        self._admitter: asyncio.Task[None] | None = None

    @contextlib.contextmanager
    def acknowledging(self) -> Iterator[None]:
        """Mark a request being acknowledged for as long as the block runs."""
        self._acking += 1
        try:
            yield
        finally:
            self._acking -= 1
            self._last_ack = asyncio.get_running_loop().time()

    async def then(self, work: Coroutine[Any, Any, Any]) -> Any:
        """``work``, started in its turn."""
        try:
            await self._turn()
        except asyncio.CancelledError:
            work.close()  # cancelled before it started: it never will
            raise
        return await work

    def _calm_in(self) -> float:
        """Seconds until the last burst counts as over (0: it is)."""
        if self._acking:
            return self.settle_s
        return max(0.0, self._last_ack + self.settle_s - asyncio.get_running_loop().time())

    async def _turn(self) -> None:
        if not self._queue and not self._calm_in():
            return
        loop = asyncio.get_running_loop()
        turn: asyncio.Future[None] = loop.create_future()
        self._queue.append((loop.time() + self.patience_s, turn))
        if self._admitter is None:
            self._admitter = loop.create_task(self._admit(), name="slack-ack-first")
        await turn

    async def _admit(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._queue:
                due, turn = self._queue[0]
                if (calm_in := self._calm_in()) and (left := due - loop.time()) > 0:
                    await asyncio.sleep(min(calm_in, left))
                    continue
                self._queue.popleft()
                if not turn.done():
                    turn.set_result(None)
                await asyncio.sleep(0)  # one start per pass: requests that arrived meanwhile go first
        finally:
            self._admitter = None

