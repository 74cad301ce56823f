"""The runs this process is working on, each with the event that stops it: what a graceful shutdown drains.

On SIGTERM the server stops taking requests, then ``drain``: runs get ``grace_s`` to finish; the rest
are cancelled cooperatively (their event is set), so the agent loop ends with ``cancelled``, the service
opens a helpdesk case and the adapter posts the give-up reply. Nobody is left without an answer: a
message still waiting for a slot by then is not begun at all (bot.service raises ``LeftForLater``) and
stays in the inbox for the next process.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)


class InFlight:
    """A registry of running runs; ``track`` around each, ``drain`` once at shutdown."""

    def __init__(self) -> None:
        self._runs: dict[str, asyncio.Event] = {}
        self._changed = asyncio.Event()
        self.draining = False
        self._grace_ends: float | None = None  # loop time the grace period runs out, once draining

    def __len__(self) -> int:
        return len(self._runs)

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._runs

    @property
    def past_grace(self) -> bool:
        """The grace period has run out: a run that starts now is stopped at once.

        By the clock, not by the drain's wait: that ends early once nothing is in flight, and a run
        starting then (a confirmed click's continuation) still has the rest of the period.
        """
        return self._grace_ends is not None and asyncio.get_running_loop().time() >= self._grace_ends

    @contextmanager
    def track(self, run_id: str, cancel: asyncio.Event | None = None) -> Iterator[asyncio.Event]:
        """Register a run for its duration; yields the event that cancels it (the caller's, if given)."""
        stop = cancel or asyncio.Event()
        if self.past_grace and not stop.is_set():
            # It waited for a slot through the grace period: nothing is left of it to run in.
            log.warning("run %s started after the grace period: it gives up and hands off", run_id)
            stop.set()
        elif self.draining and not stop.is_set():
            log.info("run %s started while shutting down: it has what is left of the grace period", run_id)
        self._runs[run_id] = stop
        try:
            yield stop
        finally:
            self._runs.pop(run_id, None)
            self._changed.set()

    async def drain(self, grace_s: float, finish_s: float = 10.0) -> int:
        """Let runs finish within ``grace_s``, then cancel the rest and wait ``finish_s`` for their replies.

        Returns how many runs had to be cancelled.
        """
        self.draining = True
        self._grace_ends = asyncio.get_running_loop().time() + grace_s
        if self._runs:
            log.info("shutting down: waiting up to %.0f s for %d run(s) in flight", grace_s, len(self._runs))
        await self._wait_empty(grace_s)
        late = list(self._runs.items())
        for run_id, stop in late:
            log.warning("run %s did not finish within the grace period: it gives up and hands off", run_id)
            stop.set()
        await self._wait_empty(finish_s)
        return len(late)

    async def _wait_empty(self, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self._runs and (left := deadline - loop.time()) > 0:
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                return
