"""Who a Slack user is: users.info, cached, mapped to the core's UserRef with groups and guest status."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.identity import GroupMap
from bot.runtime import ExpiringCache
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
        self._cache: ExpiringCache[str, UserRef] = ExpiringCache(ttl_s, MAX_USERS, clock)

    async def lookup(self, user_id: str) -> UserRef:
        known = await self._cache.get_or_load(user_id, lambda: self._fetch(user_id))
        return known or UserRef(id=user_id, groups=self._groups.groups_for(user_id), is_guest=True)

    async def _fetch(self, user_id: str) -> UserRef | None:
        """users.info; None (not cached, so the next message asks again) when Slack cannot say who it is."""
        try:
            response = await self._client.users_info(user=user_id)
            return user_ref(response["user"], self._groups)
        except Exception as exc:  # any failure: SlackApiError, a connection error after retries, a bad body
            log.error("users.info failed for %s (%s); treating the user as a guest for this request", user_id, exc)
            return None
