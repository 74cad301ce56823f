"""Work a surface starts after it answered the platform: held by reference, drained on shutdown.

asyncio keeps only a weak reference to a task, so a fire-and-forget ``ensure_future`` can be
garbage-collected mid-run, and at shutdown nothing waits for it. Here every task is held until it
ends, its failure is logged, and ``drain`` lets in-flight work finish (within a deadline) before
the service closes under it. Slack and Teams each keep one; Slack also holds each task back while
requests are being acknowledged (``adapters.slack.tasks.AckFirst``), through ``admit``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger(__name__)

Work = Coroutine[Any, Any, Any]


class BackgroundTasks:
    """The running tasks a surface owns; ``admit`` wraps each one (say, to wait its turn) before it starts."""

    def __init__(self, owner: str, admit: Callable[[Work], Work] | None = None) -> None:
        self.owner = owner  # who the tasks are for, in logs ("Slack", "Teams")
        self._admit = admit
        self._tasks: set[asyncio.Task[Any]] = set()
        self.started = 0

    def spawn(self, work: Work, name: str | None = None) -> asyncio.Task[Any]:
        admitted = self._admit(work) if self._admit is not None else work
        task = asyncio.get_running_loop().create_task(admitted, name=name)
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
        log.info("waiting up to %.0f s for %d %s task(s) to finish", timeout_s, len(self._tasks), self.owner)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        # A finishing task may start another (a dispatch starts its run): wait until none is left.
        while self._tasks and (left := deadline - loop.time()) > 0:
            await asyncio.wait(set(self._tasks), timeout=left)
        pending = set(self._tasks)
        for task in pending:
            task.cancel()
        if pending:
            log.warning("cancelled %d %s task(s) still running at shutdown", len(pending), self.owner)
            await asyncio.wait(pending, timeout=1.0)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("%s task %s failed", self.owner, task.get_name(), exc_info=exc)
