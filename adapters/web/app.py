"""The console as an aiohttp sub-application at /console: the gate in front of every route, assets included.

Mounted by ``adapters.server`` only when ``Settings.console_enabled``; otherwise /console is a 404
like any unknown path. Unauthenticated requests get 401 with the sign-in form (or, behind a proxy,
a page saying the proxy did not name an operator), never a redirect that a script would follow.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from aiohttp import web

from adapters.app_keys import SERVICE
from adapters.web import actions, gaps, helpdesk, overview, runs, signin
from adapters.web.access import Access
from adapters.web.auth import Gate
from adapters.web.keys import ACCESS, GATE, OPERATOR, TEMPLATES
from adapters.web.render import page, templates
from bot.config import Settings

log = logging.getLogger(__name__)

CONSOLE_PATH = "/console"
STATIC = Path(__file__).with_name("static")
OPEN_ROUTES = frozenset({"sign_in"})  # answer POSTed secrets; every GET still needs an operator

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def add_console_routes(app: web.Application, settings: Settings) -> None:
    """Mount the console on ``app`` when an operator can get in (a secret or a proxy header is set)."""
    if settings.console_enabled:
        console = console_app(settings)
        app.add_subapp(CONSOLE_PATH, console)
        app.cleanup_ctx.append(_gaps_warm_up(console))
        header = settings.console_user_header
        way_in = "the secret's sign-in" if settings.console_secret else f"the proxy's {header} header"
        log.info("operators' console at %s/ (%s)", CONSOLE_PATH, way_in)


def console_app(settings: Settings) -> web.Application:
    console = web.Application(middlewares=[_gate])
    console[GATE] = Gate(settings)
    console[ACCESS] = Access(settings)
    console[TEMPLATES] = templates()
    console[gaps.GROUPER] = gaps.Grouper()
    router = console.router
    router.add_get("/", overview.show, name="overview")
    router.add_get("/runs", runs.listing, name="runs")
    router.add_get("/runs/{run_id}", runs.show, name="run")
    router.add_get("/gaps", gaps.show, name="gaps")
    router.add_get("/gaps.csv", gaps.export, name="gaps_csv")
    router.add_get("/cases", helpdesk.listing, name="cases")
    router.add_get("/cases/{number:\\d+}", helpdesk.show, name="case")
    router.add_post("/cases/{number:\\d+}/retry", helpdesk.retry, name="case_retry")
    router.add_get("/actions", actions.listing, name="actions")
    router.add_get("/sign-in", signin.form, name="sign_in_form")
    router.add_post("/sign-in", signin.sign_in, name="sign_in")
    router.add_post("/sign-out", signin.sign_out, name="sign_out")
    router.add_static("/static", STATIC, name="static")
    return console


def _gaps_warm_up(console: web.Application) -> Callable[[web.Application], AsyncIterator[None]]:
    """Group the knowledge gaps in the background once the server runs (``gaps.warm_up``)."""

    async def context(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(gaps.warm_up(app[SERVICE], console[gaps.GROUPER]), name="console-gaps-warm-up")
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return context


@web.middleware
async def _gate(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Let operators in; everyone else gets 401 and the way in, on every route of the console."""
    route = request.match_info.route.name
    operator = request.app[GATE].operator(request)
    if operator is None and route not in OPEN_ROUTES:
        response = page(request, "sign_in.html", status=401, failed=False)
        response.headers["WWW-Authenticate"] = 'Bearer realm="policypal-console"'
        return response
    if operator is not None:
        request[OPERATOR] = operator
        if request.method == "POST" and route not in OPEN_ROUTES:
            form = await request.post()
            if not request.app[GATE].form_token_valid(operator, str(form.get("form_token", ""))):
                raise web.HTTPForbidden(text="This form is out of date or came from another site; reload the page.")
    return await handler(request)
