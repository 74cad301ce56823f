"""What operators and load balancers ask the server: /healthz, /readyz, /metrics.

- ``/healthz``: the process is alive and its event loop answers (restart it if not);
- ``/readyz``: it can answer people now (database, index and each configured platform reachable,
  not shutting down); take it out of rotation if not;
- ``/metrics``: Prometheus text (prometheus-client's exposition). Serve it to your scraper only:
  route just /slack/events and /api/messages from the internet.

The middleware counts Slack and Teams requests by status, errors included.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web
from aiohttp.web_log import AccessLogger
from prometheus_client import CONTENT_TYPE_LATEST

from adapters.app_keys import READINESS, SERVICE
from bot.runtime import Readiness
from bot.service import PolicyPal

if TYPE_CHECKING:
    from adapters.teams.app import TeamsEndpoint

log = logging.getLogger(__name__)

PROBE_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
PLATFORM_PATHS = {"/slack/events": "slack", "/api/messages": "teams"}  # the routes the app manifests name
SLACK_PROBE_EVERY_S = 30.0  # auth.test is rate limited; once per 30 s is plenty for a readiness answer
PENDING_COUNT_S = 2.0  # well inside a scrape timeout, so a hung database cannot take every metric with it

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def add_health_routes(app: web.Application) -> None:
    app[READINESS] = Readiness()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    ready, checks = await request.app[READINESS].check()
    body = {"status": "ready" if ready else "not ready", "checks": checks}
    return web.json_response(body, status=200 if ready else 503)


async def metrics(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    await _count_pending(service)
    return web.Response(body=service.metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _count_pending(service: PolicyPal) -> None:
    """Refresh the pending-actions gauge; without a database, drop it (not stale) and serve the rest.

    The other metrics live in this process, and a database outage is exactly when they are wanted.
    """
    try:
        async with asyncio.timeout(PENDING_COUNT_S):
            counts = await service.store.pending.counts()
    except Exception as exc:
        log.warning("/metrics without policypal_pending_actions: the database did not answer (%s)", _why(exc))
        service.metrics.pending.clear()
        return
    service.metrics.set_pending(counts)


def _why(exc: Exception) -> str:
    if isinstance(exc, TimeoutError):
        return f"no answer within {PENDING_COUNT_S:.0f} s"
    return f"{type(exc).__name__}: {exc}"


@web.middleware
async def count_platform_requests(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Slack/Teams requests by status: a 401 storm or 5xx shows on a dashboard before users say so."""
    platform = PLATFORM_PATHS.get(request.path)
    if platform is None:
        return await handler(request)
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    finally:
        if SERVICE in request.app:
            request.app[SERVICE].metrics.requests.labels(platform=platform, status=str(status)).inc()


def register_probes(app: web.Application, service: PolicyPal) -> None:
    """What /readyz checks: the database, the index, and each platform mounted on this app."""
    readiness = app[READINESS]
    readiness.add("database", service.store.ping)
    if service.searcher is not None:  # the index this process opened (a test's own searcher is not probed)
        readiness.add("index", service.searcher.ping)
    from adapters.slack import SLACK
    from adapters.teams import teams_endpoint  # not TEAMS: that would load the Bot Framework SDK to find no Teams

    if SLACK in app:
        readiness.add("slack", app[SLACK].client.auth_test, every_s=SLACK_PROBE_EVERY_S)
    if (teams := teams_endpoint(app)) is not None:
        readiness.add("teams", _teams_probe(teams))


def _teams_probe(teams: TeamsEndpoint) -> Callable[[], Awaitable[None]]:
    async def started() -> None:
        # Microsoft's login is only proved by the first real turn; here: mounted and its bot built.
        if teams.handler is None:
            raise RuntimeError("the Teams endpoint has not started")

    return started


class QuietProbesAccessLogger(AccessLogger):
    """The access log without load balancers' and scrapers' polls, which would drown everything else."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        if request.path in PROBE_PATHS and response.status < 400:
            return
        super().log(request, response, time)
