"""Telling someone something they did not just ask for, wherever their conversation lives.

Crash recovery must reply in the thread of a run whose process died, and an expired card should say
so. The core knows where each conversation lives (``Place``, kept from its first message); each
adapter implements ``Notifier`` for its platform and the composition root (adapters/server/app.py)
registers it here, so bot/ never imports platform code. A platform with no notifier (the terminal)
is logged instead.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from bot.store import PendingRecord, Place, Store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Notice:
    """An unprompted message: its text, and the run and helpdesk case it is about."""

    text: str
    run_id: str | None = None
    case_id: str | None = None


class Notifier(Protocol):
    """One platform's way to post in a thread, and to update a card, after the request that made them."""

    async def notify(self, place: Place, notice: Notice) -> bool:
        """Post ``notice`` in the thread at ``place``; False when the platform refused (already logged)."""
        ...

    async def card_expired(self, record: PendingRecord) -> bool:
        """Show on the posted card that it expired and nothing was done."""
        ...


class Notifiers:
    """The registered notifiers, by platform name ("slack", "teams")."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._by_platform: dict[str, Notifier] = {}

    def register(self, platform: str, notifier: Notifier) -> None:
        self._by_platform[platform] = notifier

    @property
    def platforms(self) -> list[str]:
        return sorted(self._by_platform)

    async def notify(self, conversation_key: str, notice: Notice) -> bool:
        """Post in the conversation's thread; never raises (recovery must go on to the next run)."""
        place = await self._store.threads.get_place(conversation_key) or Place.from_key(conversation_key)
        notifier = self._by_platform.get(place.platform)
        if notifier is None:
            log.warning("no way to post on %s: %s was not told: %s", place.platform, conversation_key, notice.text)
            return False
        try:
            return await notifier.notify(place, notice)
        except Exception:
            log.exception("notifying %s failed", conversation_key)
            return False

    async def card_expired(self, record: PendingRecord) -> bool:
        """Update an expired action's card, if it was posted somewhere this process can reach."""
        if not record.platform_message:
            return False
        platform = record.conversation_key.partition(":")[0]
        notifier = self._by_platform.get(platform)
        if notifier is None:
            return False
        try:
            return await notifier.card_expired(record)
        except Exception:
            log.exception("updating the expired card of %s failed", record.id)
            return False
