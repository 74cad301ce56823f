"""Admission before a run: a per-user rate shared by every replica, and a per-process cap on runs at once.

Both refuse with a polite reply the adapter posts like any answer: a message is never dropped in
silence. Over the cap a message first waits its turn (``bot.runtime.slots``), for up to ``RunSlots.wait_s``.

The per-user limit must hold across replicas, so its counter lives in the database (``rate_windows``)
and is bumped by one upsert (``Store.count_hit``). It is a sliding window approximated from two fixed
windows, the current count plus the previous window's count weighted by how much of it still overlaps:
no burst of twice the limit across a window boundary, one row per user. The concurrency cap protects
this process's memory and CPU, so it is deliberately per process: ``RunSlots``, a first-come queue.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from bot.runtime.slots import RunSlots
from bot.store import Store

RATE_LIMITED_TEXT = (
    "You've asked me {limit} questions in the last minute, which is as many as I take from one person. "
    "Please wait a moment, then ask again."
)


class UserRateLimit:
    """At most ``limit`` runs per key in any ``window_s`` seconds (0: no limit)."""

    def __init__(
        self, store: Store, limit: int, window_s: float = 60.0, clock: Callable[[], float] = time.time
    ) -> None:
        self._store = store
        self.limit = limit
        self.window_s = window_s
        self._clock = clock

    async def allow(self, key: str) -> bool:
        """Count this attempt and say whether it is within the limit (refused attempts count too)."""
        if self.limit <= 0:
            return True
        now = self._clock() / self.window_s
        count, previous, window = await self._store.rates.count_hit(key, int(now))
        overlap = 1.0 - min(max(now - window, 0.0), 1.0)  # share of the previous window still inside
        return previous * overlap + count <= self.limit

    def refusal(self) -> str:
        return RATE_LIMITED_TEXT.format(limit=self.limit)

    def oldest_window(self) -> int:
        """Counters of windows before this one no longer matter: the sweeper prunes them."""
        return int(self._clock() / self.window_s) - 1


@dataclass
class Admission:
    """What the service asks before starting a run for a message."""

    users: UserRateLimit
    slots: RunSlots
