"""Microsoft Teams on botbuilder: a CloudAdapter at /api/messages in the shared aiohttp app.

Activities -> the inbox -> ``Inbound`` -> service; its outbox rows -> messages and Adaptive Cards
(Universal Actions for Confirm and Cancel) through ``sender``; the helpdesk channel as a handoff
destination; the app package an admin uploads. Only ``app`` imports the Bot Framework SDK, and only
a process that has Teams configured loads it (``mount``).
"""

from typing import TYPE_CHECKING

from adapters.teams.helpdesk import TeamsChannelDestination, teams_destination
from adapters.teams.mount import add_teams_routes, auth_mode, teams_endpoint
from adapters.teams.package import write_package
from adapters.teams.sender import TeamsSender

if TYPE_CHECKING:
    from adapters.teams.app import TEAMS, connector_for

__all__ = [
    "TEAMS",
    "TeamsChannelDestination",
    "TeamsSender",
    "add_teams_routes",
    "auth_mode",
    "connector_for",
    "teams_destination",
    "teams_endpoint",
    "write_package",
]


def __getattr__(name: str) -> object:
    """``TEAMS`` and ``connector_for`` on first use: they load the Bot Framework SDK (about 0.3 s and 20 MB)."""
    if name in ("TEAMS", "connector_for"):
        from adapters.teams import app

        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
