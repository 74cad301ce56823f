"""One aiohttp app for every surface: /slack/events, /api/messages, /healthz.

The service is opened once at start-up and shared; each platform adds its routes only when it is
configured, and says so in the log, so a half-configured platform is never silently ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from aiohttp import web

from adapters.helpdesk_destinations import destinations
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
    app.cleanup_ctx.append(_outbox_worker)
    from adapters.slack import add_slack_routes
    from adapters.teams import add_teams_routes

    add_slack_routes(app, settings)
    add_teams_routes(app, settings)
    return app


def _service_context(given: PolicyPal | None):  # type: ignore[no-untyped-def]
    async def context(app: web.Application) -> AsyncIterator[None]:
        settings = app[SETTINGS]
        service = given or await open_service(settings, destinations=destinations(settings))
        app[SERVICE] = service
        yield
        if given is None:
            await service.close()

    return context


async def _outbox_worker(app: web.Application) -> AsyncIterator[None]:
    """Deliver helpdesk cases while the server runs (any number of replicas may run one)."""
    outbox = app[SERVICE].outbox
    task = asyncio.create_task(outbox.run_forever(), name="handoff-outbox")
    yield
    outbox.stop()  # finish what is in flight, so a half-posted case is not posted again after a restart
    with contextlib.suppress(asyncio.CancelledError, TimeoutError):
        await asyncio.wait_for(task, outbox.policy.deliver_timeout_s + 1)


def run_server(settings: Settings, host: str = "0.0.0.0", port: int = 3000) -> int:
    """`policypal serve`: run until interrupted."""
    web.run_app(build_app(settings), host=host, port=port, print=lambda line: log.warning("%s", line))
    return 0
