"""Who can read a Slack channel: conversations.members, each looked up (users.info, cached), cached a while.

Only used with ``POLICYPAL_SHARED_AUDIENCE=members``: an answer in a channel thread is then built
from what every member may read (bot/audience.py). Anything that stops the list being read whole
(a missing ``channels:read``/``groups:read`` scope, an error, more members than the cap) gives None,
and the place reads public documents only: the list fails closed, never open. A ``member_joined_channel``
event drops the channel's list (``joined``) and records the join in the store, so the next answer
there, from any replica, is built for the newcomer too.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.users import UserDirectory
from bot.audience import JoinLog, MemberLists
from bot.types import UserRef

log = logging.getLogger(__name__)

MEMBERS_TTL_S = 300.0  # people join and leave; five minutes old is fresh enough for an audience
MAX_CHANNELS = 1_000
PAGE = 200
LOOKUPS_AT_ONCE = 8


class ChannelMembers:
    """A channel's members with their groups, or None when they cannot all be known."""

    def __init__(
        self,
        client: AsyncWebClient,
        users: UserDirectory,
        *,
        bot_user_id: str,
        max_members: int,
        ttl_s: float = MEMBERS_TTL_S,
        clock: Callable[[], float] = time.monotonic,
        joins: JoinLog | None = None,
        workspace: str = "",
    ) -> None:
        self._client = client
        self._users = users
        self._bot_user_id = bot_user_id
        self._max_members = max_members
        self._lists = MemberLists(ttl_s, MAX_CHANNELS, clock, joins=joins, scope=f"slack:{workspace}")

    async def of(self, channel: str) -> tuple[UserRef, ...] | None:
        return await self._lists.of(channel, lambda: self._fetch(channel))

    async def joined(self, channel: str) -> None:
        """Someone joined ``channel``: its list is read again for the next answer or click there, in every
        replica sharing ``joins``. Raises when the join cannot be recorded (the event is worked on again)."""
        await self._lists.joined(channel)

    async def _fetch(self, channel: str) -> tuple[UserRef, ...] | None:
        try:
            ids = await self._member_ids(channel)
            if ids is None:
                return None
            gate = asyncio.Semaphore(LOOKUPS_AT_ONCE)

            async def lookup(user_id: str) -> UserRef:
                async with gate:
                    return await self._users.lookup(user_id)

            return tuple(await asyncio.gather(*(lookup(user_id) for user_id in ids)))
        except Exception as exc:  # a scope, an error, a timeout: public documents only, said in the log
            log.warning("the members of %s could not be read (%s); answering there from public documents", channel, exc)
            return None

    async def _member_ids(self, channel: str) -> list[str] | None:
        ids: list[str] = []
        cursor: str | None = None
        while True:
            response = await self._client.conversations_members(channel=channel, limit=PAGE, cursor=cursor)
            ids += [str(member) for member in response.get("members") or [] if member != self._bot_user_id]
            if len(ids) > self._max_members:
                log.info(
                    "%s has more than %d members: answering there from public documents", channel, self._max_members
                )
                return None
            cursor = (response.get("response_metadata") or {}).get("next_cursor") or None
            if not cursor:
                return ids
