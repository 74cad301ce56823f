"""The platform half of the configuration check: Slack, Teams and the helpdesk destinations.

``bot.config_check`` checks what needs no platform code; these run beside it (``PLATFORM_CHECKS``)
for ``policypal config check`` and at the start of ``policypal serve``. Slack's token is tried
against the Web API (auth.test), as the server would at start; Teams' credentials can only be
proved by Microsoft's login service on the first message, so only their completeness is checked.
"""

from __future__ import annotations

import asyncio

import aiohttp

from adapters.destinations import problems as helpdesk_problems
from bot.config import Settings
from bot.config_check import Check
from bot.errors import ConfigError

SLACK_TIMEOUT_S = 15.0


async def check_slack(settings: Settings) -> list[str]:
    """Slack is off, or fully configured with a bot token Slack accepts."""
    from adapters.slack import slack_credentials, verify_token, web_client

    try:
        credentials = slack_credentials(settings)
    except ConfigError as exc:
        return [str(exc)]
    if credentials is None:
        return []
    async with aiohttp.ClientSession() as session:
        client = web_client(credentials.bot_token, session, credentials.api_url)
        try:
            async with asyncio.timeout(SLACK_TIMEOUT_S):
                await verify_token(client)
        except ConfigError as exc:
            return [str(exc)]
        except TimeoutError:
            return [f"Slack's Web API ({client.base_url}) did not answer auth.test within {SLACK_TIMEOUT_S:.0f} s"]
    return []


async def check_teams(settings: Settings) -> list[str]:
    """Teams is off, or has both halves of its credentials."""
    from adapters.teams import auth_mode

    try:
        auth_mode(settings)
    except ConfigError as exc:
        return [str(exc)]
    return []


async def check_helpdesk(settings: Settings) -> list[str]:
    """Every configured helpdesk destination has all its settings."""
    return await helpdesk_problems(settings)


PLATFORM_CHECKS: tuple[Check, ...] = (check_slack, check_teams, check_helpdesk)
