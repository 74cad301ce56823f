"""Who a Slack user is: users.info, cached, mapped to the core's UserRef with groups and guest status."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.inbound import BotIdentity
from adapters.slack.post import as_remote
from bot.errors import RemoteError
from bot.identity import GroupMap
from bot.runtime import ExpiringCache
from bot.types import UserRef

log = logging.getLogger(__name__)

USER_TTL_S = 600.0
MAX_USERS = 5_000
LOOKUP_RETRY_S = (0.5, 1.0, 2.0)  # pauses between users.info attempts while Slack says "try again"


def user_ref(user: dict[str, Any], groups: GroupMap, home: BotIdentity | None = None) -> UserRef:
    """Map a users.info ``user`` object; single- and multi-channel guests are guests, and so are people
    from another organisation (Slack Connect), who are not the workspace's guests but are no employees."""
    profile = user.get("profile") or {}
    email = profile.get("email") or None
    name = profile.get("display_name") or profile.get("real_name") or user.get("real_name") or user.get("name", "")
    return UserRef(
        id=user["id"],
        name=name,
        email=email,
        groups=groups.groups_for(user["id"], email),
        is_guest=bool(user.get("is_restricted") or user.get("is_ultra_restricted")) or is_external(user, home),
    )


def is_external(user: dict[str, Any], home: BotIdentity | None) -> bool:
    """Whether a users.info user belongs to another organisation than the bot's (``home``).

    In a Slack Connect channel the other company's people are full members of their own workspace, so
    Slack does not mark them restricted: a user of another team counts as external unless the bot's
    Enterprise Grid organisation is theirs too (another workspace of one company). Slack's own
    ``is_stranger`` says so as well. A user object without a team says nothing either way.
    """
    if user.get("is_stranger"):
        return True
    team = user.get("team_id")
    if home is None or not team or team == home.team_id:
        return False
    enterprise = (user.get("enterprise_user") or {}).get("enterprise_id") or user.get("enterprise_id")
    return not (home.enterprise_id and enterprise == home.enterprise_id)


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
        home: BotIdentity | None = None,
        ttl_s: float = USER_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._groups = groups
        self._home = home  # the bot's team: people of other organisations are guests here
        self._cache: ExpiringCache[str, UserRef] = ExpiringCache(ttl_s, MAX_USERS, clock)

    async def lookup(self, user_id: str) -> UserRef:
        known = await self._cache.get_or_load(user_id, lambda: self._fetch(user_id))
        return known or UserRef(id=user_id, groups=self._groups.groups_for(user_id), is_guest=True)

    async def _fetch(self, user_id: str) -> UserRef | None:
        """users.info; None (not cached, so the next message asks again) when Slack says it cannot tell.

        A failure that may pass (Slack's internal_error, a 5xx, a timeout) is tried again briefly, then
        raised as a ``RemoteError``: the inbox retries the message later. Treating an employee as a
        guest because Slack hiccupped would refuse them their ticket; only a lasting answer (a missing
        scope, an unknown user, a malformed body) makes them a guest.
        """
        for attempt, pause_s in enumerate(LOOKUP_RETRY_S, start=1):
            try:
                return await self._ask(user_id)
            except RemoteError as exc:
                log.warning("users.info failed for %s (attempt %d: %s); trying again", user_id, attempt, exc)
                await asyncio.sleep(pause_s)
        return await self._ask(user_id)  # the last try: a RemoteError now goes to the inbox

    async def _ask(self, user_id: str) -> UserRef | None:
        try:
            response = await self._client.users_info(user=user_id)
            return user_ref(response["user"], self._groups, self._home)
        except Exception as exc:  # SlackApiError, a connection error after slack_sdk's retries, a bad body
            remote = as_remote(exc, "users.info", user_id)
            if remote.retryable:
                raise remote from exc
            log.error("users.info failed for %s (%s); treating the user as a guest for this request", user_id, exc)
            return None
