"""Who a Slack user is: users.info, cached, mapped to the core's UserRef with groups and guest status."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.identity import GroupMap
from bot.types import UserRef

log = logging.getLogger(__name__)

USER_TTL_S = 600.0
MAX_USERS = 5_000


def user_ref(user: dict[str, Any], groups: GroupMap) -> UserRef:
    """Map a users.info ``user`` object; single- and multi-channel guests are guests."""
    profile = user.get("profile") or {}
    email = profile.get("email") or None
    name = profile.get("display_name") or profile.get("real_name") or user.get("real_name") or user.get("name", "")
    return UserRef(
        id=user["id"],
        name=name,
        email=email,
        groups=groups.groups_for(user["id"], email),
        is_guest=bool(user.get("is_restricted") or user.get("is_ultra_restricted")),
    )


class UserDirectory:
    """users.info with a time-limited in-memory cache; concurrent lookups of one user share one call.

    When Slack cannot tell us who someone is, the user is treated as a guest (no write tools): a
    missing ``users:read`` scope must not quietly give guests what they may not have.
    """

    def __init__(
        self,
        client: AsyncWebClient,
        groups: GroupMap,
        *,
        ttl_s: float = USER_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._groups = groups
        self._ttl_s = ttl_s
        self._clock = clock
        self._cache: OrderedDict[str, tuple[float, UserRef]] = OrderedDict()
        self._inflight: dict[str, asyncio.Future[UserRef]] = {}

    async def lookup(self, user_id: str) -> UserRef:
        cached = self._cache.get(user_id)
        if cached and cached[0] > self._clock():
            return cached[1]
        if (waiting := self._inflight.get(user_id)) is not None:
            return await asyncio.shield(waiting)
        future: asyncio.Future[UserRef] = asyncio.get_running_loop().create_future()
        self._inflight[user_id] = future
        try:
            user = await self._fetch(user_id)
        except asyncio.CancelledError:
            future.cancel()
            raise
        finally:
            del self._inflight[user_id]
        future.set_result(user)
        return user

    async def _fetch(self, user_id: str) -> UserRef:
        try:
            response = await self._client.users_info(user=user_id)
            user = user_ref(response["user"], self._groups)
        except Exception as exc:  # any failure: SlackApiError, a connection error after retries, a bad body
            log.error("users.info failed for %s (%s); treating the user as a guest for this request", user_id, exc)
            return UserRef(id=user_id, groups=self._groups.groups_for(user_id), is_guest=True)
        self._remember(user)
        return user

    def _remember(self, user: UserRef) -> None:
        self._cache[user.id] = (self._clock() + self._ttl_s, user)
        self._cache.move_to_end(user.id)
        while len(self._cache) > MAX_USERS:
            self._cache.popitem(last=False)
