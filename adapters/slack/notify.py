"""Slack's ``Notifier``: post in a thread, and update an expired card, outside any request.

Used by the sweeper (crash recovery, expiry); built from the running Slack runtime's poster, so the
posts go through the same client, retries and error reporting as every reply.
"""

from __future__ import annotations

from adapters.slack.blocks import decided_card_message, give_up_message, notice_message
from adapters.slack.post import SlackPoster
from bot.delivery import Notice
from bot.store import PendingRecord, Place
from bot.types import GaveUp, TerminationReason


class SlackNotifier:
    """Posts notices in Slack threads and updates posted cards, through a ``SlackPoster``."""

    def __init__(self, poster: SlackPoster) -> None:
        self._poster = poster

    async def notify(self, place: Place, notice: Notice) -> bool:
        """A recovered run's give-up (with its case) in the thread the question was asked in."""
        if notice.run_id:
            gave_up = GaveUp(TerminationReason.CANCELLED, notice.text, case_id=notice.case_id)
            message = give_up_message(gave_up, notice.run_id)
        else:
            message = notice_message(notice.text)
        return await self._poster.post(place.channel, place.thread, message) is not None

    async def card_expired(self, record: PendingRecord) -> bool:
        where = record.platform_message or {}
        if not where.get("channel") or not where.get("ts"):
            return False
        return await self._poster.update(str(where["channel"]), str(where["ts"]), decided_card_message(record))
