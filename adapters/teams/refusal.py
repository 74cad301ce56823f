"""/api/messages with Teams off: every request refused, and the log saying how to turn Teams on.

Its own module so that both the SDK-free mount and the SDK's app use it without importing each other.
"""

from __future__ import annotations

import logging

from aiohttp import web

log = logging.getLogger(__name__)

ROUTE = "/api/messages"


def mount_refusal(app: web.Application) -> None:
    """Teams off: /api/messages answers every request 401, and the log says how to turn it on."""
    log.warning(
        "Teams off: MicrosoftAppId/MicrosoftAppPassword are not set, so %s refuses every request "
        "(POLICYPAL_TEAMS_ALLOW_UNAUTHENTICATED=1 serves the Bot Framework Emulator)",
        ROUTE,
    )
    app.router.add_post(ROUTE, _refuse)


async def _refuse(request: web.Request) -> web.Response:
    return web.json_response({"error": "Teams is not configured on this server"}, status=401)
