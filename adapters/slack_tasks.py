"""Work that runs after Slack has its ack: held by reference, drained on shutdown.

asyncio keeps only a weak reference to a task, so a fire-and-forget ``ensure_future`` (what bolt's
own lazy listeners do) can be garbage-collected mid-run, and at shutdown nothing waits for it. Here
every task is held until it ends, its failure is logged, and ``drain`` lets the server finish
in-flight runs (within a deadline) before the service closes under them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger(__name__)


class BackgroundTasks:
    """A set of running tasks the server owns."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self.started = 0

    def spawn(self, work: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(work, name=name)
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
