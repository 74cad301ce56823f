"""Teams' ``Notifier``: proactive posts to a stored conversation reference, outside any turn.

The reference is kept with the conversation's place from its first message (``Inbound.address``) and
with each posted card, so this works after a restart, from any replica.
"""

from __future__ import annotations

import logging

from adapters.teams import cards
from adapters.teams.handler import Connector
from bot.delivery import Notice
from bot.store import PendingRecord, Place
from bot.types import GaveUp, TerminationReason

log = logging.getLogger(__name__)


class TeamsNotifier:
    """Posts notices and updates cards through the Bot Framework connector."""

    def __init__(self, connector: Connector) -> None:
        self._connector = connector

    async def notify(self, place: Place, notice: Notice) -> bool:
        if not place.address:
            log.warning("teams: no conversation reference stored for %s; the user was not told", place.key)
            return False
        if notice.run_id:
            gave_up = GaveUp(TerminationReason.CANCELLED, notice.text, case_id=notice.case_id)
            activity = cards.gave_up_activity(notice.run_id, gave_up)
        else:
            activity = cards.message(notice.text)
        await self._connector.send(place.address, activity)
        return True

    async def card_expired(self, record: PendingRecord) -> bool:
        where = record.platform_message or {}
        if not where.get("reference") or not where.get("activity_id"):
            return False
        who = str(where.get("requester_name") or record.requester)
        line = cards.outcome_line(record.state, record.result, who, record.expires_at)
        activity = cards.message(None, cards.decided_card(record.as_action(), line))
        await self._connector.update(where["reference"], str(where["activity_id"]), activity)
        return True
