"""A small in-process cache for lookups a surface repeats (who a Slack user or a Teams member is).

Entries expire after ``ttl_s`` and the oldest go once there are ``max_entries``; concurrent lookups of
one key share one load, so a burst of messages from one person makes one API call. A load that
returns None (the platform could not say) is not cached: the next lookup tries again. Nothing here
must survive a restart.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ExpiringCache(Generic[K, V]):
    """A bounded map whose entries expire; ``get_or_load`` fills it, one load per key at a time."""

    def __init__(self, ttl_s: float, max_entries: int = 5_000, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._clock = clock
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self._loading: dict[K, asyncio.Future[V | None]] = {}

    def get(self, key: K) -> V | None:
        entry = self._entries.get(key)
        return entry[1] if entry and entry[0] > self._clock() else None

    def put(self, key: K, value: V) -> None:
        self._entries[key] = (self._clock() + self.ttl_s, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def forget(self, key: K) -> None:
        """Drop ``key``'s value and any load of it under way: that load's callers still get its result,
        but it is not kept and later callers start their own (what it read may already be stale)."""
        self._entries.pop(key, None)
        self._loading.pop(key, None)

    async def get_or_load(self, key: K, load: Callable[[], Awaitable[V | None]]) -> V | None:
        """The cached value, or ``load()``'s (cached unless None); callers of a key being loaded wait for it."""
        if (cached := self.get(key)) is not None:
            return cached
        if (waiting := self._loading.get(key)) is not None:
            return await asyncio.shield(waiting)
        future: asyncio.Future[V | None] = asyncio.get_running_loop().create_future()
        self._loading[key] = future
        try:
            value = await load()
        except asyncio.CancelledError:
            future.cancel()
            raise
        except Exception as exc:
            future.set_exception(exc)
            future.exception()  # retrieved here: waiters re-raise it, and asyncio does not warn when there are none
            raise
        finally:
            still_wanted = self._loading.get(key) is future  # not forgotten meanwhile
            if still_wanted:
                del self._loading[key]
        if value is not None and still_wanted:
            self.put(key, value)
        future.set_result(value)
        return value
