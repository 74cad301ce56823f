"""Work that runs after Slack has its ack: held by reference, drained on shutdown.

asyncio keeps only a weak reference to a task, so a fire-and-forget ``ensure_future`` (what bolt's
own lazy listeners do) can be garbage-collected mid-run, and at shutdown nothing waits for it. Here
every task is held until it ends, its failure is logged, and ``drain`` lets the server finish
in-flight runs (within a deadline) before the service closes under them. ``AckFirst`` holds each
task back while requests are being acknowledged, so a burst's later acks never queue behind the
earlier events' runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Coroutine, Iterator
from typing import Any

log = logging.getLogger(__name__)


class BackgroundTasks:
    """A set of running tasks the server owns; each starts once no request is being acknowledged."""

    def __init__(self, gate: AckFirst | None = None) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self.gate = gate or AckFirst()
        self.started = 0

    def spawn(self, work: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(self.gate.then(work), name=name)
        self._tasks.add(task)
        self.started += 1
        task.add_done_callback(self._finished)
        return task

    def __len__(self) -> int:
        return len(self._tasks)

    async def drain(self, timeout_s: float) -> None:
        """Wait for running tasks; cancel what is still running after ``timeout_s``."""
        if not self._tasks:
            return
        log.info("waiting up to %.0f s for %d Slack task(s) to finish", timeout_s, len(self._tasks))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        # A finishing task may start another (a dispatch starts its run): wait until none is left.
        while self._tasks and (left := deadline - loop.time()) > 0:
            await asyncio.wait(set(self._tasks), timeout=left)
        pending = set(self._tasks)
        for task in pending:
            task.cancel()
        if pending:
            log.warning("cancelled %d Slack task(s) still running at shutdown", len(pending))
            await asyncio.wait(pending, timeout=1.0)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("Slack task %s failed", task.get_name(), exc_info=exc)


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
