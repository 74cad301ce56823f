"""One aiohttp app for every surface: /slack/events, /api/messages, /healthz.

The service is opened once at start-up and shared; each platform adds its routes only when it is
configured, and says so in the log, so a half-configured platform is never silently ignored.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from aiohttp import web

from bot.config import Settings
from bot.service import PolicyPal
from bot.wiring import open_service

log = logging.getLogger(__name__)

SERVICE: web.AppKey[PolicyPal] = web.AppKey("service", PolicyPal)
SETTINGS: web.AppKey[Settings] = web.AppKey("settings", Settings)


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


def build_app(settings: Settings, service: PolicyPal | None = None) -> web.Application:
    """The app; tests pass a service they built, production lets start-up open one from settings."""
    app = web.Application()
    app[SETTINGS] = settings
    app.router.add_get("/healthz", healthz)
    app.cleanup_ctx.append(_service_context(service))
    from adapters.slack import add_slack_routes
    from adapters.teams import add_teams_routes

    add_slack_routes(app, settings)
    add_teams_routes(app, settings)
    return app


def _service_context(given: PolicyPal | None):  # type: ignore[no-untyped-def]
    async def context(app: web.Application) -> AsyncIterator[None]:
        service = given or await open_service(app[SETTINGS])
        app[SERVICE] = service
        yield
        if given is None:
            await service.close()

    return context


def run_server(settings: Settings, host: str = "0.0.0.0", port: int = 3000) -> int:
    """`policypal serve`: run until interrupted."""
    web.run_app(build_app(settings), host=host, port=port, print=lambda line: log.warning("%s", line))
    return 0
