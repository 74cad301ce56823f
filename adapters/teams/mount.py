"""Teams' entry points for the server and the config check, loading the Bot Framework SDK only where Teams is set up.

botbuilder and what it pulls in take about 0.3 s and 20 MB to import. A server with no Teams setting
at all gets the same refusing /api/messages here that ``adapters.teams.app`` would mount, without
loading it; any Teams setting, even half of one or a wrong one, goes to ``adapters.teams.app``, which
decides the mode and says what is wrong.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from adapters.app_keys import SETTINGS
from adapters.teams.refusal import mount_refusal
from bot.config import Settings

if TYPE_CHECKING:
    from adapters.teams.app import AuthMode, TeamsEndpoint


def configured(settings: Settings) -> bool:
    """Whether any Teams setting is present: without one, the mode can only be "off"."""
    password = settings.microsoft_app_password.get_secret_value() if settings.microsoft_app_password else ""
    return bool(
        settings.microsoft_app_id or password or settings.microsoft_app_type or settings.teams_allow_unauthenticated
    )


def auth_mode(settings: Settings) -> AuthMode:
    """Which authentication mode the settings ask for (``adapters.teams.app.auth_mode``), with no SDK when "off"."""
    if not configured(settings):
        return "off"
    from adapters.teams import app as teams_app

    return teams_app.auth_mode(settings)


def add_teams_routes(app: web.Application, settings: Settings) -> None:
    """Mount /api/messages: the SDK's endpoint when Teams is configured, else a refusal of every request."""
    if configured(settings):
        from adapters.teams import app as teams_app

        teams_app.add_teams_routes(app, settings)
        return
    mount_refusal(app)


def teams_endpoint(app: web.Application) -> TeamsEndpoint | None:
    """The Teams endpoint mounted on ``app``, if any; finding none loads no SDK."""
    if not configured(app[SETTINGS]):
        return None
    from adapters.teams.app import TEAMS

    return app.get(TEAMS)
